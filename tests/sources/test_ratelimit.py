"""The request budget, on a fake clock: the cap and Retry-After, the adaptive pace
(start, growth, settling at Langfuse's limit less a sixth), and a Hobby project against
the fake Langfuse."""

from __future__ import annotations

import sys
import threading
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.errors import RateLimited
from observer.langfuse_api import build_api
from observer.sinks.langfuse_scores import LangfuseScoreSink
from observer.sources.langfuse import LangfuseSource
from observer.sources.ratelimit import RateLimiter, settled_pace
from observer.telemetry.metrics import Metrics
from tests.fakes.clock import StepClock
from tests.fakes.langfuse_server import HOBBY, FakeLangfuse
from tests.sinks.test_langfuse_scores import scores


def test_no_more_than_the_cap_in_any_minute() -> None:
    clock = StepClock()
    limiter = RateLimiter(25, burst=5, clock=clock.time, sleep=clock.sleep)
    stamps = []
    for _ in range(60):
        limiter.acquire()
        stamps.append(clock.now)
    for i, start in enumerate(stamps):
        in_minute = [t for t in stamps[i:] if t < start + 60]
        assert len(in_minute) <= 25 + 5  # the cap, plus the initial burst
    assert stamps[-1] >= (60 - 5) * 60 / 25 - 1e-6


def test_burst_goes_out_at_once() -> None:
    clock = StepClock()
    limiter = RateLimiter(25, burst=5, clock=clock.time, sleep=clock.sleep)
    for _ in range(5):
        limiter.acquire()
    assert clock.now == 0.0


def test_retry_after_blocks_every_request_until_then() -> None:
    clock = StepClock()
    limiter = RateLimiter(6000, clock=clock.time, sleep=clock.sleep)
    limiter.block_for(7.5)
    limiter.acquire()
    assert clock.now >= 7.5


def test_waiting_stops_when_asked() -> None:
    clock = StepClock()
    limiter = RateLimiter(1, burst=1, clock=clock.time, sleep=clock.sleep)
    assert limiter.acquire()
    assert limiter.acquire(should_stop=lambda: True) is False


def test_threads_sharing_it_never_share_a_slot() -> None:
    """The poller and the dispatcher take slots from one limiter at the same moment: the
    check and the take are one step, so a burst of 5 lets 5 through, never more."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show
    try:
        for _ in range(200):
            limiter = RateLimiter(60, burst=5, clock=lambda: 0.0, sleep=lambda _s: None)
            start = threading.Barrier(32)
            got: list[bool] = []

            def take(limiter: RateLimiter, start: threading.Barrier, got: list[bool]) -> None:
                start.wait()
                got.append(limiter.acquire(should_stop=lambda: True))

            threads = [threading.Thread(target=take, args=(limiter, start, got)) for _ in range(32)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sum(got) == 5
    finally:
        sys.setswitchinterval(previous)


# -- the adaptive budget (docs/daemon.md, the request budget) ---------------------------


def budget(cap: float | None = None, **kwargs: Any) -> tuple[RateLimiter, StepClock]:
    clock = StepClock()
    return RateLimiter(cap, clock=clock.time, sleep=clock.sleep, **kwargs), clock


@pytest.mark.parametrize(
    ("cap", "start"),
    [(None, 25.0), (6000.0, 6000.0), (25.0, 25.0), (10.0, 10.0), (0.5, 0.5)],
)
def test_it_starts_at_the_smallest_plans_pace_or_the_cap(cap: float | None, start: float) -> None:
    limiter, _clock = budget(cap)
    assert limiter.per_minute == start


@pytest.mark.parametrize(
    ("cap", "requests", "pace"),
    [
        (None, 1, 50.0),
        (None, 3, 200.0),
        (None, 11, 51_200.0),
        (None, 12, 60_000.0),  # the ceiling
        (None, 100, 60_000.0),
        (6000.0, 100, 6000.0),  # the cap
        (40.0, 1, 40.0),
    ],
)
def test_every_slot_granted_doubles_the_pace_up_to_the_ceiling_or_the_cap(
    cap: float | None, requests: int, pace: float
) -> None:
    limiter, _clock = budget(cap)
    for _ in range(requests):
        assert limiter.acquire()
    assert limiter.per_minute == pace


@pytest.mark.parametrize(
    ("limit", "cap", "pace"),
    [
        (30, None, 25.0),  # Hobby: a sixth less
        (100, None, 100 * 5 / 6),  # Core
        (1000, None, 1000 * 5 / 6),  # Pro
        (5, None, 4.0),  # at most limit - 1 (5/6 of 5 is 4.17)
        (2, None, 1.0),
        (1, None, 1.0),  # never below one a minute
        (1000, 20.0, 20.0),  # the cap holds
        (100_000_000, None, 60_000.0),  # the ceiling holds
    ],
)
def test_a_429_settles_at_the_servers_limit_less_a_sixth(
    limit: float, cap: float | None, pace: float
) -> None:
    limiter, _clock = budget(cap)
    for _ in range(20):
        limiter.acquire()
    limiter.rate_limited(limit)
    assert limiter.per_minute == pytest.approx(pace)
    assert settled_pace(limit) <= max(1.0, limit - 1)
    for _ in range(50):  # settled: no growth past it
        limiter.acquire()
    assert limiter.per_minute == pytest.approx(pace)


def test_a_429_without_a_limit_halves_the_pace_not_below_the_start_and_it_grows_again() -> None:
    limiter, _clock = budget()
    for _ in range(4):
        limiter.acquire()
    assert limiter.per_minute == 400.0
    limiter.rate_limited(None)
    assert limiter.per_minute == 200.0 and not limiter.settled
    limiter.rate_limited(None)
    limiter.rate_limited(None)
    limiter.rate_limited(None)
    assert limiter.per_minute == 25.0  # the start, not below
    assert "growing again" in limiter.describe()
    limiter.acquire()
    assert limiter.per_minute == 50.0  # a proxy's 429 does not settle it: growth goes on


def test_a_429_without_a_limit_after_langfuse_named_one_keeps_it_settled() -> None:
    limiter, _clock = budget()
    limiter.rate_limited(100.0)
    assert limiter.per_minute == pytest.approx(83.333, rel=1e-3) and limiter.settled
    limiter.rate_limited(None)
    limiter.acquire()
    assert limiter.settled and limiter.per_minute == pytest.approx(41.667, rel=1e-3)


def test_retry_after_is_held_and_then_the_settled_pace_is_kept() -> None:
    limiter, clock = budget(burst=1)
    for _ in range(12):
        limiter.acquire()
    limiter.rate_limited(30, retry_after_s=42.0)
    limiter.acquire()
    assert clock.now >= 42.0
    start = clock.now
    for _ in range(25):
        limiter.acquire()
    assert clock.now - start == pytest.approx(25 * 60 / 25)  # one every 2.4 s: 25 a minute


def test_settling_is_said_once_per_limit() -> None:
    said: list[tuple[float | None, float]] = []
    limiter, _clock = budget(on_settled=lambda limit, pace: said.append((limit, pace)))
    limiter.rate_limited(100, 5.0)
    limiter.rate_limited(100, 5.0)
    assert said == [(100.0, pytest.approx(100 * 5 / 6))]
    limiter.rate_limited(1000, 5.0)  # the plan changed
    assert said[-1] == (1000.0, pytest.approx(1000 * 5 / 6))


def test_the_budget_describes_itself() -> None:
    limiter, _clock = budget()
    assert "adaptive" in limiter.describe() and "25/min" in limiter.describe()
    limiter.rate_limited(30)
    assert limiter.describe() == "25/min (Langfuse's limit 30/min less a sixth)"
    capped, _clock = budget(25)
    assert "the cap" in capped.describe()


events = st.lists(
    st.one_of(
        st.just(("acquire", None)),
        st.tuples(st.just("429"), st.none() | st.integers(1, 5000)),
        st.tuples(st.just("wait"), st.floats(0, 120)),
    ),
    max_size=60,
)


@given(cap=st.none() | st.floats(1, 100_000), events=events)
def test_the_pace_stays_within_the_cap_and_never_grows_after_a_429_naming_the_limit(
    cap: float | None, events: list[tuple[str, Any]]
) -> None:
    limiter, clock = budget(cap)
    top = min(cap, 60_000.0) if cap is not None else 60_000.0
    settled_at: float | None = None
    for kind, value in events:
        before = limiter.per_minute
        if kind == "acquire":
            assert limiter.acquire()
            if settled_at is not None:
                assert limiter.per_minute == before  # Langfuse named its limit: no growth
        elif kind == "429":
            limiter.rate_limited(value)
            if value is not None:
                settled_at = limiter.per_minute
                assert limiter.per_minute <= max(1.0, value - 1)
                assert limiter.per_minute <= value * 5 / 6 + 1e-9 or limiter.per_minute == 1.0
        else:
            clock.now += value
        assert 0 < limiter.per_minute <= top


def test_a_hobby_project_meets_one_429_then_reads_and_writes_under_its_limit() -> None:
    """Cloud Hobby against an adaptive budget shared by the source and the sink: the
    growth spends the first window's points, one 429 settles the budget at 25 a minute
    and its Retry-After is waited out; after it, no 429 in 150 more requests."""
    clock = StepClock()
    with FakeLangfuse(clock=clock.wall) as fake:
        fake.rate_limits = HOBBY
        api = build_api(fake.url, fake.public_key, fake.secret_key, 10)
        limiter = RateLimiter(clock=clock.time, sleep=clock.sleep)
        source = LangfuseSource(api, limiter, Metrics(), max_attempts=1)
        sink = LangfuseScoreSink(api, limiter=limiter)
        start = clock.wall() - timedelta(hours=1)
        delivered = 0
        for i in range(75):
            list(source.pages(start, clock.wall()))
            try:
                delivered += sink.send(scores(f"t{i}")).accepted
            except RateLimited as error:
                assert error.limit == 30 and error.retry_after_s is not None
                delivered += sink.send(scores(f"t{i}")).accepted  # after the Retry-After
        statuses = [r.status for r in fake.requests]
    assert statuses.count(429) == 1
    first = statuses.index(429)
    assert first == 29  # the window's 29 points, then its 429
    assert limiter.settled_limit == 30 and limiter.per_minute == 25.0
    assert delivered == 75 * 3
