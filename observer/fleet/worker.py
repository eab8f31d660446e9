"""Every member is a worker: read entries, score them, outbox, then acknowledge.

One `step` handles one batch: the member's own pending entries first (after a
restart, or ones deferred by a full outbox), then, every `claim_idle_s / 2`,
entries idle past `claim_idle_s` on any member (a dead one: `XAUTOCLAIM`),
else new entries (`XREADGROUP >`, waiting up to `block_ms`). Each trace goes
through the daemon's own `TraceRecorder` against this member's state file
(its fingerprints, outbox, signal history, judge samples) with the reader's
"now" for the pass that read it; an entry is acknowledged only after its
trace's transaction committed. A trace the outbox had no room for stays
pending here and is read again; a worker whose outbox is full reads nothing.
Score ids are deterministic (docs/scores.md#ids-and-timestamps): a trace scored
twice (its worker died before acknowledging) upserts the same scores.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from observer.fleet.entry import BadEntry, Entry, decode
from observer.fleet.stream import Message, TraceStream
from observer.pipeline import Lookup
from observer.pipeline.traces import Prepared, TraceRecorder
from observer.state import State
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.fleet")


@dataclass
class StepResult:
    read: int = 0
    claimed: int = 0
    acknowledged: int = 0
    deferred: int = 0
    outbox_full: bool = False


class Worker:
    def __init__(
        self,
        stream: TraceStream,
        member: str,
        recorder: TraceRecorder,
        state: State,
        metrics: Metrics,
        *,
        max_outbox: int,
        claim_idle_s: float,
        lookup: Lookup | None = None,
        notify: Callable[[], None] = lambda: None,
        batch: int = 50,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.member = member
        self.recorder = recorder
        self.state = state
        self.metrics = metrics
        self.max_outbox = max_outbox
        self.claim_idle_ms = int(claim_idle_s * 1000)
        self.lookup = lookup
        self.notify = notify
        self.batch = batch
        self.clock = clock
        self._own = True  # read this member's pending entries first
        self._claimed_at: float | None = None

    def reread_own(self) -> None:
        """Read this member's own pending entries first at the next step."""
        self._own = True

    def step(self, block_ms: int) -> StepResult:
        """One batch read, scored and acknowledged (nothing when the outbox is full)."""
        result = StepResult()
        if self.state.outbox_size() >= self.max_outbox:
            result.outbox_full = True
            return result
        messages: list[Message] = []
        if self._own:
            messages = self.stream.read(self.member, self.batch, block_ms=None, own=True)
            self._own = bool(messages)
        if not messages and self._claim_due():
            messages = self.stream.claim(self.member, self.claim_idle_ms, self.batch)
            result.claimed = len(messages)
            if messages:
                self.metrics.fleet.entries.labels(event="claimed").inc(len(messages))
                log.info("entries_claimed", count=len(messages), member=self.member)
        if not messages:
            messages = self.stream.read(self.member, self.batch, block_ms=block_ms)
        if messages:
            result.read = len(messages)
            self.metrics.fleet.entries.labels(event="read").inc(len(messages))
            self._handle(messages, result)
        return result

    def _claim_due(self) -> bool:
        now = self.clock()
        if self._claimed_at is None or now - self._claimed_at >= self.claim_idle_ms / 2000:
            self._claimed_at = now
            return True
        return False

    def _handle(self, messages: list[Message], result: StepResult) -> None:
        done: list[str] = []
        entries: list[tuple[str, Entry]] = []
        for entry_id, fields in messages:
            try:
                entries.append((entry_id, decode(fields)))
            except BadEntry as error:
                log.warning("entry_dropped", entry_id=entry_id, reason=str(error))
                done.append(entry_id)  # never read again: it cannot be scored
        known = self.state.fingerprints(sorted({e.trace_id for _, e in entries}))
        prepared: list[tuple[str, Entry, Prepared]] = []
        for entry_id, entry in entries:
            prepared.append(
                (
                    entry_id,
                    entry,
                    self.recorder.prepare(
                        entry.trace_id,
                        entry.observations,
                        known.get(entry.trace_id),
                        entry.now,
                        entry.root,
                        too_large=entry.too_large,
                    ),
                )
            )
        changed = [p for *_, p in prepared if p.changed]
        if self.lookup is not None and changed:
            found = self.lookup([(p.record, p.signals) for p in changed if p.record and p.signals])
            for item, findings in zip(changed, found, strict=True):
                item.findings = findings
        for entry_id, entry, ready in prepared:
            outcome = self.recorder.record(
                entry.trace_id,
                ready,
                entry.root,
                known.get(entry.trace_id),
                entry.now,
                entry.latest,
            )
            if outcome.kind == "deferred":  # no room in the outbox: read again later
                result.deferred += 1
                self._own = True
                continue
            done.append(entry_id)
        self.notify()
        # Only now: every acknowledged trace is in this member's outbox (committed).
        self.stream.ack(done)
        result.acknowledged = len(done)
        self.metrics.fleet.entries.labels(event="acknowledged").inc(len(done))
