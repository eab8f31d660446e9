"""OpenTelemetry: a real pass against the fake Langfuse, exported to a local OTLP receiver.

The receiver decodes the protobuf payloads (`opentelemetry-proto`); the spans and,
with `judge_to_langfuse`, the judge's generations in a stand-in for Langfuse's OTLP
endpoint are read back from it. Metrics are not pushed (a collector scrapes
`/metrics`: tests/telemetry/test_metrics_golden.py). Without any OTEL variable
nothing is built and nothing is sent.
"""

from __future__ import annotations

import base64
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from langfuse._client.span_processor import LangfuseSpanProcessor
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from structlog.testing import capture_logs

from observer import app
from observer.mapping.convention import trace_filter
from observer.mapping.rules import MappingRules, Skip
from observer.telemetry.logging import configure_logging
from observer.telemetry.metrics import Metrics
from observer.telemetry.otel import (
    JUDGE_ENVIRONMENT,
    LangfuseOtlp,
    LangfuseSpanExporter,
    Telemetry,
    asked_for,
    resource,
)
from tests.daemon_helpers import after, configure, demo_counts, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.openai_stub import OpenAIStub
from tests.fakes.otlp_receiver import (
    LANGFUSE_TRACES_PATH,
    OtlpGrpcReceiver,
    OtlpReceiver,
    ReceivedSpan,
)

DEMO = demo_counts()
PUBLIC, SECRET = "pk-lf-judge", "sk-lf-judge"
BASIC = "Basic " + base64.b64encode(f"{PUBLIC}:{SECRET}".encode()).decode()


@pytest.fixture(autouse=True)
def no_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own OTEL_ variables never leak in (conftest clears only observer's)."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


@pytest.fixture
def collector() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture
def langfuse() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        server.add_observations(demo_observations())
        yield server


def one_pass(
    monkeypatch: pytest.MonkeyPatch,
    langfuse: FakeLangfuse,
    state: Path,
    metrics: Metrics,
    telemetry: Telemetry | None = None,
    **env: str,
) -> app.OnceResult:
    """`observer run --once` as the composition root runs it."""
    settings = configure(monkeypatch, langfuse, **env)
    judge_client = None
    if settings.judge.enabled:
        judge_client = app.build_judge_client(settings, telemetry)
    parts = app.build(
        settings,
        state_path=state,
        metrics=metrics,
        judge_client=judge_client,
        telemetry=telemetry,
    )
    try:
        result = app.run_once(parts, after(demo_observations()))
    finally:
        parts.state.close()
    assert result.exit_code == 0, result.error
    return result


def environ(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    """The standard variables, where the SDK reads them: the process environment."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_span_id == parent.span_id]


# -- a pass, exported ---------------------------------------------------------------------


def test_a_pass_exports_its_spans_and_the_same_metrics(
    collector: OtlpReceiver,
    langfuse: FakeLangfuse,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    metrics = Metrics()
    telemetry = Telemetry()
    assert telemetry.parts == ["spans"]  # metrics: scraped from /metrics, not pushed
    result = one_pass(monkeypatch, langfuse, tmp_path / "s.sqlite", metrics, telemetry)
    assert telemetry.shutdown(5.0)
    passed = result.passed
    assert passed is not None

    spans = collector.spans
    assert spans
    for span in spans:
        assert span.resource["service.name"] == "observer"
        assert span.resource["service.version"]
        assert span.scope == "observer"

    (poll,) = collector.spans_named("observer.poll_pass")
    assert poll.attributes["observer.observations"] == passed.observations
    assert poll.attributes["observer.pipeline.traces.scored"] == DEMO.scored
    assert poll.attributes["observer.pipeline.traces.skipped"] == DEMO.skipped
    assert poll.attributes["observer.scores"] == DEMO.scores
    assert poll.attributes["observer.window.start"] < poll.attributes["observer.window.end"]

    handled = collector.spans_named("observer.trace_scored")
    assert len(handled) == passed.traces == DEMO.traces
    assert children(spans, poll) == handled  # one per trace, inside the pass
    outcomes = Counter(s.attributes["observer.outcome"] for s in handled)
    assert outcomes == {"scored": DEMO.scored, "skipped": DEMO.skipped}
    assert {s.attributes["observer.trace_id"] for s in handled} == {
        o["traceId"] for o in demo_observations()
    }
    reasons = Counter(s.attributes.get("observer.skip_reason") for s in handled)
    assert reasons == {None: DEMO.scored, **passed.skip_reasons}
    allowed = {
        "observer.trace_id",
        "observer.outcome",
        "observer.environment",
        "observer.skip_reason",
    }
    for span in handled:
        assert set(span.attributes) <= allowed  # never the question or the answer
        assert span.attributes["observer.environment"]

    batches = collector.spans_named("observer.score_batch_pushed")
    assert batches
    assert sum(s.attributes["observer.batch.size"] for s in batches) == DEMO.scores
    assert {s.attributes["observer.result"] for s in batches} == {"ok"}

    assert collector.points == []  # metrics are scraped from /metrics, not pushed


def test_the_judge_calls_follow_the_genai_conventions_and_reach_langfuse(
    collector: OtlpReceiver,
    langfuse: FakeLangfuse,
    judge_stub: OpenAIStub,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    # Headers meant for the collector must never reach Langfuse.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=collector-secret")
    metrics = Metrics()
    with OtlpReceiver(auth=BASIC) as langfuse_otlp:
        telemetry = Telemetry(judge_to_langfuse=LangfuseOtlp(langfuse_otlp.url, PUBLIC, SECRET))
        assert telemetry.judge_langfuse is not None
        one_pass(
            monkeypatch,
            langfuse,
            tmp_path / "s.sqlite",
            metrics,
            telemetry,
            OBSERVER_JUDGE__ENABLED="true",
            OBSERVER_JUDGE__RATE="1.0",
            OBSERVER_JUDGE__PRICE_PROMPT_PER_1K="0.5",
            OBSERVER_JUDGE__PRICE_COMPLETION_PER_1K="1.5",
        )
        assert telemetry.shutdown(5.0)
        generations = langfuse_otlp.spans
        langfuse_requests = langfuse_otlp.requests

    judged = metrics.value("observer_judged_traces_total", result="judged") + metrics.value(
        "observer_judged_traces_total", result="abstained"
    )
    assert judged == DEMO.scored

    # The ops collector: observer.judge per judged trace, observer.judge_call per LLM call.
    calls = collector.spans_named("observer.judge_call")
    assert len(calls) == judge_stub.calls == metrics.value("observer_judge_calls_total")
    judges = collector.spans_named("observer.judge")
    assert len(judges) == DEMO.scored
    judge_ids = {s.span_id for s in judges}
    input_tokens = output_tokens = 0
    for call in calls:
        a = call.attributes
        assert call.parent_span_id in judge_ids
        assert call.kind == trace.SpanKind.CLIENT.value + 1  # proto kinds count from 1
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == a["gen_ai.system"] == "openai"
        assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "stub-judge"
        assert a["gen_ai.request.temperature"] == 0
        assert a["gen_ai.response.finish_reasons"] == ["stop"]
        assert a["server.address"] == "127.0.0.1"
        assert a["observer.judge.step"] in ("observer_claims", "observer_verdicts")
        assert not any(key.startswith("langfuse.") for key in a)  # no text to the collector
        input_tokens += a["gen_ai.usage.input_tokens"]
        output_tokens += a["gen_ai.usage.output_tokens"]
    assert input_tokens == metrics.value("observer_judge_tokens_total", kind="prompt")
    assert output_tokens == metrics.value("observer_judge_tokens_total", kind="completion")
    assert all(r.headers.get("x-collector-key") == "collector-secret" for r in collector.requests)

    # Langfuse: one observer.judge trace per judged trace, each call a generation.
    assert langfuse_requests and all(r.status == 200 for r in langfuse_requests)
    assert all(r.path == LANGFUSE_TRACES_PATH for r in langfuse_requests)
    assert all(r.headers["authorization"] == BASIC for r in langfuse_requests)
    assert not any("x-collector-key" in r.headers for r in langfuse_requests)
    roots = [s for s in generations if s.name == "observer.judge"]
    gens = [s for s in generations if s.attributes.get("langfuse.observation.type") == "generation"]
    assert len(roots) == DEMO.scored and len(gens) == len(calls)
    root_ids = {s.span_id for s in roots}
    ops_traces = {s.trace_id for s in collector.spans}
    for span in generations:
        assert span.resource["langfuse.environment"] == JUDGE_ENVIRONMENT
        assert span.attributes["langfuse.environment"] == JUDGE_ENVIRONMENT
        # The Langfuse SDK's own tracer (was "observer" when observer set the attributes
        # by hand); observer still skips these traces by their `observer.` root name.
        assert span.scope == "langfuse-sdk"
        assert span.trace_id not in ops_traces  # its own traces, apart from observer's spans
    for root in roots:
        assert root.parent_span_id == ""
        assert root.attributes["langfuse.trace.name"] == "observer.judge"
        assert root.attributes["observer.trace_id"]
    cost = 0.0
    for gen in gens:
        a = gen.attributes
        assert gen.parent_span_id in root_ids
        assert gen.name in ("observer_claims", "observer_verdicts")
        assert a["langfuse.observation.model.name"] == "stub-judge"
        assert '"role"' in a["langfuse.observation.input"]  # the messages, in the user's Langfuse
        assert a["langfuse.observation.output"]
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert '"input"' in a["langfuse.observation.usage_details"]
        cost += float(a["langfuse.observation.cost_details"].split('"total": ')[1].rstrip("}"))
    assert cost == pytest.approx(metrics.value("observer_judge_cost_usd_total"))

    # As Langfuse would show a root to observer's own poller: never scored.
    for root in roots:
        as_read = {
            "traceId": root.trace_id,
            "name": root.name,
            "isRootObservation": True,
            "metadata": {"scope": {"name": root.scope}},
        }
        skip = trace_filter(as_read, JUDGE_ENVIRONMENT, MappingRules())
        assert isinstance(skip, Skip) and skip.reason == "own_trace"


def test_a_failed_judge_call_is_an_error_span(
    collector: OtlpReceiver,
    langfuse: FakeLangfuse,
    judge_stub: OpenAIStub,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.url + "/v1/traces")
    judge_stub.reject_json_schema = True  # the first call fails with a 400; json_object then works
    telemetry = Telemetry()
    assert telemetry.parts == ["spans"]
    one_pass(
        monkeypatch,
        langfuse,
        tmp_path / "s.sqlite",
        Metrics(),
        telemetry,
        OBSERVER_JUDGE__ENABLED="true",
        OBSERVER_JUDGE__RATE="1.0",
        OBSERVER_JUDGE__CONCURRENCY="1",
    )
    assert telemetry.shutdown(5.0)
    calls = collector.spans_named("observer.judge_call")
    failed = [c for c in calls if c.status_code == 2]
    assert len(failed) == 1
    assert failed[0].attributes["error.type"] == "BadRequestError"
    assert "gen_ai.usage.input_tokens" not in failed[0].attributes
    assert all(c.status_code != 2 for c in calls if c is not failed[0])
    assert collector.points == []  # metrics not asked for


# -- nothing set: nothing built, nothing sent ------------------------------------------------------


def test_without_otel_variables_nothing_is_built_or_sent(
    collector: OtlpReceiver,
    langfuse: FakeLangfuse,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    threads = {t.name for t in threading.enumerate()}
    # What it costs is the CPU time of this thread: a busy machine stretches the wall clock.
    started = time.thread_time()
    telemetry = Telemetry()
    assert time.thread_time() - started < 0.05
    assert not telemetry.enabled and telemetry.judge_langfuse is None
    assert {t.name for t in threading.enumerate()} == threads  # no exporter thread
    span = telemetry.tracer.start_span("observer.poll_pass")
    assert not span.is_recording()
    span.end()
    one_pass(monkeypatch, langfuse, tmp_path / "s.sqlite", Metrics(), telemetry)
    assert telemetry.force_flush(1.0) and telemetry.shutdown(1.0)
    assert collector.requests == []

    # A span costs next to nothing on the hot path when telemetry is off.
    tracer = telemetry.tracer
    started = time.thread_time()
    for _ in range(10_000):
        with tracer.start_as_current_span("observer.trace_scored") as span:
            span.is_recording()
    assert (time.thread_time() - started) / 10_000 < 50e-6


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_SDK_DISABLED": "true"},
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
    ],
)
def test_disabled_by_the_standard_variables(
    collector: OtlpReceiver, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    environ(monkeypatch, OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, **env)
    telemetry = Telemetry()
    assert not telemetry.enabled
    telemetry.tracer.start_span("observer.poll_pass").end()
    telemetry.shutdown(1.0)
    assert collector.requests == []


# -- the collector down ------------------------------------------------------------------------


def test_a_collector_down_is_logged_once_and_shutdown_keeps_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OtlpReceiver() as gone:
        url = gone.url
    environ(monkeypatch, OTEL_EXPORTER_OTLP_ENDPOINT=url)
    with capture_logs() as logs:
        telemetry = Telemetry()
        tracer = telemetry.tracer
        for _ in range(3):  # one batch, exported at shutdown (the schedule delay is 5 s)
            tracer.start_span("observer.poll_pass").end()
        started = time.monotonic()
        done = telemetry.shutdown(1.0)
        took = time.monotonic() - started
    assert not done
    assert took < 1.5
    failed = [e for e in logs if e["event"] == "telemetry_export_failed"]
    assert Counter(e["what"] for e in failed) == {"spans": 1}  # metrics: not pushed
    assert all(e["reason"] for e in failed)
    assert telemetry.shutdown(1.0) is False  # idempotent, and quick
    assert not telemetry.tracer.start_span("after").is_recording()


def test_a_collector_that_never_answers_cannot_hold_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        environ(monkeypatch, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}")
        telemetry = Telemetry()
        telemetry.tracer.start_span("observer.poll_pass").end()
        started = time.monotonic()
        assert telemetry.shutdown(0.5) is False
        assert time.monotonic() - started < 1.0


def test_a_collector_back_after_an_outage_gets_the_spans(
    collector: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    collector.fail(1, status=400)  # refused once: not retried by the exporter
    environ(monkeypatch, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=collector.url + "/v1/traces")
    configure_logging("json", "info")
    with capture_logs() as logs:
        telemetry = Telemetry()
        telemetry.tracer.start_span("lost").end()
        telemetry.force_flush(5.0)
        telemetry.tracer.start_span("observer.poll_pass").end()
        telemetry.force_flush(5.0)
        collector.wait_until(lambda r: any(q.status == 200 for q in r.requests))
        assert telemetry.shutdown(2.0)
    # Only this collector's: an exporter of an earlier test may still be retrying elsewhere.
    ours = collector.url + "/v1/traces"
    events = [
        e["event"]
        for e in logs
        if e["event"].startswith("telemetry_export") and e.get("endpoint") == ours
    ]
    assert events == ["telemetry_export_failed", "telemetry_export_recovered"]
    assert [s.name for s in collector.spans] == ["observer.poll_pass"]


# -- settings from the standard variables ------------------------------------------------------


BASE, TRACES = "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"


@pytest.mark.parametrize(
    ("env", "exported"),
    [
        ({BASE: "http://c:4318"}, True),
        ({TRACES: "http://t/x"}, True),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m/x"}, False),
        ({BASE: "http://c", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({BASE: "http://c", "OTEL_SDK_DISABLED": "true"}, False),
        ({}, False),
    ],
)  # fmt: skip
def test_spans_are_exported_when_an_endpoint_asks_for_them(
    env: dict[str, str], exported: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the decision is observer's: endpoint, protocol, headers, timeout and
    compression are the SDK exporter's own reading of the same variables."""
    environ(monkeypatch, **env)
    assert asked_for("traces") is exported


def test_the_sdk_sends_the_headers_to_the_endpoint_path(
    collector: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ(
        monkeypatch,
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url + "/",
        OTEL_EXPORTER_OTLP_HEADERS="api-key=secret%20value,x-team=ops",
        OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="3",
    )
    telemetry = Telemetry()
    telemetry.tracer.start_span("observer.poll_pass").end()
    assert telemetry.shutdown(5.0)
    (request,) = collector.requests
    assert request.path == "/v1/traces"
    assert request.headers["api-key"] == "secret value" and request.headers["x-team"] == "ops"


def test_resource_names_observer_unless_the_environment_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resource().attributes["service.name"] == "observer"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "rag-observer")
    assert resource().attributes["service.name"] == "rag-observer"
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=p-1,team=a%20b")
    extra = resource().attributes
    assert extra["k8s.pod.name"] == "p-1" and extra["team"] == "a b"
    assert extra["service.name"] == "observer" and extra["service.version"]


def test_gzip_and_the_resource_reach_the_collector(
    collector: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ(
        monkeypatch,
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_EXPORTER_OTLP_COMPRESSION="gzip",
        OTEL_SERVICE_NAME="observer-eu",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=prod",
    )
    telemetry = Telemetry()
    telemetry.tracer.start_span("observer.poll_pass").end()
    assert telemetry.force_flush(5.0)
    (span,) = collector.spans_named("observer.poll_pass")
    assert span.resource["service.name"] == "observer-eu"
    assert span.resource["deployment.environment.name"] == "prod"
    assert {r.headers.get("content-encoding") for r in collector.requests} == {"gzip"}
    assert telemetry.shutdown(5.0)


def test_grpc_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    with OtlpGrpcReceiver() as receiver:
        environ(
            monkeypatch,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
            OTEL_EXPORTER_OTLP_HEADERS="x-team=ops",
        )
        telemetry = Telemetry()
        telemetry.tracer.start_span("observer.poll_pass").end()
        assert telemetry.shutdown(5.0)
        (span,) = receiver.spans_named("observer.poll_pass")
        assert span.resource["service.name"] == "observer"
        assert span.headers["x-team"] == "ops"
        assert receiver.points == []  # metrics: scraped from /metrics, not pushed


def test_a_second_setup_in_one_process_exports_too(
    collector: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ(monkeypatch, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=collector.url + "/v1/traces")
    for round_ in range(2):
        telemetry = Telemetry()
        telemetry.tracer.start_span(f"round-{round_}").end()
        assert telemetry.shutdown(5.0)
    assert [s.name for s in collector.spans] == ["round-0", "round-1"]


def test_langfuse_keys_stay_out_of_reprs() -> None:
    target = LangfuseOtlp("https://cloud.langfuse.com/", PUBLIC, SECRET)
    assert SECRET not in repr(target)
    assert target.traces_url == "https://cloud.langfuse.com/api/public/otel/v1/traces"


def test_the_command_exports_before_it_exits(
    collector: OtlpReceiver, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    """`observer run --once` with only the standard variables set: spans and metrics arrive."""
    import subprocess
    import sys

    from tests.app.test_shutdown import daemon_env

    env = {k: v for k, v in daemon_env(langfuse).items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.url
    done = subprocess.run(
        [sys.executable, "-m", "observer", "run", "--once", "--state", str(tmp_path / "s.db")],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert len(collector.spans_named("observer.poll_pass")) == 1
    assert len(collector.spans_named("observer.trace_scored")) == DEMO.traces
    assert collector.points == []  # metrics: scraped from /metrics, not pushed


def _export_one(provider: TracerProvider) -> None:
    with provider.get_tracer("contract").start_as_current_span("one"):
        pass
    assert provider.force_flush(5_000)
    provider.shutdown()


def test_the_judge_exporter_asks_for_the_direct_write_path_as_the_sdk_does() -> None:
    """`x-langfuse-ingestion-version`, compared with what the SDK 5's own exporter sends to
    the same endpoint: Langfuse writes those spans straight away, not minutes later."""
    with OtlpReceiver() as sdk_side, OtlpReceiver() as ours:
        sdk = TracerProvider()
        sdk.add_span_processor(
            LangfuseSpanProcessor(
                public_key=PUBLIC,
                secret_key=SECRET,
                base_url=sdk_side.url,
                should_export_span=lambda _span: True,
            )
        )
        _export_one(sdk)
        judge = TracerProvider()
        exporter = LangfuseSpanExporter(LangfuseOtlp(ours.url, PUBLIC, SECRET))
        judge.add_span_processor(SimpleSpanProcessor(exporter))
        _export_one(judge)
        (sdk_request,) = sdk_side.requests
        (our_request,) = ours.requests
    assert sdk_request.path == our_request.path == LANGFUSE_TRACES_PATH
    header = "x-langfuse-ingestion-version"
    assert sdk_request.headers[header] == "4"
    assert our_request.headers[header] == sdk_request.headers[header]
    assert our_request.status == 200
