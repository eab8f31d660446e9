"""Langfuse's clock, read from the `Date` header of its answers (docs/daemon.md, "Clocks").

observer's own clock may be wrong (a VM before NTP has synced), and so may the
clocks of the apps whose traces it reads. "Now" for the lookback, the settle
delay and the watermark is Langfuse's: the offset between its `Date` header
and the local clock is measured on every answer, and `now()` is the local
clock moved by that offset. Until the first answer the offset is 0 and
`known` is false (the daemon asks once before its first pass).

The header has a resolution of one second and is written at some point while
the request was served: the midpoint of the request is compared with the
header's second plus half a second, so a healthy pair of clocks measures
within about a second. A measured offset past `warn_after_s` is logged once,
and again only when it moves by that much.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import structlog

log = structlog.get_logger("observer.source")


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


class ServerClock:
    """Langfuse's now: the local clock plus the offset its answers showed."""

    def __init__(
        self,
        *,
        local: Callable[[], datetime] = lambda: datetime.now(UTC),
        warn_after_s: float = 5.0,
        on_offset: Callable[[float], None] = lambda _offset_s: None,
    ) -> None:
        self._local = local
        self.warn_after_s = warn_after_s
        self._on_offset = on_offset
        self._offset = timedelta(0)
        self._logged: float | None = None
        self._lock = threading.Lock()
        self.known = False

    @property
    def offset_s(self) -> float:
        """Langfuse's clock minus the local one, in seconds (positive: this host is behind)."""
        return self._offset.total_seconds()

    def now(self) -> datetime:
        return self._local() + self._offset

    def local_now(self) -> datetime:
        return self._local()

    def observe(self, date_header: str | None, sent: datetime, received: datetime) -> None:
        """One answer's `Date` header, with the local times the request was sent and answered."""
        server = parse_http_date(date_header)
        if server is None:
            return
        midpoint = sent + (received - sent) / 2
        offset = server + timedelta(milliseconds=500) - midpoint
        with self._lock:
            self._offset = offset
            self.known = True
        offset_s = offset.total_seconds()
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
