"""deploy/kubernetes: valid under `kubernetes-validate --strict`, and both layouts wired right.

kubernetes-validate checks the manifests against the Kubernetes schemas it
ships (`--kubernetes-version`, here an older and the newest it carries). The
rest reads the manifests. observer-sidecar.yaml runs observer beside the app in
one Pod: liveness and startup on /healthz but no readiness probe, since a
sidecar's readiness would take the app's Pod out of its Services.
observer-deployment.yaml runs it alone: readiness on /readyz too, and a Service
for Prometheus. Both: one replica, Recreate, the example Secret and ConfigMap,
the config file observer gets, state on their own volume claim, resources, a
non-root read-only container, time to drain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from observer.config import Settings, load_settings
from tests.deploy.support import DEPLOY, run, tool

KUBERNETES = DEPLOY / "kubernetes"
MANIFESTS = sorted(KUBERNETES.glob("*.yaml"))
SIDECAR = KUBERNETES / "observer-sidecar.yaml"
STANDALONE = KUBERNETES / "observer-deployment.yaml"
# The Secret and the ConfigMap both layouts read.
SHARED = [KUBERNETES / "observer-secret.example.yaml", KUBERNETES / "observer-configmap.yaml"]
LAYOUTS = [SIDECAR, STANDALONE]
# An older release still in wide use, and the newest kubernetes-validate ships.
VERSIONS = ["1.30.0", "1.37.0"]

layouts = pytest.mark.parametrize("manifest", LAYOUTS, ids=lambda p: p.stem)


def documents(*paths: Path) -> list[dict[str, Any]]:
    return [
        doc for path in paths or MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc
    ]


def one(kind: str, *paths: Path) -> dict[str, Any]:
    (found,) = [doc for doc in documents(*paths) if doc["kind"] == kind]
    return found


def pod(manifest: Path) -> dict[str, Any]:
    spec: dict[str, Any] = one("Deployment", manifest)["spec"]["template"]["spec"]
    return spec


def container(manifest: Path, name: str = "observer") -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod(manifest)["containers"]
    (found,) = [c for c in containers if c["name"] == name]
    return found


def env(manifest: Path, name: str = "observer") -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in container(manifest, name)["env"]}


def http_get(probe: dict[str, Any]) -> tuple[str, str]:
    check = probe["httpGet"]
    return check["path"], check["port"]


def test_the_manifests() -> None:
    assert [p.name for p in MANIFESTS] == [
        "observer-configmap.yaml",
        "observer-deployment.yaml",
        "observer-fleet.yaml",
        "observer-secret.example.yaml",
        "observer-sidecar.yaml",
    ]
    assert sorted(doc["kind"] for doc in documents(*SHARED)) == ["ConfigMap", "Secret"]
    assert sorted(doc["kind"] for doc in documents(SIDECAR)) == [
        "Deployment",
        "PersistentVolumeClaim",
    ]
    assert sorted(doc["kind"] for doc in documents(STANDALONE)) == [
        "Deployment",
        "PersistentVolumeClaim",
        "Service",
    ]


def test_the_two_layouts_do_not_collide() -> None:
    """Applied by mistake side by side, neither overwrites the other's objects."""
    names = [(d["kind"], d["metadata"]["name"]) for d in documents(SIDECAR, STANDALONE)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("version", VERSIONS)
def test_kubernetes_validate_strict(version: str) -> None:
    done = run(
        [tool("kubernetes-validate"), "--strict", "--kubernetes-version", version]
        + [str(p) for p in MANIFESTS]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed") == len(documents())
    for manifest in LAYOUTS:  # the new file is validated too, every document of it
        assert done.stdout.count(f"{manifest} passed") == len(documents(manifest))


@layouts
def test_one_replica_recreated_never_two_side_by_side(manifest: Path) -> None:
    # One observer per Langfuse project, and never two pods on one state volume.
    deployment = one("Deployment", manifest)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert container(manifest)["args"] == ["run"]


def test_an_app_container_and_observer_as_its_sidecar() -> None:
    assert [c["name"] for c in pod(SIDECAR)["containers"]] == ["app", "observer"]
    assert "your-rag-service" in container(SIDECAR, "app")["image"]


def test_the_standalone_deployment_runs_observer_alone() -> None:
    assert [c["name"] for c in pod(STANDALONE)["containers"]] == ["observer"]
    assert container(STANDALONE)["image"] == container(SIDECAR)["image"]


@layouts
def test_the_http_port_and_liveness_and_startup_on_healthz(manifest: Path) -> None:
    observer = container(manifest)
    (port,) = observer["ports"]
    assert port["containerPort"] == Settings().http.port
    assert env(manifest)["OBSERVER_HTTP_HOST"]["value"] == "0.0.0.0"
    assert env(manifest)["OBSERVER_HTTP_PORT"]["value"] == str(port["containerPort"])
    for probe in ("livenessProbe", "startupProbe"):
        assert http_get(observer[probe]) == ("/healthz", port["name"]), probe


def test_the_sidecar_has_no_readiness_probe_so_it_never_gates_the_app() -> None:
    for each in pod(SIDECAR)["containers"]:
        if each["name"] != "app":  # the app's own probes are the app's business
            assert "readinessProbe" not in each, each["name"]
    # The manifest says why, and where readiness is watched instead.
    text = SIDECAR.read_text()
    assert "No readinessProbe" in text
    assert "observer-deployment.yaml" in text and "deploy/prometheus" in text


def test_the_standalone_deployment_has_readiness_on_readyz() -> None:
    observer = container(STANDALONE)
    (port,) = observer["ports"]
    assert http_get(observer["readinessProbe"]) == ("/readyz", port["name"])
    assert http_get(observer["livenessProbe"]) == ("/healthz", port["name"])


def test_the_standalone_service_exposes_the_metrics_port_to_prometheus() -> None:
    service = one("Service", STANDALONE)
    deployment = one("Deployment", STANDALONE)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    # It selects observer's pod only, not the app's (the sidecar layout's labels).
    sidecar_labels = one("Deployment", SIDECAR)["spec"]["template"]["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= sidecar_labels.items()
    (container_port,) = container(STANDALONE)["ports"]
    (port,) = service["spec"]["ports"]
    assert port["port"] == container_port["containerPort"] == Settings().http.port
    assert port["name"] == port["targetPort"] == container_port["name"]
    annotations = service["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port["port"])
    assert annotations["prometheus.io/path"] == "/metrics"
    # Scraped while not ready (that is when its metrics matter), and scraped once:
    # the pod itself carries no scrape annotation.
    assert service["spec"]["publishNotReadyAddresses"] is True
    pod_annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
    assert not any(key.startswith("prometheus.io/") for key in pod_annotations)


@layouts
def test_credentials_come_from_the_example_secret(manifest: Path) -> None:
    secret = one("Secret", *SHARED)
    keys = set(secret["stringData"])
    for name in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY", "OPENAI_API_KEY"):
        reference = env(manifest)[name]["valueFrom"]["secretKeyRef"]
        assert reference["name"] == secret["metadata"]["name"]
        assert reference["key"] in keys
    assert "value" not in env(manifest)["LANGFUSE_SECRET_KEY"]


@layouts
def test_the_config_map_is_mounted_as_the_file_observer_reads(
    manifest: Path, tmp_path: Path
) -> None:
    config_map = one("ConfigMap", *SHARED)
    config_path = Path(env(manifest)["OBSERVER_CONFIG"]["value"])
    volumes = {v["name"]: v for v in pod(manifest)["volumes"]}
    (mount,) = [
        m
        for m in container(manifest)["volumeMounts"]
        if "configMap" in volumes[m["name"]] and m["mountPath"] == str(config_path.parent)
    ]
    assert mount.get("readOnly") is True
    source = volumes[mount["name"]]["configMap"]
    assert source["name"] == config_map["metadata"]["name"]
    assert [item["path"] for item in source["items"]] == [config_path.name]
    (key,) = [item["key"] for item in source["items"]]
    copy = tmp_path / config_path.name
    copy.write_text(config_map["data"][key])
    settings = load_settings(copy)  # valid, and no secret in it (a secret would be refused)
    assert settings.source.environments == ["production"]
    base_url = env(manifest)["LANGFUSE_BASE_URL"]["valueFrom"]["configMapKeyRef"]
    assert base_url["key"] in config_map["data"]


@layouts
def test_the_state_file_is_on_its_own_persistent_volume(manifest: Path) -> None:
    state = Path(env(manifest)["OBSERVER_STATE__PATH"]["value"])
    volumes = {v["name"]: v for v in pod(manifest)["volumes"]}
    (mount,) = [
        m for m in container(manifest)["volumeMounts"] if m["mountPath"] == str(state.parent)
    ]
    claim = volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]
    assert claim == one("PersistentVolumeClaim", manifest)["metadata"]["name"]
    assert "readOnly" not in mount


@pytest.mark.parametrize(
    ("manifest", "name"),
    [(SIDECAR, "app"), (SIDECAR, "observer"), (STANDALONE, "observer")],
    ids=lambda value: value.stem if isinstance(value, Path) else value,
)
def test_resources_requested_and_limited(manifest: Path, name: str) -> None:
    resources = container(manifest, name)["resources"]
    assert {"cpu", "memory"} <= resources["requests"].keys()
    assert "memory" in resources["limits"]


@layouts
def test_observer_runs_non_root_read_only_without_privileges(manifest: Path) -> None:
    context = container(manifest)["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] >= 1000
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert pod(manifest)["securityContext"]["runAsNonRoot"] is True
    writable = {
        m["mountPath"] for m in container(manifest)["volumeMounts"] if not m.get("readOnly")
    }
    assert writable == {"/var/lib/observer", "/tmp"}


@layouts
def test_the_pod_waits_for_observers_shutdown_grace(manifest: Path) -> None:
    assert pod(manifest)["terminationGracePeriodSeconds"] > Settings().run.shutdown_grace_s
