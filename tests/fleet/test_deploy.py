"""deploy/'s fleet variants: valid, and wired to what [fleet] reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from observer.config import load_settings
from tests.deploy.support import DEPLOY, load_yaml, run, tool

COMPOSE = DEPLOY / "docker-compose.fleet.yml"
FLEET = DEPLOY / "kubernetes" / "observer-fleet.yaml"


def _documents() -> list[dict[str, Any]]:
    import yaml

    return [d for d in yaml.safe_load_all(FLEET.read_text()) if d]


def test_the_compose_fleet_is_valid_and_has_redis_7_and_three_members() -> None:
    done = run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)])
    assert done.returncode == 0, done.stdout + done.stderr
    services = load_yaml(COMPOSE)["services"]
    assert services["redis"]["image"] == "redis:7"
    command = " ".join(services["redis"]["command"])  # what the fleet needs of its Redis
    assert "--appendonly yes" in command and "--appendfsync everysec" in command
    assert "--maxmemory-policy noeviction" in command
    members = [s for s in services if s.startswith("observer-")]
    assert len(members) == 3
    volumes = {services[m]["volumes"][0].split(":")[0] for m in members}
    assert len(volumes) == 3  # a state file (an outbox) each
    for member in members:
        assert "REDIS_URL" in services[member]["environment"]


def test_the_fleet_config_files_are_ones_observer_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings(DEPLOY / "observer-fleet.toml")
    assert settings.fleet is not None and settings.fleet.secret_env == "REDIS_URL"
    config = next(d for d in _documents() if d["kind"] == "ConfigMap")
    path = tmp_path / "observer.toml"
    path.write_text(config["data"]["observer.toml"])
    in_cluster = load_settings(path)
    assert in_cluster.fleet is not None
    statefulset = next(d for d in _documents() if d["kind"] == "StatefulSet")
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    names = {e["name"] for e in container["env"]}
    assert in_cluster.fleet.secret_env in names
    assert statefulset["spec"]["volumeClaimTemplates"]  # a state file per member
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
