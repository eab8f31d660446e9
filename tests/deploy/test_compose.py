"""deploy/docker-compose.yml: valid against the Compose specification, and wired right.

No docker daemon here: the file is validated against the compose-spec JSON
schema (shipped by check-jsonschema), and its wiring is checked by reading it:
services and ports, every mounted path exists in the repository, credentials
come from the environment, the state lives on a volume, the config it mounts
is one observer accepts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from observer.config import Settings, load_settings
from tests.deploy.support import DEPLOY, PROMETHEUS, ROOT, load_yaml, run, tool

COMPOSE = DEPLOY / "docker-compose.yml"


def services() -> dict[str, Any]:
    found: dict[str, Any] = load_yaml(COMPOSE)["services"]
    return found


def bind_mounts(service: str) -> list[tuple[Path, str]]:
    """(host path, container path) of a service's bind mounts (short syntax, relative)."""
    mounts = []
    for volume in services()[service].get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts.append(((DEPLOY / source).resolve(), target))
    return mounts


def published(service: str) -> set[int]:
    return {int(str(port).rsplit(":", 1)[1]) for port in services()[service].get("ports", [])}


def test_valid_against_the_compose_specification() -> None:
    done = run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)])
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_four_services_and_their_ports_on_loopback() -> None:
    assert set(services()) == {"observer", "prometheus", "alertmanager", "grafana"}
    assert published("observer") == {Settings().http.port}
    assert published("prometheus") == {9090}
    assert published("alertmanager") == {9093}
    assert published("grafana") == {3000}
    for service in services().values():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), port


def test_observer_is_built_from_the_dockerfile() -> None:
    build = services()["observer"]["build"]
    context = (DEPLOY / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"


@pytest.mark.parametrize("service", ["observer", "prometheus", "alertmanager", "grafana"])
def test_every_mounted_path_exists_in_the_repository(service: str) -> None:
    for source, target in bind_mounts(service):
        assert source.exists(), f"{service}: {source} (mounted at {target}) does not exist"
        assert source.is_relative_to(ROOT)


def test_langfuse_credentials_come_from_the_environment_and_are_required() -> None:
    environment = services()["observer"]["environment"]
    for name in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY"):
        assert re.fullmatch(rf"\$\{{{name}:\?[^}}]*\}}", environment[name]), environment[name]
    assert environment["LANGFUSE_BASE_URL"].startswith("${LANGFUSE_BASE_URL:-https://")
    assert (
        "${GRAFANA_ADMIN_PASSWORD:?"
        in services()["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    )


def test_the_state_is_on_a_named_volume_at_the_images_volume() -> None:
    named = load_yaml(COMPOSE)["volumes"]
    state = [v for v in services()["observer"]["volumes"] if v.endswith(":/var/lib/observer")]
    assert len(state) == 1 and state[0].split(":")[0] in named
    assert 'VOLUME ["/var/lib/observer"]' in (DEPLOY / "Dockerfile").read_text()


def test_the_mounted_config_is_one_observer_accepts() -> None:
    observer = services()["observer"]
    config_path = observer["environment"]["OBSERVER_CONFIG"]
    (source,) = [s for s, target in bind_mounts("observer") if target == config_path]
    settings = load_settings(source)
    (notifier,) = settings.alerts.notifiers
    assert notifier.kind == "alertmanager" and notifier.url == "http://alertmanager:9093"


def test_stop_grace_outlasts_observers_shutdown_grace() -> None:
    grace = services()["observer"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) > Settings().run.shutdown_grace_s


def test_prometheus_loads_the_deploy_config_and_reaches_the_services() -> None:
    prometheus = services()["prometheus"]
    mounts = dict((target, source) for source, target in bind_mounts("prometheus"))
    assert mounts["/etc/prometheus"] == PROMETHEUS
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    config = load_yaml(PROMETHEUS / "prometheus.yml")
    scraped = {
        t for job in config["scrape_configs"] for g in job["static_configs"] for t in g["targets"]
    }
    assert scraped == {f"observer:{Settings().http.port}"}
    alerting = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert alerting == ["alertmanager:9093"]
    alertmanager = dict((t, s) for s, t in bind_mounts("alertmanager"))
    assert alertmanager["/etc/alertmanager/alertmanager.yml"] == (
        DEPLOY / "alertmanager" / "alertmanager.yml"
    )
