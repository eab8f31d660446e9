"""Langfuse's clock, read from the `Date` header of its answers (docs/daemon.md, "Clocks").

observer's own clock may be wrong (a VM before NTP has synced), and so may the
clocks of the apps whose traces it reads. "Now" for the lookback, the settle
delay and the watermark is Langfuse's. One answer's `Date` header is not taken
at face value, though (issue 43: a single header an hour ahead stopped the
sweeps for an hour; a slow page skewed the estimate by half its round trip).
The estimate is filtered the way NTP filters its peers (RFC 5905, the clock
filter and the selection algorithm's false-ticker rule):

- **Intervals on a monotonic clock.** Each answer is a sample: Langfuse's time
  (the header's second plus half a second) minus this host's monotonic time at
  the request's midpoint, and the round trip. "Now" is the monotonic clock plus
  the estimated offset, so a step of this host's wall clock changes nothing.
- **Agreement.** Two samples agree when their offsets differ by no more than
  half of each one's round trip plus the header's one-second resolution. Of the
  last `window` samples, those that agree with at least `quorum` of them
  (themselves included) are the true chimers; the rest are false tickers,
  ignored. Of the true chimers the one with the lowest round trip is the
  candidate: a slow page says least.
- **Bounded steps.** The first candidate sets the clock. After that the
  estimate moves towards each new candidate by at most `max_step_s`; only when
  a full window of samples agrees on a candidate further away (the clock truly
  moved) does it step there at once, logged (`clock_stepped`).

Until a candidate exists the local clock is used and `known` is false (the
source asks Langfuse a few times before its first pass). A measured offset
past `warn_after_s` (Langfuse's clock against this host's wall clock) is logged
once, and again only when it moves by that much.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Final

import structlog

log = structlog.get_logger("observer.source")

RESOLUTION_S: Final = 1.0  # a Date header names its second
WINDOW: Final = 8
QUORUM: Final = 3
MAX_STEP_S: Final = 2.0


def parse_http_date(value: str | None) -> datetime | None:
    """An RFC 7231 `Date` header as an aware UTC datetime; None when absent or unreadable."""
    if not value:
        return None
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Sample:
    """One answer: Langfuse's time minus this host's monotonic time, and the round trip."""

    offset_s: float
    delay_s: float


def agree(a: Sample, b: Sample) -> bool:
    return abs(a.offset_s - b.offset_s) <= (a.delay_s + b.delay_s) / 2 + RESOLUTION_S


def candidate(samples: Sequence[Sample], quorum: int) -> tuple[Sample, int] | None:
    """Pure: the lowest-delay true chimer of `samples` (agreeing with at least `quorum`
    of them, itself included), and how many samples agree with it; None without one."""
    chimers = [(s, n) for s in samples if (n := sum(agree(s, o) for o in samples)) >= quorum]
    if not chimers:
        return None
    return min(chimers, key=lambda pair: pair[0].delay_s)


class ServerClock:
    """Langfuse's now: this host's monotonic clock plus the filtered offset of its answers."""

    def __init__(
        self,
        *,
        local: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        warn_after_s: float = 5.0,
        on_offset: Callable[[float], None] = lambda _offset_s: None,
        window: int = WINDOW,
        quorum: int = QUORUM,
        max_step_s: float = MAX_STEP_S,
    ) -> None:
        self._local = local
        self.monotonic = monotonic
        self.warn_after_s = warn_after_s
        self._on_offset = on_offset
        self._samples: deque[Sample] = deque(maxlen=window)
        self._quorum = min(quorum, window)
        self._max_step_s = max_step_s
        self._offset = 0.0  # Langfuse's time minus the monotonic clock, once known
        self._logged: float | None = None
        self._lock = threading.Lock()
        self.known = False

    @property
    def offset_s(self) -> float:
        """Langfuse's clock minus the local one, in seconds (positive: this host is behind)."""
        if not self.known:
            return 0.0
        return self.monotonic() + self._offset - self._local().timestamp()

    def now(self) -> datetime:
        if not self.known:
            return self._local()
        return datetime.fromtimestamp(self.monotonic() + self._offset, UTC)

    def observe(self, date_header: str | None, sent_s: float, received_s: float) -> None:
        """One answer's `Date` header, with the monotonic times its request was sent and
        answered (`monotonic()`)."""
        server = parse_http_date(date_header)
        if server is None:
            return
        midpoint = sent_s + (received_s - sent_s) / 2
        sample = Sample(server.timestamp() + RESOLUTION_S / 2 - midpoint, received_s - sent_s)
        with self._lock:
            self._samples.append(sample)
            moved = self._update()
        if moved:
            self._report()

    def _update(self) -> bool:
        """The estimate moved towards the filtered candidate (under the lock)."""
        found = candidate(self._samples, self._quorum)
        if found is None:
            return False
        best, agreeing = found
        gap = best.offset_s - self._offset
        if not self.known or abs(gap) <= self._max_step_s:
            self._offset, self.known = best.offset_s, True
        elif agreeing == self._samples.maxlen:  # every sample of a full window: it moved
            log.warning("clock_stepped", by_s=round(gap, 1), samples=agreeing)
            self._offset = best.offset_s
        else:
            self._offset += self._max_step_s if gap > 0 else -self._max_step_s
        return True

    def _report(self) -> None:
        offset_s = self.offset_s
        self._on_offset(offset_s)
        off = abs(offset_s) > self.warn_after_s
        moved = self._logged is None or abs(offset_s - self._logged) > self.warn_after_s
        if off and moved:
            self._logged = offset_s
            log.warning(
                "clock_skew_measured",
                offset_s=round(offset_s, 1),
                meaning="Langfuse's clock is ahead of this host's"
                if offset_s > 0
                else "Langfuse's clock is behind this host's",
                action="Langfuse's clock is used for windows and the watermark",
            )
        elif not off and self._logged is not None:
            self._logged = None
            log.info("clock_skew_resolved", offset_s=round(offset_s, 1))
