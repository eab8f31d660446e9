"""OBSERVER_* variables through the command line: one observer does not read stops every
command with exit 2, named with the one it probably meant; a bad value names the
variable that set it and what it must be (docs/configuration.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from observer.cli import main
from observer.config import Settings
from observer.config.sources import observer_variables

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = (["config", "show"], ["check"], ["run", "--once"])


def _cli(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("variable", "says"),
    [
        ("OBSERVER_SORUCE__POLL_INTERVAL_S", "did you mean OBSERVER_SOURCE__POLL_INTERVAL_S?"),
        ("OBSERVER_SOURCE_POLL_INTERVAL_S", "did you mean OBSERVER_SOURCE__POLL_INTERVAL_S?"),
        ("OBSERVER_SOURCE__POLL_INTERVAL", "did you mean OBSERVER_SOURCE__POLL_INTERVAL_S?"),
        ("OBSERVER_CRAG__HIHG", "did you mean OBSERVER_CRAG__HIGH?"),
        ("observer_judge_modle", "did you mean OBSERVER_JUDGE_MODEL?"),
        ("OBSERVER_NONSENSE", "unset it"),
    ],
    ids=["section_typo", "one_underscore", "key_cut_short", "key_typo", "own_variable", "none"],
)
def test_a_variable_observer_does_not_read_stops_every_command(
    monkeypatch: pytest.MonkeyPatch, variable: str, says: str
) -> None:
    monkeypatch.setenv(variable, "5")
    for args in COMMANDS:
        code, out, err = _cli(args)
        assert code == 2, (args, out, err)
        assert f"  {variable}: observer reads no such variable; {says}" in err, (args, err)
        assert out == "" and "Traceback" not in err


def test_every_unknown_variable_is_named_with_the_bad_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OBSERVER_SORUCE__POLL_INTERVAL_S", "5")
    monkeypatch.setenv("OBSERVER_CRAG__HIHG", "0.7")
    monkeypatch.setenv("OBSERVER_SOURCE__PAGE_LIMIT", "lots")
    code, _, err = _cli(["config", "show"])
    assert code == 2
    assert err.splitlines() == [
        "observer: invalid configuration (defaults and environment):",
        "  OBSERVER_CRAG__HIHG: observer reads no such variable; did you mean OBSERVER_CRAG__HIGH?",
        "  OBSERVER_SORUCE__POLL_INTERVAL_S: observer reads no such variable; "
        "did you mean OBSERVER_SOURCE__POLL_INTERVAL_S?",
        "  source.page_limit (OBSERVER_SOURCE__PAGE_LIMIT): must be a whole number, got 'lots'",
    ]


def _service_links() -> dict[str, str]:
    """The variables Kubernetes sets in every pod of the namespace for each Service of
    deploy/kubernetes (kubelet's service links: `<NAME>_SERVICE_HOST`, `_SERVICE_PORT`,
    `_SERVICE_PORT_<PORT NAME>`, and the Docker-link style `<NAME>_PORT...`)."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc["kind"] != "Service":
                continue
            name = doc["metadata"]["name"].upper().replace("-", "_")
            ports = doc["spec"]["ports"]
            found[f"{name}_SERVICE_HOST"] = "10.0.0.7"
            found[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
            found[f"{name}_PORT"] = f"tcp://10.0.0.7:{ports[0]['port']}"
            for port in ports:
                if port.get("name"):
                    upper = port["name"].upper().replace("-", "_")
                    found[f"{name}_SERVICE_PORT_{upper}"] = str(port["port"])
                link = f"{name}_PORT_{port['port']}_{port.get('protocol', 'TCP')}"
                found[link] = f"tcp://10.0.0.7:{port['port']}"
                found[f"{link}_PROTO"] = "tcp"
                found[f"{link}_PORT"] = str(port["port"])
                found[f"{link}_ADDR"] = "10.0.0.7"
    return found


def test_what_others_set_is_not_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kubernetes' service links for deploy/kubernetes' Services, the test suite's switch,
    the variable a `secret_env` key names (and its _FILE), and observer's own."""
    links = _service_links()
    assert "OBSERVER_SERVICE_PORT_OBSERVER_HTTP" in links  # the manifests were read
    for name, value in links.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OBSERVER_REQUIRE_SERVERS", "1")
    monkeypatch.setenv("OBSERVER_SLACK_URL", "https://hooks.slack.invalid/x")
    monkeypatch.setenv("OBSERVER_TOKEN_FILE", str(tmp_path / "token"))
    config = tmp_path / "observer.toml"
    config.write_text(
        '[[alerts.notifiers]]\nname = "chat"\nkind = "slack"\nsecret_env = "OBSERVER_SLACK_URL"\n'
    )
    monkeypatch.setenv("OBSERVER_CONFIG", str(config))
    monkeypatch.setenv("OBSERVER_RESOLVER__SECRET_ENV", "OBSERVER_TOKEN")
    monkeypatch.setenv("OBSERVER_JUDGE_MODEL", "m")
    monkeypatch.setenv("OBSERVER_HTTP_PORT", "9465")
    code, out, err = _cli(["config", "show"])
    assert (code, err) == (0, "")
    assert 'secret_env = "OBSERVER_SLACK_URL"' in out and "port = 9465" in out


def test_no_variable_the_repository_sets_is_reported() -> None:
    """What deploy/ and .ci/ set for observer is read by it or by the test suite."""
    texts = [p.read_text() for p in (ROOT / "deploy").rglob("*") if p.is_file()]
    texts.append((ROOT / ".ci" / "run").read_text())
    names = {n for text in texts for n in re.findall(r"\bOBSERVER_[A-Z0-9_]*[A-Z0-9]\b", text)}
    assert "OBSERVER_STATE__PATH" in names and "OBSERVER_REQUIRE_SERVERS" in names
    found = observer_variables(Settings, dict.fromkeys(names, "x"))
    assert found.unknown == ()


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        (
            "OBSERVER_SOURCE__POLL_INTERVAL_S",
            "abc",
            "source.poll_interval_s (OBSERVER_SOURCE__POLL_INTERVAL_S): must be a number, "
            "got 'abc'",
        ),
        (
            "OBSERVER_SOURCE__POLL_INTERVAL_S",
            "-1",
            "source.poll_interval_s (OBSERVER_SOURCE__POLL_INTERVAL_S): must be greater than 0, "
            "got '-1'",
        ),
        (
            "OBSERVER_SOURCE__PAGE_LIMIT",
            "2.5",
            "source.page_limit (OBSERVER_SOURCE__PAGE_LIMIT): must be a whole number, got '2.5'",
        ),
        (
            "OBSERVER_JUDGE__ENABLED",
            "maybe",
            "judge.enabled (OBSERVER_JUDGE__ENABLED): must be true or false, got 'maybe'",
        ),
        (
            "OBSERVER_LOG__LEVEL",
            "loud",
            "log.level (OBSERVER_LOG__LEVEL): must be 'debug', 'info', 'warning' or 'error', "
            "got 'loud'",
        ),
        (
            "OBSERVER_CRAG",
            '{"high": "x"}',
            "crag.high (OBSERVER_CRAG): must be a number, got 'x'",
        ),
        (
            "OBSERVER_HTTP_PORT",
            "tcp://10.0.0.7:9464",
            "http.port (OBSERVER_HTTP_PORT): must be a whole number, got 'tcp://10.0.0.7:9464'",
        ),
        (
            "OBSERVER_ALERTS__RULES",
            '[{"name": "mine", "signal": "ungrounded_rate", "threshold": 0.2, "thresold": 1}]',
            "alerts.rules[mine].thresold (OBSERVER_ALERTS__RULES): unknown key; "
            "did you mean threshold?",
        ),
    ],
    ids=[
        "number",
        "range",
        "whole_number",
        "boolean",
        "choice",
        "json_table",
        "sdk_style",
        "json_list",
    ],
)
def test_a_bad_value_names_the_variable_and_its_shape(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, line: str
) -> None:
    monkeypatch.setenv(variable, value)
    for args in COMMANDS:
        code, out, err = _cli(args)
        assert code == 2, (args, out, err)
        assert err.splitlines() == [
            "observer: invalid configuration (defaults and environment):",
            "  " + line,
        ]


def test_a_bad_value_from_the_file_names_the_key_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "observer.toml"
    config.write_text('[source]\npoll_interval_s = "abc"\npage_limit = 10\n')
    code, _, err = _cli(["config", "show", "--config", str(config)])
    assert code == 2
    assert err.splitlines()[1:] == ["  source.poll_interval_s: must be a number, got 'abc'"]
    # A variable overriding the file's key is the one named when it is bad too.
    monkeypatch.setenv("OBSERVER_SOURCE__PAGE_LIMIT", "0")
    monkeypatch.setenv("OBSERVER_SOURCE__POLL_INTERVAL_S", "5")
    code, _, err = _cli(["config", "show", "--config", str(config)])
    assert code == 2
    assert err.splitlines()[1:] == [
        "  source.page_limit (OBSERVER_SOURCE__PAGE_LIMIT): must be greater than or equal to 1, "
        "got '0'"
    ]


def test_score_names_a_variable_of_its_sections_and_leaves_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = str(ROOT / "examples" / "records.jsonl")
    monkeypatch.setenv("OBSERVER_SORUCE__POLL_INTERVAL_S", "5")  # the daemon's, not score's
    code, out, err = _cli(["score", records])
    assert code == 0 and out and err == ""
    monkeypatch.setenv("OBSERVER_CRAG__HIHG", "0.7")
    code, out, err = _cli(["score", records])
    assert (code, out) == (2, "")
    assert err.splitlines()[1:] == [
        "  OBSERVER_CRAG__HIHG: observer reads no such variable; did you mean OBSERVER_CRAG__HIGH?"
    ]
    monkeypatch.delenv("OBSERVER_CRAG__HIHG")
    monkeypatch.setenv("OBSERVER_BAND__HIGH", "high")
    code, _, err = _cli(["score", records])
    assert code == 2
    assert "  band.high (OBSERVER_BAND__HIGH): must be a number, got 'high'" in err
