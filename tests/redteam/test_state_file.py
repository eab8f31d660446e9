"""The state file guarded (issue 43, finding 10).

Two daemons on one state file ran side by side (5 of 10 traces paged twice); a
state file deleted while running went unnoticed and was gone at exit;
corruption mid-file passed `check`; while the disk was full the whole outbox
was posted again every second (3,600 posts for 120 scores); the WAL kept the
space it took.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from observer import app
from observer.app.daemon import Daemon
from observer.cli import main
from observer.config import load_settings
from observer.langfuse_api import build_api
from observer.sinks.dispatcher import Dispatcher
from observer.sinks.langfuse_scores import LangfuseScoreSink
from observer.state import State, StateError
from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import DEMO_LOOKBACK_S, configure, demo_observations
from tests.fakes.langfuse_server import SCORES_PATH, FakeLangfuse
from tests.sinks.test_dispatcher import Clock, scores
from tests.test_faults import fill, small_disk

__all__ = ["small_disk"]  # the fixture, used here

T = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLangfuse]:
    with FakeLangfuse.kind() as server:
        server.add_observations(demo_observations())
        configure(monkeypatch, server, OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S)
        yield server


def test_a_second_daemon_on_one_state_file_stops_naming_the_first(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    state = tmp_path / "s.sqlite"
    settings = load_settings()
    first = app.build(settings, mode="solo", state_path=state)
    try:
        with pytest.raises(StateError, match=rf"in use by observer pid {os.getpid()} on "):
            app.build(settings, mode="solo", state_path=state)
        second = CliRunner().invoke(main, ["run", "--once", "--state", str(state)])
        assert second.exit_code == 2, second.output
        assert f"pid {os.getpid()}" in second.output
    finally:
        first.close()
    # Once the first has stopped, the file is free.
    again = app.build(settings, mode="once", state_path=state)
    again.close()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_state_file_deleted_or_replaced_while_running_is_refused_loudly(
    how: str, fake: FakeLangfuse, tmp_path: Path
) -> None:
    path = tmp_path / "s.sqlite"
    parts = app.build(load_settings(), mode="solo", state_path=path)
    try:
        daemon = Daemon(parts)
        if how == "deleted":
            path.unlink()
        else:
            other = State(tmp_path / "other.sqlite")
            other.close()
            os.replace(tmp_path / "other.sqlite", path)
        daemon.tick()
        assert parts.state.watermark() is None  # no pass ran on a file that is gone
        assert parts.metrics.value("observer_passes_failed_total", kind="state") == 1
        ready, body = parts.health.ready()
        assert not ready and any(how in reason for reason in body["reasons"]), body
        daemon.tick()  # and says so again at every tick, never scoring in between
        assert parts.state.watermark() is None
    finally:
        parts.close()


def test_check_runs_sqlites_integrity_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.sqlite"
    state = State(path)
    for n in range(2000):
        state.record_trace(f"trace-{n:05d}", "f" * 64, T, (), T)
    state.close()  # the last connection closed: the WAL is in the file
    size = path.stat().st_size
    with path.open("r+b") as raw:  # a page in the middle of the traces' table, overwritten
        raw.seek(size // 2 // 4096 * 4096 + 100)
        raw.write(os.urandom(2000))
    opened = sqlite3.connect(path)  # the file still opens and its head still reads
    opened.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    opened.close()
    monkeypatch.setenv("LANGFUSE_BASE_URL", "http://127.0.0.1:9")
    result = CliRunner().invoke(main, ["check", "--state", str(path)])
    assert result.exit_code == 2, result.output
    assert "corrupt" in result.output


def test_while_the_outbox_cannot_be_marked_sending_backs_off(
    small_disk: Path, tmp_path: Path
) -> None:
    """Posted, but not marked as posted (the disk is full): posting again every second
    would send the whole outbox 3,600 times an hour."""
    with FakeLangfuse.kind() as fake:
        state, clock = State(small_disk / "s.sqlite"), Clock(T)
        try:
            state.record_trace("a", "f", T, scores("a"), T)
            sink = LangfuseScoreSink(build_api(fake.url, fake.public_key, fake.secret_key, 10))
            dispatcher = Dispatcher(state, sink, Metrics(), clock=clock)
            filler = fill(small_disk)
            dispatcher.flush(5)  # posted; not marked as posted
            for _ in range(4):  # the worker's next steps, a second apart
                clock.now += 1
                dispatcher.flush(0.1)
            posts = [r for r in fake.requests if r.path == SCORES_PATH]
            # Backing off, doubling from 2 s: posted at 0 s and 2 s, then not before 6 s.
            assert len(posts) <= 2, f"{len(posts)} posts of the same scores in 5 s"
            filler.unlink()
            clock.now += 600
            assert dispatcher.flush(5)
        finally:
            state.close()


def test_the_wal_gives_back_its_space_when_there_is_room_again(small_disk: Path) -> None:
    """A full disk's WAL keeps the space it took (SQLite reuses the file, never shrinks
    it): once there is room, the daemon truncates it."""
    state = State(small_disk / "s.sqlite")
    wal = Path(f"{state.path}-wal")
    try:
        for n in range(3000):
            state.record_trace(f"trace-{n:05d}", "f" * 64, T, scores(f"t{n}"), T)
        taken = wal.stat().st_size
        assert taken > 1_000_000
        filler = fill(small_disk)
        with pytest.raises(StateError):
            for n in range(3000, 6000):
                state.record_trace(f"trace-{n:05d}", "f" * 64, T, scores(f"t{n}"), T)
        filler.unlink()
        state.check_writable(T)
        state.checkpoint()
        assert wal.stat().st_size == 0
    finally:
        state.close()
