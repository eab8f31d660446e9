"""`observer demo`, `run --once`, `backfill` and `check` as a user runs them."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from observer import app
from observer.cli import main
from observer.model import RagRecord, Signals
from observer.signals import SignalParams
from tests.daemon_helpers import ROOT, configure, demo_counts, demo_observations
from tests.fakes.langfuse_server import (
    OBSERVATIONS_PATH,
    SCORES_PATH,
    FakeLangfuse,
    RequestRecord,
)
from tests.fakes.openai_stub import OpenAIStub
from tests.waiting import wait_until

DEMO = demo_counts()
# What `observer demo` reads: the bundled traces and the hour of copies of them.
DEMO_RUN = demo_counts(app.demo_observations())


def run(args: list[str]) -> Result:
    return CliRunner().invoke(main, args)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        server.add_observations(demo_observations())
        configure(monkeypatch, server, OBSERVER_SOURCE__LOOKBACK_S=str(30 * 86400))
        yield server


def test_demo_needs_no_account_and_writes_the_scores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # its state file lands in the current directory
    out = tmp_path / "scores.jsonl"
    result = run(["demo", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"traces scored                     │ {DEMO_RUN.scored:,}" in result.stdout
    assert "no_generation" in result.stdout and "own_trace" in result.stdout
    scores = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(scores) == DEMO_RUN.scores
    assert {s["name"] for s in scores} >= {"confidence", "crag_grade", "ungrounded"}
    assert len({s["id"] for s in scores}) == len(scores)
    assert "observer check" in result.stdout and "run --once" in result.stdout  # what next


def test_the_demo_keeps_its_state_where_the_next_commands_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's commands after the Quickstart run as written on the demo's state."""
    monkeypatch.chdir(tmp_path)
    help_text = run(["demo", "--help"]).stdout
    assert "observer-demo.sqlite" in help_text
    result = run(["demo"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "observer-demo.sqlite").exists()
    assert any(
        line.endswith(" alerts status --state observer-demo.sqlite")
        for line in result.stdout.splitlines()
    )
    status = run(["alerts", "status", "--state", "observer-demo.sqlite"])
    assert status.exit_code == 0, status.output
    assert "ungrounded_rate_high" in status.stdout
    backtest = run(
        ["alerts", "backtest", "--state", "observer-demo.sqlite", "--from", "2026-11-20T00:00:00Z"]
    )
    assert backtest.exit_code == 0, backtest.output
    # A real daemon's state is never the demo's, even when the variable names one.
    monkeypatch.setenv("OBSERVER_STATE__PATH", str(tmp_path / "real.sqlite"))
    assert run(["demo"]).exit_code == 0
    assert not (tmp_path / "real.sqlite").exists()


def test_demo_rerun_on_one_state_reports_every_trace_unchanged(tmp_path: Path) -> None:
    state, out = tmp_path / "demo.sqlite", tmp_path / "a.jsonl"
    assert run(["demo", "--out", str(out), "--state", str(state)]).exit_code == 0
    again = run(["demo", "--out", str(out), "--state", str(state)])
    assert again.exit_code == 0
    assert f"traces unchanged (nothing pushed) │ {DEMO_RUN.scored:,}" in again.stdout
    assert f"signals of the {DEMO_RUN.scored:,} answer traces read" in again.stdout
    assert "none: every trace is unchanged" in again.stdout
    assert len(out.read_text().splitlines()) == DEMO_RUN.scores  # the first run's file is kept


def test_the_demo_files_are_what_their_generator_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regenerated with examples/make_demo_traces.py, never edited by hand."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_demo", ROOT / "examples/make_demo_traces.py"
    )
    assert spec is not None and spec.loader is not None
    make = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "make_demo", make)  # its dataclasses look themselves up
    spec.loader.exec_module(make)
    records = [json.loads(line) for line in make.RECORDS.read_text("utf-8").splitlines() if line]
    written = "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in make.build(records))
    assert app.demo_traces_path().read_text("utf-8") == written
    copies = "".join(json.dumps(c) + "\n" for c in make.traffic(records))
    assert (ROOT / "observer/data/demo_traffic.jsonl").read_text("utf-8") == copies


RUN_POLICY_GROUP = "environment=production, query_type=policy"


def readme_demo_commands() -> list[list[str]]:
    """The README's commands on the demo's state, as arguments of observer."""
    readme = (ROOT / "README.md").read_text()
    return [
        line.split("#")[0].split()[1:]
        for line in readme.splitlines()
        if line.startswith(".venv/bin/observer alerts ") and "observer-demo.sqlite" in line
    ]


def test_the_demo_shows_alerting_and_its_commands_reach_a_pipe_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dense enough for the default rules to decide at the demo's end, with an ungrounded
    stretch that fires and resolves in the README's backtest; piped (CliRunner's stdout is
    not a terminal), every line is whole and the tables are plain columns."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    result = run(["demo"])
    assert result.exit_code == 0, result.output
    suggested = [
        line.rsplit(" alerts ", 1)[1].split()
        for line in result.stdout.splitlines()
        if " alerts " in line and "--state observer-demo.sqlite" in line
    ]
    assert suggested == [
        ["status", "--state", "observer-demo.sqlite"],
        ["backtest", "--state", "observer-demo.sqlite", "--from", "2026-11-28T00:00:00Z",
         "--to", "2026-11-29T00:00:00Z", "--rule", "ungrounded_rate_high"],
    ]  # fmt: skip
    readme = {args[1]: args for args in readme_demo_commands()}
    status_args, backtest_args = readme["status"], readme["backtest"]

    status = run(status_args)
    assert status.exit_code == 0, status.output
    assert "│" not in status.stdout
    rows = [re.split(r"\s{2,}", line) for line in status.stdout.splitlines()]
    policy = next(row for row in rows if row[:2] == ["ungrounded_rate_high", RUN_POLICY_GROUP])
    assert policy[4] == "ok" and int(policy[3]) >= 50  # enough samples: it decides
    deciding = {row[0] for row in rows if len(row) > 4 and row[4].split()[0] in ("ok", "firing")}
    assert {"ungrounded_rate_high", "low_band_rate_high", "crag_low_rate_high"} <= deciding
    assert "windows end at the watermark 2026-11-28T23:" in status.stdout

    for args in (backtest_args, ["alerts", *suggested[1]]):
        backtest = run(args)
        assert backtest.exit_code == 0, backtest.output
        lines = backtest.stdout.splitlines()
        assert "│" not in backtest.stdout and "┃" not in backtest.stdout
        assert lines[2].split() == ["rule", "fired", "resolved", "notifications", "firing",
                                    "at", "the", "end"]  # fmt: skip
        assert lines[3].split() == ["ungrounded_rate_high", "1", "1", "2", "0"]
        timeline = [line.split() for line in lines if line.startswith("2026-11-28T")]
        assert [(t[1], t[2:4], t[4]) for t in timeline] == [
            ("ungrounded_rate_high", ["environment=production,", "query_type=policy"], "firing"),
            ("ungrounded_rate_high", ["environment=production,", "query_type=policy"], "resolved"),
        ]
        assert timeline[0][0] < timeline[1][0]


@pytest.mark.parametrize("command", [["demo"], ["score", "examples/records.jsonl"], ["--help"]])
def test_a_closed_pipe_ends_quietly_with_0(command: list[str], tmp_path: Path) -> None:
    observer = [sys.executable, "-m", "observer", *command]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBSERVER_", "LANGFUSE_"))}
    with subprocess.Popen(
        observer,
        cwd=ROOT if command[0] == "score" else tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.readline()
        process.stdout.close()  # like `| head -1`
        error = process.stderr.read()
        assert process.wait(timeout=60) == 0, error
    assert error == b""


def test_run_once_scores_and_reports(fake: FakeLangfuse, tmp_path: Path) -> None:
    result = run(["run", "--once", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    assert "traces scored" in result.stdout
    assert len(fake.scores) == DEMO.scores


def test_run_once_with_the_judge_says_what_was_judged_and_what_was_delivered(
    fake: FakeLangfuse, judge_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OBSERVER_JUDGE__ENABLED", "true")
    monkeypatch.setenv("OBSERVER_JUDGE__RATE", "1")
    result = run(["run", "--once", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    rows = {
        match.group(1): match.group(2)
        for line in result.stdout.splitlines()
        if (match := re.match(r"│ (\S.*?)\s*│ (.*?)\s*│$", line))
    }
    queued = int(rows["scores queued"].replace(",", ""))
    judge_scores = int(rows["judge scores queued"].replace(",", ""))
    judged = int(rows["traces judged"].split()[0])
    assert judged > 0 and judge_scores > 0
    # A fresh state file: everything delivered was queued by this run, the judge's too.
    assert rows["scores delivered"] == f"{queued + judge_scores:,} (the judge's included)"
    assert len(fake.live_scores()) == queued + judge_scores


def test_run_once_without_keys_says_which_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result = run(["run", "--once", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2
    assert "LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY" in result.stderr


def test_unusable_state_file_exits_2(fake: FakeLangfuse, tmp_path: Path) -> None:
    result = run(["run", "--once", "--state", str(tmp_path / "missing" / "s.sqlite")])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_run_once_against_a_dead_langfuse_exits_3(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OBSERVER_SOURCE__MAX_ATTEMPTS", "1")
    fake.stop()
    result = run(["run", "--once", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 3
    # The URL it tried, and for how long (within source.first_contact_s).
    assert f"{fake.url}/api/public/health: ConnectError" in result.stderr
    assert re.search(r"\(tried \d+ times over \d+\.\d s\)", result.stderr)


def test_backfill_scores_a_past_window_with_progress(fake: FakeLangfuse, tmp_path: Path) -> None:
    result = run(
        [
            "backfill",
            "--from",
            "2026-11-27T00:00:00Z",
            "--to",
            "2026-11-29T00:00:00Z",
            "--chunk-hours",
            "6",
            "--state",
            str(tmp_path / "s.sqlite"),
        ]
    )
    assert result.exit_code == 0, result.output
    # Off a terminal (CliRunner's stderr is not one), no bar and no last frame of it.
    assert "━" not in result.stderr and " eta " not in result.stderr
    assert len(fake.scores) == DEMO.scores
    assert fake.duplicates() == []


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def stderr_on_a_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """`observer ARGS` with its stderr on a pseudo-terminal (what a person at one sees),
    read until the command closes it; the command must exit 0."""
    import pty

    primary, secondary = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-m", "observer", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=secondary,
    ) as process:
        os.close(secondary)
        seen = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            seen += chunk
        assert process.wait(timeout=120) == 0
    os.close(primary)
    text = seen.decode("utf-8", "replace")
    return text


def test_backfill_on_a_terminal_draws_its_bar_below_the_log_lines(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    """The log line the demo's older-SDK traces raise (slow_ingestion_detected, info)
    starts a line of its own, the bar drawn again under it: never glued to the bar."""
    env = {**os.environ, "COLUMNS": "200", "OBSERVER_LOG__LEVEL": "info"}
    window = ["--from", "2026-11-27T00:00:00Z", "--to", "2026-11-29T00:00:00Z"]
    text = stderr_on_a_terminal(
        ["backfill", *window, "--chunk-hours", "1", "--state", str(tmp_path / "s.sqlite")],
        tmp_path,
        env,
    )
    assert "backfill" in text and "━" in text  # the bar, on a terminal
    # It counts as it goes: its last frame has every trace and score of the window.
    frames = re.findall(r"(\d+) traces?, (\d+) scored, ([\d,]+) scores? queued", ANSI.sub("", text))
    assert frames and frames[-1][1:] == (str(DEMO.scored), f"{DEMO.scores:,}")
    logged = [
        re.split(r"[\r\n]", ANSI.sub("", before))[-1]
        for before in text.split("slow_ingestion_detected")[:-1]
    ]
    assert logged  # the line was logged, while the bar was drawn
    # What precedes the event on its line is the log line's own start, no bar.
    assert all(re.fullmatch(r"\S+Z \[info\s*\] ", line) for line in logged), logged


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "yesterday"], "not an ISO-8601 time"),
        (["--from", "2026-11-28T00:00:00Z", "--to", "2026-11-27T00:00:00Z"], "must be after"),
    ],
)
def test_backfill_bad_window_is_a_usage_error(args: list[str], message: str) -> None:
    result = run(["backfill", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_check_reports_what_it_will_read(fake: FakeLangfuse) -> None:
    result = run(["check"])
    assert result.exit_code == 0, result.output
    assert "keys accepted" in result.stdout
    assert "GET /api/public/v2/observations" in result.stdout
    assert fake.secret_key not in result.stdout


def test_check_says_the_state_file_is_usable(fake: FakeLangfuse, tmp_path: Path) -> None:
    result = run(["check", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    assert "will be created" in result.stdout


def test_check_refuses_a_state_file_run_would_refuse(fake: FakeLangfuse, tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    assert run(["run", "--once", "--state", str(bad)]).exit_code == 2
    result = run(["check", "--state", str(bad)])
    assert result.exit_code == 2
    assert "NOT USABLE" in result.stdout and "keys accepted" in result.stdout


def test_another_applications_database_is_refused_and_left_as_it_was(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO customers (name) VALUES ('Ada')")
    db.close()
    before = other.read_bytes()
    result = run(["run", "--once", "--state", str(other)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"observer: state file {other} is not observer's: it holds other tables "
        "(customers) and no observer schema_version; observer adds its tables to no other "
        "database: give it a new path (--state, state.path) or its own state file"
    )
    assert other.read_bytes() == before  # no table added, not even WAL mode
    assert fake.observation_requests() == 0
    checked = run(["check", "--state", str(other)])
    assert checked.exit_code == 2
    assert "NOT USABLE" in checked.stdout and "not observer's" in checked.stdout


def test_an_empty_file_becomes_a_state_file(fake: FakeLangfuse, tmp_path: Path) -> None:
    empty = tmp_path / "s.sqlite"
    empty.touch()
    assert run(["run", "--once", "--state", str(empty)]).exit_code == 0
    assert run(["run", "--once", "--state", str(empty)]).exit_code == 0  # and is observer's


def test_base_url_without_scheme_exits_2_at_once(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LANGFUSE_BASE_URL", fake.url.removeprefix("http://"))
    result = run(["run", "--once", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2
    assert "LANGFUSE_BASE_URL" in result.stderr
    assert fake.observation_requests() == 0


def test_check_with_wrong_keys_exits_4(fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-wrong")
    result = run(["check"])
    assert result.exit_code == 4
    assert "rejected the keys" in result.stdout
    assert "sk-lf-wrong" not in result.output


def test_judge_command_adds_the_judges_findings_in_input_order(
    judge_stub: OpenAIStub, tmp_path: Path
) -> None:
    lines = (ROOT / "examples" / "records.jsonl").read_text()
    source = tmp_path / "in.jsonl"
    source.write_text(lines + "not a record\n")
    result = run(["judge", str(source)])
    assert result.exit_code == 0, result.output
    out = [json.loads(line) for line in result.stdout.splitlines()]
    expected_ids = [json.loads(line)["trace_id"] for line in lines.splitlines()]
    assert [o["trace_id"] for o in out] == expected_ids
    first = out[0]
    for key in (
        "claims",
        "verdicts",
        "faithfulness",
        "citation_accuracy",
        "critical_unsupported",
        "no_claims",
        "abstained",
        "calls",
        "tokens",
        "judge_error",
        "coverage",
        "crag_grade",
    ):
        assert key in first
    assert all(o["calls"] <= 2 for o in out)
    assert any(o["no_claims"] for o in out)
    assert '"line": 75' in result.stderr


def test_judge_command_without_a_model_exits_2() -> None:
    result = run(["judge", "-"])
    assert result.exit_code == 2
    assert "OBSERVER_JUDGE_MODEL" in result.stderr


def test_judge_command_with_a_resolver_applies_the_funnel(
    judge_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.resolver import hooks

    lines = (ROOT / "examples" / "records.jsonl").read_text()
    hooks.seed_from_examples()
    deleted = "admin-badge#c2"
    del hooks.STORE[deleted]
    try:
        monkeypatch.setenv("OBSERVER_RESOLVER__KIND", "hook")
        monkeypatch.setenv("OBSERVER_RESOLVER__HOOK", "tests.resolver.hooks:lookup")
        source = tmp_path / "in.jsonl"
        source.write_text(lines)
        result = run(["judge", str(source)])
    finally:
        hooks.STORE.clear()
    assert result.exit_code == 0, result.output
    out = {o["trace_id"]: o for o in map(json.loads, result.stdout.splitlines())}
    flagged = [o for o in out.values() if deleted in o["missing_chunks"]]
    assert flagged
    for o in flagged:
        decided = [v for v in o["verdicts"] if v.get("reason")]
        assert decided and all(v["supported"] is None for v in decided)
        assert all(deleted in v["reason"] for v in decided)
    assert all(o["missing_chunks"] == [] for o in out.values() if o not in flagged)


def test_judge_command_says_what_it_judged_on_stderr(
    judge_stub: OpenAIStub, tmp_path: Path
) -> None:
    lines = (ROOT / "examples" / "records.jsonl").read_text()
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines.splitlines()[:5]) + "\nnot a record\n")
    result = run(["judge", str(source)])
    assert result.exit_code == 0, result.output
    summary = result.stderr.strip().splitlines()[-1]
    assert summary.startswith("observer judge: 5 records, 5 judged, ")
    assert summary.endswith(" tokens, 1 bad line") and " 0 tokens" not in summary


@pytest.mark.parametrize("command", ["score", "judge"])
def test_a_record_whose_signals_fail_is_skipped_with_its_line_and_the_rest_go_on(
    command: str, judge_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A fault injected into the signals (a bug a strange record could hit): the line is
    reported with its number, as a bad line, and every other record is still written."""
    import observer.app.score_file
    from observer.signals import compute

    def failing_on_the_second(record: RagRecord, params: SignalParams) -> Signals:
        if record.trace_id == second:
            raise ZeroDivisionError("division by zero")
        return compute(record, params)

    lines = (ROOT / "examples" / "records.jsonl").read_text()
    first_three = lines.splitlines()[:3]
    second = json.loads(first_three[1])["trace_id"]
    monkeypatch.setattr(observer.app.score_file, "compute", failing_on_the_second)
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(first_three) + "\n")
    result = run([command, str(source)])
    assert result.exit_code == 0, result.output
    written = [json.loads(line)["trace_id"] for line in result.stdout.splitlines()]
    assert written == [json.loads(first_three[i])["trace_id"] for i in (0, 2)]
    assert '"line": 2' in result.stderr
    assert "internal error while scoring: ZeroDivisionError: division by zero" in result.stderr


def test_judge_command_against_an_unreachable_endpoint_exits_3_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OBSERVER_JUDGE_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("OBSERVER_JUDGE_MODEL", "stub-judge")
    monkeypatch.setenv("OBSERVER_JUDGE__MAX_RETRIES", "0")
    lines = (ROOT / "examples" / "records.jsonl").read_text()
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines.splitlines()[:3]) + "\n")
    for args in (["judge", str(source)], ["judge", "--strict", str(source)]):
        result = run(args)
        assert result.exit_code == 3, result.output
        assert "observer judge: 3 records, 0 judged, 3 not judged (unreachable 3)" in result.stderr
        assert f"could not be reached (http://127.0.0.1:{port}/v1)" in result.stderr
        assert all(json.loads(line)["judge_error"] for line in result.stdout.splitlines())


def test_run_once_on_a_terminal_shows_a_progress_line(fake: FakeLangfuse, tmp_path: Path) -> None:
    """Minutes on a real first pass: a line on stderr says how far it has come."""
    env = {**os.environ, "COLUMNS": "200", "OBSERVER_SOURCE__PAGE_LIMIT": "20"}
    text = stderr_on_a_terminal(
        ["run", "--once", "--state", str(tmp_path / "s.sqlite")], tmp_path, env
    )
    assert "run --once" in text
    assert re.search(r"\d+ pages, [\d,]+ observations, [\d,]+ traces, [\d,]+ scores queued", text)


def test_run_once_dry_run_writes_the_scores_and_pushes_nothing(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    state, out = tmp_path / "s.sqlite", tmp_path / "dry.jsonl"
    result = run(["run", "--once", "--dry-run", str(out), "--state", str(state)])
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == DEMO.scores
    assert fake.score_posts == [] and not state.exists()
    assert "dry run" in result.stdout and "nothing pushed" in " ".join(result.stdout.split())
    # Where the scores went, never "delivered": none went to Langfuse.
    written = table_rows(result.stdout)["scores written"]  # a long path folds: no spaces
    assert "".join(written.split()) == f"{DEMO.scores:,}to{out}"
    assert "delivered" not in result.stdout
    # The real run afterwards still scores and pushes everything the dry run saw.
    real = run(["run", "--once", "--state", str(state)])
    assert real.exit_code == 0, real.output
    assert len(fake.live_scores()) == DEMO.scores


def test_backfill_dry_run_to_stdout_keeps_the_table_on_stderr(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    window = ["--from", "2026-11-27T00:00:00Z", "--to", "2026-11-29T00:00:00Z"]
    result = run(["backfill", *window, "--dry-run", "-", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    scores = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(scores) == DEMO.scores and all("traceId" in s for s in scores)
    assert "traces scored" in result.stderr and fake.score_posts == []
    assert table_rows(result.stderr)["scores written"] == f"{DEMO.scores:,} to stdout"


def test_a_stopped_backfill_exits_130_and_prints_the_command_that_resumes(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    import signal

    state = tmp_path / "s.sqlite"
    env = {**os.environ, "OBSERVER_SOURCE__REQUESTS_PER_MINUTE": "60"}  # one a second
    window = ["--from", "2026-11-01T00:00:00Z", "--to", "2026-11-29T00:00:00Z"]
    command = [sys.executable, "-m", "observer", "backfill", *window, "--state", str(state)]
    with subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        # Stopped once it is reading chunks (its signal handlers are set by then), however
        # long a loaded machine takes to start it.
        deadline = time.monotonic() + 60
        while fake.observation_requests() < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    text = err.decode()
    resume = re.search(r"backfill --from (\S+) --to (\S+)", text)
    assert resume is not None, text
    assert resume.group(2) == "2026-11-29T00:00:00.000Z"
    assert "2026-11-01T00:00:00.000Z" < resume.group(1) < "2026-11-29T00:00:00.000Z"
    assert "stopped there" in out.decode()
    # The printed command goes on from there and finishes the window.
    done = run(
        ["backfill", "--from", resume.group(1), "--to", resume.group(2), "--state", str(state)]
    )
    assert done.exit_code == 0, done.output
    assert len(fake.live_scores()) == DEMO.scores


def table_rows(text: str) -> dict[str, str]:
    """A printed pass table's rows, key to value, wrapped lines joined."""
    rows: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if len(cells) != 2:
            continue
        if cells[0]:
            key = cells[0]
            rows[key] = cells[1]
        elif key:
            rows[key] += " " + cells[1]
    return rows


def number(row: str) -> int:
    return int(row.split()[0].replace(",", ""))


def interrupt_at(fake: FakeLangfuse, request: int, status: int | None = None) -> None:
    """Ctrl-C (SIGINT to this process, whose main thread runs the command) while Langfuse
    answers the `request`th read of observations; with `status`, that read fails so (the
    stop comes while the client waits to try it again)."""
    reads: list[RequestRecord] = []

    def on_request(record: RequestRecord) -> None:
        if record.path != OBSERVATIONS_PATH:
            return
        reads.append(record)
        if len(reads) == request - 1 and status is not None:
            fake.fail_next(status, retry_after=30, path_prefix=OBSERVATIONS_PATH)
        if len(reads) == request:
            os.kill(os.getpid(), signal.SIGINT)

    fake.on_request = on_request


def observer_threads() -> list[str]:
    """The threads an observer command started that are still alive."""
    return [t.name for t in threading.enumerate() if t.name.startswith("observer-")]


DEMO_WINDOW = ["--from", "2026-11-27T00:00:00Z", "--to", "2026-11-29T00:00:00Z"]


@pytest.mark.parametrize("status", [None, 429], ids=["between-pages", "waiting-out-a-429"])
def test_a_backfill_stopped_mid_chunk_counts_what_the_chunk_did(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, status: int | None
) -> None:
    """One chunk holds the whole demo, read 20 observations a page: stopped on its fourth
    page, the summary counts the traces and scores of the pages read, and says the chunk
    was cut short; the resume command reads it again from its start."""
    monkeypatch.setenv("OBSERVER_SOURCE__PAGE_LIMIT", "20")
    state = str(tmp_path / "s.sqlite")
    interrupt_at(fake, 4, status)
    result = run(["backfill", *DEMO_WINDOW, "--chunk-hours", "48", "--state", state])
    assert result.exit_code == 130, result.output
    rows = table_rows(result.stdout)
    queued, delivered = number(rows["scores queued"]), number(rows["scores delivered"])
    assert 0 < number(rows["traces scored"]) < DEMO.scored
    assert 0 < queued < DEMO.scores
    assert "scores waiting from an earlier run" not in rows
    left = number(rows["scores left in the outbox"]) if "scores left in the outbox" in rows else 0
    # All of it, delivered or kept for the next run (a 429 holds the shared budget back).
    assert delivered + left == queued and delivered == len(fake.scores)
    assert rows["window done"] == (
        "2026-11-27T00:00:00.000Z .. 2026-11-27T00:00:00.000Z (stopped there; the chunk "
        "after it was cut short: what it did is counted above)"
    )
    assert "backfill --from 2026-11-27T00:00:00.000Z --to 2026-11-29T00:00:00.000Z" in (
        result.stderr
    )
    fake.on_request = None
    fake.clear_failures()
    done = run(["backfill", *DEMO_WINDOW, "--chunk-hours", "48", "--state", state])
    assert done.exit_code == 0, done.output
    rows = table_rows(done.stdout)
    assert number(rows["traces scored"]) == DEMO.scored - number(
        table_rows(result.stdout)["traces scored"]
    )
    assert len(fake.live_scores()) == DEMO.scores and fake.duplicates() == []


def test_scores_an_earlier_run_left_are_said_to_be_among_those_delivered(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An earlier backfill scored every trace but could not deliver: the next one, stopped,
    scores nothing new and delivers what the outbox held, and says so."""
    monkeypatch.setenv("OBSERVER_RUN__SHUTDOWN_GRACE_S", "0.5")
    state = str(tmp_path / "s.sqlite")
    fake.fail_next(503, count=10**6, path_prefix=SCORES_PATH, method="POST")
    first = run(["backfill", *DEMO_WINDOW, "--state", state])
    assert first.exit_code == 3, first.output
    assert number(table_rows(first.stdout)["scores left in the outbox"]) == DEMO.scores
    # The next run is another process: the first's threads, abandoned inside a request
    # at its short grace on a busy machine, end with it (here they would go on beside
    # the second run, on the same state file).
    wait_until(lambda: not observer_threads(), "the first run's threads ended")
    fake.clear_failures()
    monkeypatch.setenv("OBSERVER_RUN__SHUTDOWN_GRACE_S", "5")
    interrupt_at(fake, 2)
    result = run(["backfill", *DEMO_WINDOW, "--state", state])
    assert result.exit_code == 130, result.output
    rows = table_rows(result.stdout)
    assert number(rows["traces scored"]) == 0 and number(rows["scores queued"]) == 0
    assert "scores waiting from an earlier run" in rows, result.output
    assert rows["scores waiting from an earlier run"] == f"{DEMO.scores:,} (in the outbox at start)"
    assert rows["scores delivered"].endswith(" (the earlier run's included)")
    delivered = number(rows["scores delivered"])
    left = number(rows["scores left in the outbox"]) if "scores left in the outbox" in rows else 0
    assert delivered > 0 and delivered + left == DEMO.scores
    assert len(fake.live_scores()) == delivered


def test_an_empty_stretch_of_backfill_costs_a_few_requests_not_one_a_chunk(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    """A week before the demo's day holds nothing: 168 one-hour chunks would be 168 requests."""
    window = ["--from", "2026-11-21T00:00:00Z", "--to", "2026-11-29T00:00:00Z"]
    result = run(["backfill", *window, "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    assert len(fake.live_scores()) == DEMO.scores and fake.duplicates() == []
    assert fake.observation_requests() <= 40  # 8 days of hours: 192 chunks before
