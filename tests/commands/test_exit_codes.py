"""The exit-code contract: every command, through each failure a user meets.

The README's "Exit codes" table is the contract. Each command runs in-process (click's
runner) against the fake Langfuse and the OpenAI stub, with the real clients, made to
fail one way at a time: Langfuse unreachable (its port closed), the keys refused, a
timeout, a 5xx, the judge's endpoint unreachable, the fleet's Redis unreachable, a bad
configuration. The code must be the one the README's table gives for that failure (its
row says so in words), the output must say what failed and where (the URL, without
credentials), and no output may hold a traceback.

A command meets only the failures of what it talks to: `score` talks to nothing but its
file, so only a bad configuration can fail it. The daemon (`run`) waits for Langfuse
rather than exiting (docs/daemon.md), so it meets only a bad configuration and its
fleet's Redis here; tests/app/test_shutdown.py drives its signals.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from observer.cli import main
from tests.daemon_helpers import ROOT, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.openai_stub import OpenAIStub

RECORDS = str(ROOT / "examples" / "records.jsonl")
CANARY = str(ROOT / "examples" / "canary.jsonl")
WINDOW = ["--from", "2026-11-27T00:00:00Z", "--to", "2026-11-29T00:00:00Z"]

LANGFUSE = ("langfuse_unreachable", "keys_refused", "timeout", "server_error")
FAILURES = (*LANGFUSE, "judge_unreachable", "redis_unreachable", "bad_config")

# The exit code of each failure, and the words of the README's row for that code that say
# it is that failure.
EXPECTED = {
    "langfuse_unreachable": (3, "Langfuse unreachable"),
    "keys_refused": (4, "Langfuse rejected the keys"),
    "timeout": (3, "timed out"),
    "server_error": (3, "answering 5xx"),
    "judge_unreachable": (3, "the judge endpoint could not be reached"),
    "redis_unreachable": (3, "the fleet's Redis unreachable"),
    "bad_config": (2, "bad configuration"),
}
# Where the contract says a failure does not fail the command: the code, and the words.
NOT_FAILED = {
    ("run --once", "judge_unreachable"): (0, "the deterministic scores never wait"),
    ("check", "judge_unreachable"): (0, "`check` shows the endpoint's row"),
}

# Each command (its arguments; STATE is a fresh state file) and what it talks to.
COMMANDS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "score": (["score", RECORDS], ()),
    "run --once": (["run", "--once", "--state", "STATE"], (*LANGFUSE, "judge_unreachable")),
    "run": (["run", "--state", "STATE"], ("redis_unreachable",)),
    "backfill": (["backfill", *WINDOW, "--state", "STATE"], LANGFUSE),
    "check": (["check", "--state", "STATE"], FAILURES[:-1]),
    "explain": (["explain", "no-such-trace"], LANGFUSE),
    "discover": (["discover"], LANGFUSE),
    "demo": (["demo", "--out", "STATE.jsonl", "--state", "STATE"], ()),
    "judge": (["judge", RECORDS], ("judge_unreachable",)),
    "judge agreement": (["judge", "agreement"], LANGFUSE),
    "judge canary": (["judge", "canary", CANARY], ("judge_unreachable",)),
    "config show": (["config", "show"], ()),
    "alerts status": (["alerts", "status", "--state", "STATE"], ()),
    "alerts test": (["alerts", "test"], ()),
    "alerts backtest": (["alerts", "backtest", *WINDOW, "--state", "STATE"], ()),
    "fleet status": (["fleet", "status"], ("redis_unreachable",)),
    "fleet dead": (["fleet", "dead"], ("redis_unreachable",)),
    "init-langfuse": (["init-langfuse"], LANGFUSE),
}
CELLS = [
    pytest.param(command, failure, id=f"{command}-{failure}")
    for command, (_, meets) in COMMANDS.items()
    for failure in (*meets, "bad_config")
]


def readme_rows() -> dict[int, str]:
    """The README's exit-code table: code -> meaning."""
    text = (ROOT / "README.md").read_text()
    table = text.split("**Exit codes**", 1)[1].split("\n\n", 2)[1]
    rows = re.findall(r"^\| (\d+) \| (.*) \|$", table, re.M)
    return {int(code): meaning for code, meaning in rows}


def a_closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeLangfuse, OpenAIStub]]:
    with FakeLangfuse() as langfuse, OpenAIStub() as judge:
        langfuse.add_observations(demo_observations())
        yield langfuse, judge


@pytest.fixture
def fake(servers: tuple[FakeLangfuse, OpenAIStub]) -> Iterator[FakeLangfuse]:
    langfuse, _ = servers
    yield langfuse
    langfuse.clear_failures()
    langfuse.latency_s = 0.0
    if not langfuse.running:
        langfuse.start()


def environment(
    monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse, judge: OpenAIStub, tmp_path: Path
) -> None:
    """Everything working: Langfuse, the judge (on, sampling every trace), a notifier."""
    config = tmp_path / "observer.toml"
    notifier = f'name = "log"\nkind = "webhook"\nurl = "{judge.url}"\n'
    config.write_text("[[alerts.notifiers]]\n" + notifier)
    for name, value in {
        "LANGFUSE_PUBLIC_KEY": fake.public_key,
        "LANGFUSE_SECRET_KEY": fake.secret_key,
        "LANGFUSE_BASE_URL": fake.url,
        "OBSERVER_CONFIG": str(config),
        "OBSERVER_SOURCE__LOOKBACK_S": str(30 * 86400),
        "OBSERVER_SOURCE__REQUESTS_PER_MINUTE": "6000",
        "OBSERVER_SOURCE__MAX_ATTEMPTS": "1",
        "OBSERVER_SOURCE__FIRST_CONTACT_S": "0.3",
        "OBSERVER_SOURCE__REQUEST_TIMEOUT_S": "0.5",
        "OBSERVER_RUN__SHUTDOWN_GRACE_S": "2",
        "OBSERVER_HTTP_PORT": "0",
        "OBSERVER_LOG__LEVEL": "warning",
        "OPENAI_API_KEY": "sk-test",
        "OBSERVER_JUDGE_BASE_URL": f"{judge.url}/v1",
        "OBSERVER_JUDGE_MODEL": "stub-judge",
        "OBSERVER_JUDGE__ENABLED": "true",
        "OBSERVER_JUDGE__MAX_RETRIES": "0",
        "OBSERVER_JUDGE__TIMEOUT_S": "1",
        "OBSERVER_JUDGE__HUMAN_SCORE": "faithful",
    }.items():
        monkeypatch.setenv(name, value)


def fail(failure: str, monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse, tmp_path: Path) -> str:
    """Make `failure` happen; what the output must name (a URL, a variable, a key)."""
    if failure == "langfuse_unreachable":
        fake.stop()
        return fake.url
    if failure == "keys_refused":
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-not-the-one")
        return "rejected the keys"
    if failure == "timeout":
        fake.latency_s = 2.0
        return fake.url
    if failure == "server_error":
        fake.fail_next(503, count=10_000)
        return fake.url
    if failure == "judge_unreachable":
        monkeypatch.setenv("OBSERVER_JUDGE_BASE_URL", f"http://127.0.0.1:{a_closed_port()}/v1")
        return "http://127.0.0.1:"
    if failure == "redis_unreachable":
        config = tmp_path / "observer.toml"
        config.write_text(config.read_text() + "\n[fleet]\n")
        monkeypatch.setenv("REDIS_URL", f"redis://:hunter2@127.0.0.1:{a_closed_port()}/0")
        return "redis://127.0.0.1:"
    assert failure == "bad_config"
    config = tmp_path / "observer.toml"
    config.write_text(config.read_text() + "\n[crag]\nhihg = 0.7\n")
    return "crag.hihg: unknown key; did you mean high?"


def invoke(args: list[str], tmp_path: Path) -> Result:
    state = str(tmp_path / "s.sqlite")
    return CliRunner().invoke(main, [a.replace("STATE", state) for a in args])


@pytest.mark.parametrize(("command", "failure"), CELLS)
def test_every_command_keeps_the_exit_code_contract(
    command: str,
    failure: str,
    servers: tuple[FakeLangfuse, OpenAIStub],
    fake: FakeLangfuse,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    environment(monkeypatch, fake, servers[1], tmp_path)
    if (command, failure) in NOT_FAILED:
        # A cell that must succeed delivers every score in its last flush, however busy
        # the machine: the short grace and timeout are for a failing Langfuse.
        monkeypatch.setenv("OBSERVER_RUN__SHUTDOWN_GRACE_S", "60")
        monkeypatch.setenv("OBSERVER_SOURCE__REQUEST_TIMEOUT_S", "30")
    named = fail(failure, monkeypatch, fake, tmp_path)
    args, _ = COMMANDS[command]
    result = invoke(args, tmp_path)
    code, words = NOT_FAILED.get((command, failure), EXPECTED[failure])
    output = result.stdout + result.stderr
    assert result.exit_code == code, output
    assert isinstance(result.exception, SystemExit | None), output  # never a crash
    assert "Traceback" not in output
    assert words in readme_rows()[code]  # the README's row says so
    if code:
        assert named in " ".join(output.split()), output  # what failed, and where
        assert "hunter2" not in output


def test_the_table_covers_every_code_observer_exits_with() -> None:
    codes = {code for code, _ in EXPECTED.values()} | {0, 1, 130}
    assert set(readme_rows()) == codes


def test_an_unexpected_error_is_one_line_and_its_traceback_only_under_debug(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A bug in a command: one line naming it and how to see more, exit 1; `--debug`, or
    log.level debug, lets the traceback through. (No input is known to raise one: the
    fault is put in by hand, where the command calls its core.)"""
    import observer.app.score_file as score_file

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(score_file, "score_lines", broken)
    quiet = CliRunner().invoke(main, ["score", RECORDS])
    assert quiet.exit_code == 1
    assert quiet.stderr.splitlines() == [
        "observer: unexpected error: RuntimeError: a bug",
        "  This is a bug in observer; `observer --debug ...` shows where it happened.",
    ]
    loud = CliRunner().invoke(main, ["--debug", "score", RECORDS])
    assert isinstance(loud.exception, RuntimeError)  # raised: Python prints its traceback
    monkeypatch.setenv("OBSERVER_LOG__LEVEL", "debug")
    assert isinstance(CliRunner().invoke(main, ["score", RECORDS]).exception, RuntimeError)


def test_ctrl_c_where_nothing_is_stopping_gracefully_is_130_never_aborted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import observer.app.score_file as score_file

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(score_file, "score_lines", interrupted)
    result = CliRunner().invoke(main, ["score", RECORDS])
    assert result.exit_code == 130
    assert result.stderr == "observer: interrupted\n"
    assert "Aborted" not in result.output
