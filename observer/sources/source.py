"""Where observations come from: the Langfuse poller, or a replay file."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, Protocol


class Stopped(Exception):
    """Reading stopped because the process is shutting down (a stop while a source waits
    for the request budget or a backoff)."""


class ObservationSource(Protocol):
    def pages(
        self, start: datetime, end: datetime, trace_id: str | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        """Observations with start <= startTime < end, page by page (newest first);
        with `trace_id`, only that trace's. A page may be short or empty while more
        follow: the listing ends when the iterator does.

        Raises observer.errors.RemoteError when the source cannot be read, Stopped when
        a shutdown ends a wait.
        """
        ...
