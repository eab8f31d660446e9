"""SIGTERM in the middle of a pass, then a restart: nothing lost, nothing duplicated."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observer.background import Deadline
from observer.cli import main
from observer.times import parse_time
from tests.daemon_helpers import (
    DEMO_LOOKBACK_S,
    after,
    configure,
    demo_counts,
    demo_observations,
    once,
)
from tests.fakes.langfuse_server import FakeLangfuse

SCORES = demo_counts().scores


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        server.add_observations(demo_observations())
        yield server


def daemon_env(fake: FakeLangfuse) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBSERVER_", "LANGFUSE_"))}
    env.update(
        LANGFUSE_PUBLIC_KEY=fake.public_key,
        LANGFUSE_SECRET_KEY=fake.secret_key,
        LANGFUSE_BASE_URL=fake.url,
        OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S,
        OBSERVER_SOURCE__PAGE_LIMIT="20",
        OBSERVER_SOURCE__POLL_INTERVAL_S="1",
        OBSERVER_SOURCE__REQUESTS_PER_MINUTE="6000",
        OBSERVER_RUN__SHUTDOWN_GRACE_S="5",
        OBSERVER_LOG__FORMAT="json",
        OBSERVER_HTTP_PORT="0",  # any free port: tests never fight over 9464
    )
    return env


def test_sigterm_mid_pass_then_restart_loses_and_duplicates_nothing(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = tmp_path / "state.sqlite"
    fake.latency_s = 0.15  # 16 pages: the pass takes a few seconds
    proc = subprocess.Popen(
        [sys.executable, "-m", "observer", "run", "--state", str(state)],
        env=daemon_env(fake),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120  # the daemon's start, however slow the machine
        while fake.observation_requests() < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.observation_requests() >= 4, "the daemon never started paging"
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        _out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert time.monotonic() - started < 5 + 2  # within the grace period
    assert b'"event": "observer_stopped"' in err
    assert fake.observation_requests() < 16, "the pass was not interrupted"

    # Restart and catch up: every score delivered once.
    fake.latency_s = 0.0
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S)
    result = once(settings, state, after(demo_observations()) + timedelta(days=1))
    assert result.exit_code == 0, result.error
    assert len(fake.scores) == SCORES
    assert fake.duplicates() == []


def stop_took(err: bytes) -> float:
    """Seconds from `shutdown_requested` to `observer_stopped` in a daemon's JSON log."""
    at: dict[str, datetime] = {}
    for line in err.decode().splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") in ("shutdown_requested", "observer_stopped"):
                at[event["event"]] = datetime.fromisoformat(event["timestamp"])
    return (at["observer_stopped"] - at["shutdown_requested"]).total_seconds()


def test_sigterm_during_a_hanging_request_exits_within_the_grace(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    """A Langfuse request that would take 30 s is abandoned, not waited for; the state
    file is not closed under the thread still inside it, and stays usable."""
    state = tmp_path / "state.sqlite"
    env = daemon_env(fake)
    env.update(OBSERVER_RUN__SHUTDOWN_GRACE_S="2", OBSERVER_SOURCE__REQUEST_TIMEOUT_S="30")
    fake.latency_s = 20.0  # every answer hangs far past the grace
    proc = subprocess.Popen(
        [sys.executable, "-m", "observer", "run", "--state", str(state)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120  # the daemon's start, however slow the machine
        while fake.in_flight < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.in_flight >= 1, "the daemon never sent a request"
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        _out, err = proc.communicate(timeout=25)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]
    # The daemon's own stop ends within the grace, by its own log's clock; the process
    # exit after it is the interpreter's, which a busy machine slows down.
    assert stop_took(err) <= 2 + 0.5, err.decode()[-3000:]
    assert took < 2 + 15, f"took {took:.1f} s"
    assert b'"event": "poll_abandoned"' in err
    assert b"closed database" not in err
    fake.latency_s = 0.0
    done = subprocess.run(
        [sys.executable, "-m", "observer", "run", "--once", "--state", str(state)],
        env=daemon_env(fake),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert len(fake.scores) == SCORES


def events(log: bytes) -> dict[str, dict[str, Any]]:
    """The first record of each event in a JSON log."""
    found: dict[str, dict[str, Any]] = {}
    for line in log.decode().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and "event" in record:
                found.setdefault(record["event"], record)
    return found


def seconds_between(earlier: dict[str, Any], later: dict[str, Any]) -> float:
    return (parse_time(later["timestamp"]) - parse_time(earlier["timestamp"])).total_seconds()


def test_a_hanging_score_push_does_not_hold_run_once_past_the_grace(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(
        monkeypatch,
        fake,
        OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S,
        OBSERVER_RUN__SHUTDOWN_GRACE_S="2",
        OBSERVER_SOURCE__REQUEST_TIMEOUT_S="30",
    )
    fake.post_latency_s = 20.0
    started = time.monotonic()
    result = once(settings, tmp_path / "s.sqlite", after(demo_observations()) + timedelta(days=1))
    took = time.monotonic() - started
    assert took < 2 * 2 + 2, f"took {took:.1f} s"  # the pass, then the grace, not 20 s
    assert result.exit_code == 3
    assert result.error is not None and "kept in the outbox" in result.error
    fake.post_latency_s = 0.0
    again = once(settings, tmp_path / "s.sqlite", after(demo_observations()) + timedelta(days=1))
    assert again.exit_code == 0, again.error
    assert len(fake.scores) == SCORES and fake.duplicates() == []


def test_a_second_dispatcher_shutdown_returns_at_once(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from observer import app

    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S)
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    parts.pipeline.poll(after(demo_observations()) + timedelta(days=1))
    fake.stop()  # nothing can be delivered
    try:
        assert parts.dispatcher.shutdown(Deadline.within(0.5))[0] is False
        started = time.monotonic()
        assert parts.dispatcher.shutdown(Deadline.within(5.0))[0] is False
        assert time.monotonic() - started < 0.1
    finally:
        parts.state.close()


def test_sigterm_during_a_long_flush_ends_in_the_grace_without_a_traceback(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The outbox holds many small batches, each post slow: the stop flushes what it can
    by a reserve before the deadline, the state file is never closed under the thread
    still posting, nothing is logged as a crash, and the next run delivers the rest once."""
    state = tmp_path / "state.sqlite"
    env = daemon_env(fake)
    env.update(OBSERVER_RUN__SHUTDOWN_GRACE_S="3", OBSERVER_SINK__BATCH_SIZE="5")
    fake.post_latency_s = 0.4
    proc = subprocess.Popen(
        [sys.executable, "-m", "observer", "run", "--state", str(state)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while len(fake.scores) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(fake.scores) >= 10, "the daemon never started delivering"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert stop_took(err) <= 3 + 0.5, err.decode()[-3000:]
    for bad in (b"closed database", b"Traceback", b"dispatcher_failed", b'"level": "error"'):
        assert bad not in err, err.decode()[-3000:]
    assert len(fake.scores) < SCORES, "the whole outbox went out: the test proves nothing"

    fake.post_latency_s = 0.0
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S)
    result = once(settings, state, after(demo_observations()) + timedelta(days=1))
    assert result.exit_code == 0, result.error
    assert len(fake.scores) == SCORES
    assert fake.duplicates() == []


def test_run_once_stops_like_the_daemon_on_sigterm(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SIGTERM (a CronJob's, past its deadline) in the middle of `run --once`, a real
    process: it stops reading, delivers what it scored within the grace, prints the
    summary and exits 0; the next run goes on from there, nothing lost, nothing twice."""
    state = tmp_path / "state.sqlite"
    proc: subprocess.Popen[bytes] | None = None

    def on_request(record: Any) -> None:  # the stop lands while the 4th page is in flight
        pages = fake.observation_requests() if record.path.endswith("/observations") else 0
        if proc is not None and pages == 4:
            proc.send_signal(signal.SIGTERM)

    fake.on_request = on_request
    proc = subprocess.Popen(
        [sys.executable, "-m", "observer", "run", "--once", "--state", str(state)],
        env=daemon_env(fake),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    fake.on_request = None
    said = out.decode() + err.decode()
    assert proc.returncode == 0, said[-3000:]
    assert "observer run --once" in out.decode()  # the summary
    assert "stopped before the end of the window" in err.decode()
    assert "Traceback" not in said
    assert fake.observation_requests() < 16, "the pass was not stopped"
    assert_the_next_run_delivers_the_rest_once(fake, monkeypatch, state)


def test_run_once_stopped_with_ctrl_c_says_what_is_left_and_exits_3(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ctrl-C while Langfuse takes no score: the summary with what is left in the outbox,
    exit 3 (left for the next run), never click's "Aborted!". In this process: the signal
    lands while `run --once` holds its handlers (the 4th page is in flight)."""
    state = tmp_path / "state.sqlite"
    fake.fail_next(503, count=10_000, path_prefix="/api/public/scores", method="POST")

    def on_request(record: Any) -> None:
        pages = fake.observation_requests() if record.path.endswith("/observations") else 0
        if pages == 4:
            os.kill(os.getpid(), signal.SIGINT)

    configure(
        monkeypatch,
        fake,
        OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S,
        OBSERVER_SOURCE__PAGE_LIMIT="20",
        OBSERVER_RUN__SHUTDOWN_GRACE_S="1",
    )
    fake.on_request = on_request
    try:
        result = CliRunner().invoke(main, ["run", "--once", "--state", str(state)])
    finally:
        fake.on_request = None
    assert result.exit_code == 3, result.output
    assert "scores left in the outbox" in result.stdout
    assert "stopped before the end of the window" in result.stderr
    assert "kept in the outbox for the next run" in result.stderr
    assert "Aborted" not in result.output
    assert fake.observation_requests() < 16, "the pass was not stopped"
    fake.clear_failures()
    assert_the_next_run_delivers_the_rest_once(fake, monkeypatch, state)


def assert_the_next_run_delivers_the_rest_once(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, state: Path
) -> None:
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S)
    result = once(settings, state, after(demo_observations()) + timedelta(days=1))
    assert result.exit_code == 0, result.error
    assert len(fake.scores) == SCORES
    assert fake.duplicates() == []
