"""The daemon's loop through its parts: one `tick` with a fixed clock, then `shutdown`.

The bundled demo traces replayed, scores to a JSONL file: no scheduler, no signal,
no sleep."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from observer import app
from observer.app.daemon import Daemon
from observer.background import Deadline
from observer.sinks.jsonl import JsonlScoreSink
from observer.sources.replay import ReplaySource, read_jsonl
from tests.daemon_helpers import configure, demo_counts
from tests.fakes.langfuse_server import FakeLangfuse

DEMO = demo_counts()


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


def replayed(
    monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse, tmp_path: Path
) -> tuple[app.Parts, datetime, Path]:
    settings = configure(
        monkeypatch,
        fake,
        OBSERVER_SOURCE__LOOKBACK_S=str(20 * 365 * 86400),
        OBSERVER_HTTP__ENABLED="false",
    )
    replay = ReplaySource(read_jsonl(app.demo_traces_path()))
    _, latest = replay.time_range()
    now = latest + timedelta(seconds=settings.source.settle_s + 60)
    out = tmp_path / "scores.jsonl"
    parts = app.build(
        settings, state_path=tmp_path / "s.sqlite", source=replay, sink=JsonlScoreSink(out)
    )
    return parts, now, out


def test_one_tick_scores_the_settled_traces_and_a_second_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse, tmp_path: Path
) -> None:
    parts, now, _ = replayed(monkeypatch, fake, tmp_path)
    with parts:
        daemon = Daemon(parts, clock=lambda: now)
        daemon.tick()  # the dispatcher is not started: the scores wait in the outbox
        assert parts.state.watermark() is not None
        queued = parts.state.outbox_size()
        assert queued == DEMO.scores
        daemon.tick()
        assert parts.state.outbox_size() == queued
        daemon.housekeeping()
    assert fake.score_posts == []


def test_a_tick_after_the_stop_reads_nothing(
    monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse, tmp_path: Path
) -> None:
    parts, now, _ = replayed(monkeypatch, fake, tmp_path)
    with parts:
        parts.stopping.set()
        Daemon(parts, clock=lambda: now).tick()
        assert parts.state.watermark() is None and parts.state.outbox_size() == 0


def test_start_tick_shutdown_delivers_everything(
    monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse, tmp_path: Path
) -> None:
    parts, now, out = replayed(monkeypatch, fake, tmp_path)
    with parts:
        daemon = Daemon(parts, clock=lambda: now)
        daemon.start()
        daemon.tick()
        flushed, left = parts.stop(Deadline.within(5))
        assert flushed and left == 0
        assert len(out.read_text().splitlines()) == DEMO.scores
