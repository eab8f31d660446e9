"""The requests-per-minute cap and Retry-After, on a fake clock."""

from __future__ import annotations

import sys
import threading

from observer.sources.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_no_more_than_the_cap_in_any_minute() -> None:
    clock = Clock()
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
    clock = Clock()
    limiter = RateLimiter(25, burst=5, clock=clock.time, sleep=clock.sleep)
    for _ in range(5):
        limiter.acquire()
    assert clock.now == 0.0


def test_retry_after_blocks_every_request_until_then() -> None:
    clock = Clock()
    limiter = RateLimiter(6000, clock=clock.time, sleep=clock.sleep)
    limiter.block_for(7.5)
    limiter.acquire()
    assert clock.now >= 7.5


def test_waiting_stops_when_asked() -> None:
    clock = Clock()
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
