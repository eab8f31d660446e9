"""The request budget: an adaptive requests-per-minute pace (token bucket) with an
injectable clock. Pure but for sleeping.

One `RateLimiter` is the whole process's request budget for Langfuse's General
API: the source's `GET /api/public/v2/observations`, the sink's
`POST /api/public/scores` and `DELETE /api/public/scores/{id}`, the score
configs read at start and people's annotations read for the judge's agreement
(`GET /api/public/v3/scores`, observer.judge.annotations) all take their slot
from the same instance. Langfuse
Cloud counts them in one bucket per organisation (its "public-api" resource):
30 requests a minute on Hobby, 100 on Core, 1,000 on Pro; self-hosted has no
limit. So a Hobby project's 30 a minute are for reading and writing together.
A 429's `Retry-After` (`block_for`) holds every caller, whoever got it.

The pace adapts, because observer cannot ask Langfuse which plan it is on: only
a 429 carries `X-RateLimit-Limit`, and self-hosted never sends one.

    start      25 a minute, under the smallest plan's 30 (Hobby); with a cap, the
               cap: a configured value is what the user knows the plan allows
    grow       every slot granted doubles the pace, up to the ceiling (60,000 a
               minute) or the cap: a self-hosted server is read and written at
               full speed after a dozen requests, well under a second
    settle     a 429 with `X-RateLimit-Limit: L` sets the pace to L less a sixth
               (and at most L-1; Langfuse's fixed window lets L-1 through) and stops
               the growth for good: 25 on Hobby, 83 on Core, 833 on Pro. A 429
               without the header (a proxy's) halves the pace (not below 25, or
               the cap when lower) and the growth goes on: only Langfuse's own
               429s, which name the limit, settle it
    cap        a configured `source.requests_per_minute`: never above it

Why double per request, not once a minute's worth went through: Langfuse counts
requests in a fixed one-minute window (rate-limiter-flexible), so how fast the
window's points are spent does not change how many get through in it; a Hobby
project gets its 29 requests in the first minute either way, then one 429 and
its `Retry-After` to the window's end, then the settled pace. What the growth
decides is how long a server without a limit is under-used: doubling once a
minute would take eleven minutes from 25 to the ceiling, longer than a
`run --once` lasts. A daemon that is mostly idle grows blind too; its first
backlog then meets that one 429 and settles.

Thread-safe: the poller and the dispatcher share it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

# Float slack: a bucket refilled to 0.9999999 tokens is full, or a loop on a
# coarse clock could sleep 1e-15 s forever.
_EPS = 1e-6

START_PER_MINUTE: Final = 25.0  # under Hobby's 30
CEILING_PER_MINUTE: Final = 60_000.0
GROWTH_PER_REQUEST: Final = 2.0
MARGIN: Final = 1 / 6  # of the server's limit, left unused once settled


def settled_pace(limit: float) -> float:
    """The pace for a server limit of `limit` a minute: a sixth less, at most limit-1,
    at least one a minute."""
    return max(1.0, min(limit * (1 - MARGIN), limit - 1))


class RateLimiter:
    """At most `per_minute` acquisitions in any minute (bursts up to `burst`); the pace
    adapts as the module docstring says, never above `cap` (None: no cap)."""

    def __init__(
        self,
        cap: float | None = None,
        burst: int = 5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        *,
        start: float = START_PER_MINUTE,
        ceiling: float = CEILING_PER_MINUTE,
        growth: float = GROWTH_PER_REQUEST,
        on_settled: Callable[[float | None, float], None] = lambda _limit, _pace: None,
    ) -> None:
        self.cap = cap
        self._ceiling = min(ceiling, cap) if cap is not None else ceiling
        # A configured cap is what the user knows the plan allows: start there.
        self.per_minute = self._ceiling if cap is not None else min(start, self._ceiling)
        self._floor = min(start, self._ceiling)
        self._growth = growth
        self.burst = float(max(1, burst))
        self._tokens = self.burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._last = clock()
        self._blocked_until = 0.0
        self._on_settled = on_settled
        self.settled_limit: float | None = None  # the server's limit, once a 429 said it
        self.settled = False  # a 429 named the limit: no more growth
        self.halved = 0  # 429s that named no limit (a proxy's): each halved the pace
        self.waited_s = 0.0  # time callers spent waiting for a slot, all together

    @property
    def rate_per_s(self) -> float:
        return self.per_minute / 60.0

    def describe(self) -> str:
        """The pace in words: `83/min (Langfuse's limit 100/min less a sixth)`."""
        pace = f"{self.per_minute:,.0f}/min"
        if self.settled_limit is not None:
            return f"{pace} (Langfuse's limit {self.settled_limit:,.0f}/min less a sixth)"
        if self.halved and not self.settled:
            return f"{pace} (halved after a 429 that named no limit, growing again)"
        if self.cap is not None and self.per_minute >= self.cap:
            return f"{pace} (the cap, source.requests_per_minute)"
        return f"{pace} (adaptive, still growing)"

    def block_for(self, seconds: float) -> None:
        """The server said wait (`Retry-After`): nothing goes out before then."""
        with self._lock:
            self._blocked_until = max(self._blocked_until, self._clock() + seconds)

    def rate_limited(self, limit: float | None, retry_after_s: float | None = None) -> None:
        """A 429 of the General API: settle the pace at `limit` (its `X-RateLimit-Limit`)
        less the margin, for good; or, when the answer named none (a proxy's), halve it
        and let it grow again (a halving for good, 429 after 429, would crawl at the
        floor for the process's life). Hold every caller for `retry_after_s`. Never above
        the cap."""
        news = False
        with self._lock:
            self._refill(self._clock())
            if limit is not None and limit > 0:
                news = not self.settled or self.settled_limit != float(limit)
                self.settled_limit = float(limit)
                self.settled = True
                self.per_minute = min(settled_pace(limit), self._ceiling)
            else:
                self.halved += 1
                self.per_minute = min(max(self._floor, self.per_minute / 2), self._ceiling)
            if retry_after_s is not None:
                self._blocked_until = max(self._blocked_until, self._clock() + retry_after_s)
        if news:  # the first 429, or one naming another limit: said once each
            self._on_settled(self.settled_limit, self.per_minute)

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate_per_s)
        self._last = now

    def _delay(self) -> float:
        now = self._clock()
        self._refill(now)
        wait = max(0.0, self._blocked_until - now)
        if self._tokens < 1.0 - _EPS:
            wait = max(wait, (1.0 - self._tokens) / self.rate_per_s)
        return wait if wait > _EPS else 0.0

    def acquire(self, should_stop: Callable[[], bool] = lambda: False) -> bool:
        """Wait for a slot; False when `should_stop` turned true while waiting."""
        while True:
            with self._lock:  # the check and the take are one step: no two callers share a slot
                wait = self._delay()
                if wait <= 0:
                    self._tokens -= 1.0
                    if not self.settled:
                        self.per_minute = min(self._ceiling, self.per_minute * self._growth)
                    return True
            if should_stop():
                return False
            step = min(wait, 0.5)
            with self._lock:
                self.waited_s += step
            self._sleep(step)


def budget_phrase(cap: float | None, batch_size: int | None = None) -> str:
    """The budget as configured, for `observer check`: adaptive or capped, and what a
    score POST carries."""
    if cap is not None:
        start = f"at {cap:,g} requests/min, the cap (source.requests_per_minute),"
        return (
            f"{start} lowered to Langfuse's limit less a sixth on its first 429; reads and "
            "score posts together; "
            + (
                f"at most {batch_size:,} scores a POST (sink.batch_size)"
                if batch_size is not None
                else "as many scores a POST as fit in 1,000,000 bytes"
            )
        )
    start_pace = START_PER_MINUTE
    top = (
        f"at most {cap:,g} requests/min (source.requests_per_minute)"
        if cap is not None
        else f"up to {CEILING_PER_MINUTE:,.0f}/min"
    )
    posts = (
        f"at most {batch_size:,} scores a POST (sink.batch_size)"
        if batch_size is not None
        else "as many scores a POST as fit in 1,000,000 bytes"
    )
    return (
        f"adaptive from {start_pace:g} requests/min, doubling per request {top}, settling at "
        f"Langfuse's limit less a sixth on its first 429; reads and score posts together; " + posts
    )
