"""deploy/kubernetes: valid under `kubernetes-validate --strict`, and the sidecar wired right.

kubernetes-validate checks the manifests against the Kubernetes schemas it
ships (`--kubernetes-version`, here an older and the newest it carries). The
rest reads the manifests: probes, Secret and ConfigMap references, the config
file observer gets, state on a volume, resources, a non-root read-only container.
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
# An older release still in wide use, and the newest kubernetes-validate ships.
VERSIONS = ["1.30.0", "1.37.0"]


def documents() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def one(kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in documents() if doc["kind"] == kind]
    return found


def pod() -> dict[str, Any]:
    spec: dict[str, Any] = one("Deployment")["spec"]["template"]["spec"]
    return spec


def container(name: str) -> dict[str, Any]:
    (found,) = [c for c in pod()["containers"] if c["name"] == name]
    return found


def env(name: str) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in container(name)["env"]}


def test_the_manifests() -> None:
    assert [p.name for p in MANIFESTS] == [
        "observer-configmap.yaml",
        "observer-secret.example.yaml",
        "observer-sidecar.yaml",
    ]
    kinds = sorted(doc["kind"] for doc in documents())
    assert kinds == ["ConfigMap", "Deployment", "PersistentVolumeClaim", "Secret"]


@pytest.mark.parametrize("version", VERSIONS)
def test_kubernetes_validate_strict(version: str) -> None:
    done = run(
        [tool("kubernetes-validate"), "--strict", "--kubernetes-version", version]
        + [str(p) for p in MANIFESTS]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed") == len(documents())


def test_an_app_container_and_observer_as_its_sidecar() -> None:
    deployment = one("Deployment")
    assert [c["name"] for c in pod()["containers"]] == ["app", "observer"]
    assert "your-rag-service" in container("app")["image"]
    assert container("observer")["args"] == ["run"]
    # One observer per Langfuse project, and never two pods on one state volume.
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"


def test_probes_healthz_for_liveness_readyz_for_readiness_on_the_http_port() -> None:
    observer = container("observer")
    (port,) = observer["ports"]
    assert port["containerPort"] == Settings().http.port
    assert env("observer")["OBSERVER_HTTP_HOST"]["value"] == "0.0.0.0"
    assert env("observer")["OBSERVER_HTTP_PORT"]["value"] == str(port["containerPort"])
    for probe, path in (
        ("livenessProbe", "/healthz"),
        ("startupProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        check = observer[probe]["httpGet"]
        assert check["path"] == path and check["port"] == port["name"], probe


def test_credentials_come_from_the_example_secret() -> None:
    secret = one("Secret")
    keys = set(secret["stringData"])
    for name in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY", "OPENAI_API_KEY"):
        reference = env("observer")[name]["valueFrom"]["secretKeyRef"]
        assert reference["name"] == secret["metadata"]["name"]
        assert reference["key"] in keys
    assert "value" not in env("observer")["LANGFUSE_SECRET_KEY"]


def test_the_config_map_is_mounted_as_the_file_observer_reads(tmp_path: Path) -> None:
    config_map = one("ConfigMap")
    config_path = Path(env("observer")["OBSERVER_CONFIG"]["value"])
    volumes = {v["name"]: v for v in pod()["volumes"]}
    (mount,) = [
        m
        for m in container("observer")["volumeMounts"]
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
    base_url = env("observer")["LANGFUSE_BASE_URL"]["valueFrom"]["configMapKeyRef"]
    assert base_url["key"] in config_map["data"]


def test_the_state_file_is_on_a_persistent_volume() -> None:
    state = Path(env("observer")["OBSERVER_STATE__PATH"]["value"])
    volumes = {v["name"]: v for v in pod()["volumes"]}
    (mount,) = [
        m for m in container("observer")["volumeMounts"] if m["mountPath"] == str(state.parent)
    ]
    claim = volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]
    assert claim == one("PersistentVolumeClaim")["metadata"]["name"]
    assert "readOnly" not in mount


@pytest.mark.parametrize("name", ["app", "observer"])
def test_resources_requested_and_limited(name: str) -> None:
    resources = container(name)["resources"]
    assert {"cpu", "memory"} <= resources["requests"].keys()
    assert "memory" in resources["limits"]


def test_observer_runs_non_root_read_only_without_privileges() -> None:
    context = container("observer")["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] >= 1000
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert pod()["securityContext"]["runAsNonRoot"] is True
    writable = {
        m["mountPath"] for m in container("observer")["volumeMounts"] if not m.get("readOnly")
    }
    assert writable == {"/var/lib/observer", "/tmp"}


def test_the_pod_waits_for_observers_shutdown_grace() -> None:
    assert pod()["terminationGracePeriodSeconds"] > Settings().run.shutdown_grace_s
