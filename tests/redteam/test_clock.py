"""No clock can make observer skip a trace for good (issue 43, finding 3).

One `Date` header an hour ahead stopped the sweeps for an hour: the sweep
schedule runs on the clock derived from Langfuse's answers, taken at face value,
and with traces ingested 40 s late 28 of 31 were never scored. A slow page
alone skewed the estimate by half its round trip. The clock is now filtered
as NTP filters its peers (observer.sources.clock).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from observer import app
from observer.app.daemon import Daemon
from observer.sources.clock import ServerClock
from observer.sources.langfuse import LangfuseSource
from observer.times import parse_time
from tests.daemon_helpers import configure, demo_counts, packed_traces
from tests.fakes.clock import SimulatedClock
from tests.fakes.langfuse_server import FakeLangfuse

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Host:
    """This host's clocks, a monotonic one and a wall one 90 s behind Langfuse's."""

    def __init__(self) -> None:
        self.mono = 5000.0

    def wall(self) -> datetime:
        return T0 - timedelta(seconds=90) + timedelta(seconds=self.mono - 5000.0)


def header(moment: datetime) -> str:
    return format_datetime(moment, usegmt=True)


def clock_of(host: Host) -> ServerClock:
    return ServerClock(local=host.wall, monotonic=lambda: host.mono)


def answer(clock: ServerClock, host: Host, langfuse: datetime, round_trip_s: float) -> None:
    """One answer whose Date header Langfuse wrote as it sent it, at the end of the trip."""
    sent = host.mono
    host.mono += round_trip_s
    clock.observe(header(langfuse), sent, host.mono)


def langfuse_now(host: Host) -> datetime:
    return T0 + timedelta(seconds=host.mono - 5000.0)


def test_one_date_header_an_hour_ahead_is_a_false_ticker() -> None:
    host = Host()
    clock = clock_of(host)
    for _ in range(3):
        answer(clock, host, langfuse_now(host), 0.05)
    assert clock.known and abs((clock.now() - langfuse_now(host)).total_seconds()) < 1
    answer(clock, host, langfuse_now(host) + timedelta(hours=1), 0.05)
    assert abs((clock.now() - langfuse_now(host)).total_seconds()) < 1
    assert abs(clock.offset_s - 90) < 1  # this host is 90 s behind: said, not followed wrongly


def test_the_lowest_delay_answers_decide_and_a_slow_page_does_not_skew() -> None:
    """A page that took 20 s carries a Date written at its end: half a trip off."""
    host = Host()
    clock = clock_of(host)
    for trip in (0.05, 20.0, 0.08, 20.0, 0.06):
        answer(clock, host, langfuse_now(host), trip)
    assert abs((clock.now() - langfuse_now(host)).total_seconds()) < 1


def test_a_clock_that_truly_moved_is_followed_by_bounded_steps_then_at_once() -> None:
    host = Host()
    clock = clock_of(host)
    for _ in range(3):
        answer(clock, host, langfuse_now(host), 0.05)
    before = clock.now()
    shift = timedelta(minutes=10)  # Langfuse's clock was corrected by ten minutes
    answer(clock, host, langfuse_now(host) + shift, 0.05)
    answer(clock, host, langfuse_now(host) + shift, 0.05)
    answer(clock, host, langfuse_now(host) + shift, 0.05)  # three agree: a candidate
    moved = (clock.now() - before).total_seconds()
    assert 0 < moved < 5  # one bounded step (and the trips' own time)
    for _ in range(5):  # the whole window agrees: the clock moved, stepped
        answer(clock, host, langfuse_now(host) + shift, 0.05)
    assert abs((clock.now() - (langfuse_now(host) + shift)).total_seconds()) < 1


def add_due(fake: FakeLangfuse, waiting: list[list[dict[str, Any]]], now: datetime) -> None:
    """The traces whose root has happened, sent now: Langfuse shows them 40 s later."""
    due = [t for t in waiting if parse_time(t[0]["startTime"]) <= now]  # type: ignore[operator]
    for trace in due:
        waiting.remove(trace)
        fake.add_observations(trace, delay_s=40)


def test_a_date_header_an_hour_ahead_loses_no_trace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    langfuse = SimulatedClock(T0)
    fake = FakeLangfuse.kind(seed=1)
    fake.clock = langfuse
    observations = packed_traces(T0 + timedelta(minutes=1), 5.0)
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in observations:
        by_trace.setdefault(observation["traceId"], []).append(observation)
    waiting = sorted(by_trace.values(), key=lambda t: min(o["startTime"] for o in t))
    for trace in waiting:
        trace.sort(key=lambda o: (not o.get("isRootObservation"), o["startTime"]))
    with fake:
        settings = configure(monkeypatch, fake, OBSERVER_SOURCE__LOOKBACK_S="600")
        parts = app.build(settings, mode="solo", state_path=tmp_path / "s.sqlite")
        source = parts.pipeline.source
        assert isinstance(source, LangfuseSource)
        # This host's clocks run with the simulated time (minutes pass in milliseconds).
        source.clock = ServerClock(local=langfuse)
        source.clock.monotonic = lambda: langfuse().timestamp()  # type: ignore[method-assign]
        daemon = Daemon(parts, clock=source.now)
        try:
            for step in range(28):  # 14 minutes, a pass every 30 s
                add_due(fake, waiting, langfuse())
                if step == 6:
                    fake.skew_dates(3600, count=1)  # one answer's Date an hour ahead
                daemon.tick()
                langfuse.advance(30)
            scored = parts.metrics.value("observer_traces_total", outcome="scored")
        finally:
            parts.close()
    assert not waiting
    assert scored == demo_counts().scored
