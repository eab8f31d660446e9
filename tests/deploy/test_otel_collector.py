"""deploy/otel-collector/: every config is one the OpenTelemetry Collector would load, and
the event path's configs send every span to Langfuse and, routed by trace id, to observer.

No Collector binary runs here, so each file is checked against the Collector's documented
configuration structurally (no schema ships for it):
- the top level and the pipelines: opentelemetry.io/docs/collector/configuration/
  ("receivers", "processors", "exporters", "extensions", "connectors", "service";
  components named `type[/name]`; every pipeline component defined in its section, and
  every defined component of a pipeline type used... or not: unused ones are allowed);
- each component's keys: its README in opentelemetry-collector(-contrib)
  (`receiver/otlpreceiver`, `processor/batchprocessor`, `exporter/otlpexporter`,
  `exporter/otlphttpexporter`, `exporter/debugexporter`, `receiver/prometheusreceiver`,
  `exporter/loadbalancingexporter`: `routing_key` one of service, traceID, metric,
  resource; `protocol.otlp` the OTLP exporter's settings without `endpoint`; `resolver`
  one of `static.hostnames`, `dns.hostname`, `k8s.service`), and the exporter helper's
  `retry_on_failure` and `sending_queue`;
- yamllint's default rules for YAML itself.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from observer.config import Settings
from tests.deploy.support import DEPLOY, load_yaml, run, tool

COLLECTOR = DEPLOY / "otel-collector"
CONFIGS = sorted(COLLECTOR.glob("*.yaml"))
TOP = {"receivers", "processors", "exporters", "extensions", "connectors", "service"}
PIPELINE_TYPES = {"traces", "metrics", "logs"}
_ENDPOINT = {"endpoint": str}
_RETRY = {"enabled", "initial_interval", "max_interval", "max_elapsed_time", "multiplier"}
_QUEUE = {"enabled", "num_consumers", "queue_size", "storage", "blocking", "sizer"}
_CLIENT = {
    "endpoint",
    "tls",
    "headers",
    "compression",
    "timeout",
    "retry_on_failure",
    "sending_queue",
    "balancer_name",
    "auth",
    "keepalive",
}
# Each documented component type: its allowed top-level keys.
COMPONENTS: dict[str, dict[str, set[str]]] = {
    "receivers": {
        "otlp": {"protocols"},
        "prometheus": {"config", "target_allocator"},
    },
    "processors": {
        "batch": {"timeout", "send_batch_size", "send_batch_max_size", "metadata_keys"},
        "memory_limiter": {"check_interval", "limit_mib", "spike_limit_mib"},
    },
    "exporters": {
        "otlp": _CLIENT,
        "otlphttp": (_CLIENT - {"balancer_name", "keepalive"})
        | {"traces_endpoint", "metrics_endpoint", "logs_endpoint", "encoding"},
        "debug": {"verbosity", "sampling_initial", "sampling_thereafter"},
        "loadbalancing": {"routing_key", "protocol", "resolver", "timeout"},
    },
}


def configs() -> list[Any]:
    return [pytest.param(path, id=path.name) for path in CONFIGS]


def _type(name: str) -> str:
    return name.split("/", 1)[0]


@pytest.mark.parametrize("path", configs())
def test_the_config_is_one_the_collector_loads(path: Path) -> None:
    config = load_yaml(path)
    assert set(config) <= TOP, f"unknown top-level keys: {set(config) - TOP}"
    for section in ("receivers", "processors", "exporters"):
        for name, body in (config.get(section) or {}).items():
            kind = _type(name)
            assert re.fullmatch(r"[a-z_]+(/[A-Za-z0-9_.-]+)?", name), name
            assert kind in COMPONENTS[section], f"{section}.{name}: not a documented type"
            unknown = set(body or {}) - COMPONENTS[section][kind]
            assert not unknown, f"{section}.{name}: undocumented keys {unknown}"
    pipelines = config["service"]["pipelines"]
    for pipeline, parts in pipelines.items():
        assert _type(pipeline) in PIPELINE_TYPES, pipeline
        assert parts.get("receivers") and parts.get("exporters"), pipeline
        for section in ("receivers", "processors", "exporters"):
            for name in parts.get(section) or []:
                assert name in (config.get(section) or {}), f"{pipeline}: {name} is not defined"


@pytest.mark.parametrize("path", configs())
def test_yamllint_passes(path: Path) -> None:
    result = run(
        [tool("yamllint"), "-d", "{extends: default, rules: {line-length: {max: 120}, "
         "document-start: disable, comments: {min-spaces-from-content: 2}}}", str(path)]
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def _exporters_of(config: dict[str, Any], kind: str) -> dict[str, Any]:
    return {n: b for n, b in config["exporters"].items() if _type(n) == kind}


def _traces_exporters(config: dict[str, Any]) -> list[str]:
    return [e for p, parts in config["service"]["pipelines"].items() if _type(p) == "traces"
            for e in parts["exporters"]]  # fmt: skip


def _otlp_receiver_endpoints(config: dict[str, Any]) -> dict[str, str]:
    protocols = config["receivers"]["otlp"]["protocols"]
    return {p: body["endpoint"] for p, body in protocols.items()}


def test_fan_out_sends_every_span_to_langfuse_and_to_observer() -> None:
    config = load_yaml(COLLECTOR / "fan-out.yaml")
    used = _traces_exporters(config)
    http = _exporters_of(config, "otlphttp")
    langfuse = http["otlphttp/langfuse"]
    observer = http["otlphttp/observer"]
    assert {"otlphttp/langfuse", "otlphttp/observer"} <= set(used)
    # otlphttp adds /v1/traces: Langfuse's route, and observer's /v1/traces
    assert langfuse["endpoint"].endswith("/api/public/otel")
    assert langfuse["headers"]["x-langfuse-ingestion-version"] == "4"
    assert observer["endpoint"].endswith(f":{Settings().otlp.address[1]}")
    # the credentials observer checks: the Langfuse keys as basic auth
    assert observer["headers"]["Authorization"].startswith("Basic ")
    # observer's 429/503 are retried, not dropped; a queue per exporter
    assert observer["retry_on_failure"]["enabled"] and observer["sending_queue"]["enabled"]


def test_several_observers_get_each_trace_whole_routed_by_trace_id() -> None:
    config = load_yaml(COLLECTOR / "load-balancing.yaml")
    balancing = config["exporters"]["loadbalancing/observers"]
    assert balancing["routing_key"] == "traceID"
    assert "endpoint" not in balancing["protocol"]["otlp"]  # set per backend by the exporter
    resolver = balancing["resolver"]
    assert set(resolver) <= {"static", "dns", "k8s"} and resolver
    hostnames = resolver["static"]["hostnames"]
    assert len(hostnames) >= 2 and all(h.endswith(":4317") for h in hostnames)
    assert set(_traces_exporters(config)) == {"otlphttp/langfuse", "loadbalancing/observers"}
    # the second tier beside each replica: gRPC in on the port the first tier sends to,
    # OTLP/HTTP out to its observer on loopback (observer takes OTLP/HTTP only)
    replica = load_yaml(COLLECTOR / "replica.yaml")
    assert _otlp_receiver_endpoints(replica) == {"grpc": "0.0.0.0:4317"}
    (out,) = _exporters_of(replica, "otlphttp").values()
    assert out["endpoint"] == f"http://127.0.0.1:{Settings().otlp.address[1]}"
    assert out["retry_on_failure"]["enabled"]


def test_every_collector_config_is_listed_in_the_deploy_readme() -> None:
    readme = (DEPLOY / "README.md").read_text()
    for path in CONFIGS:
        assert f"otel-collector/{path.name}" in readme, path.name
