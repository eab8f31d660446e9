"""A requests-per-minute cap (token bucket) with an injectable clock. Pure but for sleeping.

One `RateLimiter` is the whole process's request budget for Langfuse's General
API: the source's `GET /api/public/v2/observations`, the sink's
`POST /api/public/scores` and `DELETE /api/public/scores/{id}`, and the score
configs read at start all take their slot from the same instance. Langfuse
Cloud counts them in one bucket per organisation (its "public-api" resource):
30 requests a minute on Hobby, 100 on Core, 1,000 on Pro; self-hosted has no
limit. So a Hobby project's 30 a minute are for reading and writing together.
A 429's `Retry-After` (`block_for`) holds every caller, whoever got it.

Thread-safe: the poller and the dispatcher share it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# Float slack: a bucket refilled to 0.9999999 tokens is full, or a loop on a
# coarse clock could sleep 1e-15 s forever.
_EPS = 1e-6


class RateLimiter:
    """At most `per_minute` acquisitions in any minute, bursts up to `burst`."""

    def __init__(
        self,
        per_minute: float,
        burst: int = 5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate_per_s = per_minute / 60.0
        self.burst = float(max(1, burst))
        self._tokens = self.burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._last = clock()
        self._blocked_until = 0.0

    def block_for(self, seconds: float) -> None:
        """The server said wait (`Retry-After`): nothing goes out before then."""
        with self._lock:
            self._blocked_until = max(self._blocked_until, self._clock() + seconds)

    def _delay(self) -> float:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate_per_s)
        self._last = now
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
                    return True
            if should_stop():
                return False
            self._sleep(min(wait, 0.5))
