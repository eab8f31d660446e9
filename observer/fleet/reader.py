"""The reader's side of the pipeline: the lease holder's Marks and Publisher.

The reader's `Pipeline` reads Langfuse exactly as one daemon does (pages,
completeness, settle delay, sweeps); `FleetMarks` keeps its watermark and what
it knows of traces in Redis, and `StreamPublisher` publishes each complete,
settled trace instead of scoring it. Every write is fenced by the lease: a
reader that lost it raises `LeaseLost` and its pass ends, the watermark where
the last write left it.

Backpressure: while the stream holds `pending_bound` entries not yet
acknowledged, publishing waits (the pass reads no further pages), so entries
are trimmed from the stream only once they are acknowledged.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from observer.fleet.connect import LeaseLost
from observer.fleet.entry import Entry
from observer.fleet.lease import Lease
from observer.fleet.stream import TraceStream
from observer.pipeline import PublishKind
from observer.pipeline.traces import last_activity
from observer.sources.langfuse import Stopped
from observer.telemetry.metrics import Metrics

# How long what was published of a trace is remembered past the overlap: a trace read
# again (a sweep, a late generation, a second root) within it is known, as the state
# file's fingerprints know it for one daemon.
MARKS_KEPT = timedelta(hours=6)
# Publishing asks how many entries wait unacknowledged at most this often.
CHECK_EVERY = 100


def _value(lease: Lease) -> str:
    if lease.value is None or not lease.held():
        raise LeaseLost("this member no longer holds the reader's lease")
    return lease.value


class FleetMarks:
    """The watermark and trace marks in Redis; written only while the lease is held."""

    def __init__(self, stream: TraceStream, lease: Lease) -> None:
        self.stream = stream
        self.lease = lease

    def watermark(self) -> datetime | None:
        return self.stream.watermark()

    def set_watermark(self, moment: datetime) -> None:
        self.stream.set_watermark(_value(self.lease), moment)

    def trace_marks(self, trace_ids: Sequence[str]) -> dict[str, tuple[datetime, datetime | None]]:
        return self.stream.trace_marks(trace_ids)


class StreamPublisher:
    def __init__(
        self,
        stream: TraceStream,
        lease: Lease,
        metrics: Metrics,
        *,
        settle_s: float,
        overlap_s: float,
        stop: threading.Event,
        wait_s: float = 0.2,
    ) -> None:
        self.stream = stream
        self.lease = lease
        self.metrics = metrics
        self.settle = timedelta(seconds=settle_s)
        self.marks_ttl_s = (timedelta(seconds=overlap_s) + MARKS_KEPT).total_seconds()
        self.stop = stop
        self.wait_s = wait_s
        self._room = 0  # entries that may be published before the bound is asked again

    def publish(
        self,
        trace_id: str,
        observations: list[dict[str, Any]],
        root: datetime,
        now: datetime,
        latest: datetime | None,
        too_large: int | None,
    ) -> PublishKind:
        if too_large is None:
            last = last_activity(observations, now)
            if last is not None and now - last < self.settle:
                return "unsettled"  # as the daemon: it holds the watermark at its root
        if self._room <= 0:  # asked again only once the room last seen is used up
            while (unacked := self.stream.unacked()) >= self.stream.pending_bound:
                if self.stop.wait(self.wait_s):
                    raise Stopped()
                _value(self.lease)
            self._room = min(CHECK_EVERY, self.stream.pending_bound - unacked)
        entry = Entry(trace_id, observations, root, now, latest, too_large)
        entry_id = self.stream.publish(_value(self.lease), entry, self.marks_ttl_s)
        if entry_id is None:
            return "unchanged"
        self._room -= 1
        self.metrics.fleet.entries.labels(event="published").inc()
        return "published"

    def oldest_unacked(self) -> datetime | None:
        return self.stream.oldest_unacked()
