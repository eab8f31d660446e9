"""deploy/systemd/observer.service: verified by systemd, hardened, and true to the daemon.

`systemd-analyze verify` checks the unit (with ExecStart pointed at this
virtualenv's observer, since /opt/observer does not exist here) and
`systemd-analyze security --offline` scores its sandboxing.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from observer.config import Settings, load_settings
from tests.deploy.support import DEPLOY, run, tool

UNIT = DEPLOY / "systemd" / "observer.service"
INSTALLED = "/opt/observer/bin/observer"
# systemd-analyze security's exposure, times ten: 20 is its "OK" (2.0 of 10).
MAX_EXPOSURE = 20


def directives(section: str) -> dict[str, list[str]]:
    """KEY -> every value it is given in [section] (systemd allows repeats)."""
    found: dict[str, list[str]] = {}
    current = None
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            continue
        if current == section:
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def value(key: str, section: str = "Service") -> str:
    return directives(section)[key][-1]


@pytest.fixture
def local_unit(tmp_path: Path) -> Path:
    """The unit with its ExecStart on this virtualenv's observer (verify wants it to exist)."""
    path = tmp_path / UNIT.name
    path.write_text(UNIT.read_text().replace(INSTALLED, tool("observer")))
    return path


def test_systemd_analyze_verify(local_unit: Path) -> None:
    done = run([tool("systemd-analyze"), "verify", "--man=no", str(local_unit)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == done.stderr.strip() == ""


def test_systemd_analyze_security_rates_it_ok(local_unit: Path) -> None:
    done = run(
        [
            tool("systemd-analyze"),
            "security",
            "--offline=yes",
            f"--threshold={MAX_EXPOSURE}",
            str(local_unit),
        ]
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr


def test_runs_observer_run_with_the_config_file() -> None:
    command = shlex.split(value("ExecStart"))
    assert command[:2] == [INSTALLED, "run"]
    config = Path(command[command.index("--config") + 1])
    assert config == Path("/etc/observer/observer.toml")
    # What the unit's comments say to install there: a config observer accepts.
    load_settings(DEPLOY / "observer.toml")


def test_user_state_directory_and_secrets_file() -> None:
    service = directives("Service")
    assert value("User") == "observer" and value("DynamicUser") == "yes"
    assert value("StateDirectory") == "observer"
    environment = dict(v.split("=", 1) for v in service["Environment"])
    assert environment["OBSERVER_STATE__PATH"].startswith("/var/lib/observer/")
    assert environment["OBSERVER_HTTP_HOST"] == "127.0.0.1"
    assert value("EnvironmentFile") == "/etc/observer/observer.env"
    example = (DEPLOY / "systemd" / "observer.env.example").read_text()
    for name in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY", "LANGFUSE_BASE_URL"):
        assert f"\n{name}=" in example


def test_restarts_on_failure_and_stops_after_the_grace_period() -> None:
    assert value("Restart") == "on-failure"
    assert value("KillSignal") == "SIGTERM"
    stop = value("TimeoutStopSec")
    assert stop.isdigit() and int(stop) > Settings().run.shutdown_grace_s
    assert value("StartLimitIntervalSec", "Unit") and value("StartLimitBurst", "Unit")


def test_hardened() -> None:
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
        "CapabilityBoundingSet": "",
    }
    assert {key: value(key) for key in expected} == expected
