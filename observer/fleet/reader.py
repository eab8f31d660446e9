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
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from observer.fleet.connect import LeaseLost
from observer.fleet.entry import Entry
from observer.fleet.lease import Lease
from observer.fleet.metrics import FleetMetrics
from observer.fleet.stream import TraceStream
from observer.pipeline import Publication, PublishKind
from observer.pipeline.traces import last_activity
from observer.sources.langfuse import Stopped
from observer.telemetry.metrics import Metrics

# How long what was published of a trace is remembered past the overlap: a trace read
# again within it (a sweep, a late generation, a second root) is known, as the state file's
# fingerprints know it for one daemon. Sized to what sweeps re-read (the overlap, at least
# the slow-ingestion bound of 15 minutes) with room to spare, not to a day as the state
# file: at 1,000 traces/s each hour kept is 3.6 M keys, about 0.75 GB of Redis (measured by
# bench/fleet.py: docs/operating.md#redis-memory).
# A trace seen again later is read whole and published again: its scores are the same
# (deterministic ids) and the judge's claim stops a second judgement.
MARKS_KEPT = timedelta(hours=1)
# Publishing asks how many entries wait unacknowledged at most this often.
CHECK_EVERY = 100


def _value(lease: Lease) -> str:
    if lease.value is None or not lease.held():
        raise LeaseLost("this member no longer holds the reader's lease")
    return lease.value


class FleetMarks:
    """The watermark and trace marks in Redis; written only while the lease is held.

    Redis without a watermark (a new fleet, or one that lost its data) falls back on
    `local`: this member's copy of the fleet's watermark, which its follower keeps in
    the state file and which stayed below every trace not yet delivered."""

    def __init__(
        self,
        stream: TraceStream,
        lease: Lease,
        local: Callable[[], datetime | None] = lambda: None,
    ) -> None:
        self.stream = stream
        self.lease = lease
        self.local = local

    def watermark(self) -> datetime | None:
        found = self.stream.watermark()
        return found if found is not None else self.local()

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

    def publish(self, traces: Sequence[Publication]) -> list[PublishKind]:
        """The page's complete traces: the settled ones published in pipelined batches
        of at most the room the pending bound leaves (one round trip each)."""
        kinds: list[PublishKind] = []
        ready: list[tuple[int, Entry]] = []
        for trace in traces:
            if trace.too_large is None:
                last = last_activity(trace.observations, trace.now)
                if last is not None and trace.now - last < self.settle:
                    kinds.append("unsettled")  # as the daemon: held at its root
                    continue
            kinds.append("published")
            ready.append(
                (
                    len(kinds) - 1,
                    Entry(
                        trace.trace_id,
                        trace.observations,
                        trace.root,
                        trace.now,
                        trace.latest,
                        trace.too_large,
                    ),
                )
            )
        while ready:
            room = self._wait_for_room()
            batch, ready = ready[:room], ready[room:]
            found = self.stream.publish_many(
                _value(self.lease), [entry for _, entry in batch], self.marks_ttl_s
            )
            published = 0
            for (index, _entry), entry_id in zip(batch, found, strict=True):
                if entry_id is None:
                    kinds[index] = "unchanged"
                else:
                    published += 1
            self._room -= published
            self.metrics.part(FleetMetrics).entries.labels(event="published").inc(published)
        return kinds

    def _wait_for_room(self) -> int:
        """How many entries may go now: asked again only once the room last seen is used
        up; while the stream holds `pending_bound` unacknowledged, wait (the pass stops)."""
        if self._room <= 0:
            while (unacked := self.stream.unacked()) >= self.stream.pending_bound:
                if self.stop.wait(self.wait_s):
                    raise Stopped()
                _value(self.lease)
            self._room = min(CHECK_EVERY, self.stream.pending_bound - unacked)
        return self._room

    def oldest_unacked(self) -> datetime | None:
        return self.stream.oldest_unacked()
