"""Every member is a worker: read entries, score them, outbox, acknowledge once delivered.

One `step` handles one batch, taken from the first of:

1. entries the outbox had no room for (kept in memory, tried again first);
2. this member's own pending entries, once after a start (`XREADGROUP 0`, paged);
3. entries whose scoring failed here, delivered again (`XCLAIM`: a delivery);
4. every `claim_idle_s / 2`, entries idle past `claim_idle_s` on any member (a
   dead one: `XAUTOCLAIM`, following its cursor round the pending list);
5. new entries (`XREADGROUP >`, waiting up to `block_ms`).

Each trace goes through the daemon's own `TraceRecorder` against this member's
state file (its fingerprints, outbox, signal history, judge samples) with the
reader's "now" for the pass that read it. Each entry fails alone: a trace whose
scoring raises never holds its batch-mates back. What is no entry's fault (this
member's disk, or Redis away while a trace is scored: the judge's claim) stops
the batch instead, counts no delivery, and its entries wait in memory. So does a
judge's claim refused because Redis lost its data (`EPOCH`, observer.fleet.epoch):
a batch is scored in the epoch it was read in, and once the member has given its
memory to a new epoch the worker forgets every entry in hand (Redis lost them), at
the start of its next step, on its own thread. An entry is acknowledged (and
deleted from the stream) only once its trace's scores are delivered to Langfuse:
until then it stays pending here, its idle time reset so no other member takes
it, and a member whose disk is lost loses nothing the fleet acknowledged (the
entries come back to the others after `claim_idle_s`; docs/decisions.md).

A poison entry (it does not decode, its scoring raised `max_deliveries` times, or
it was delivered more often than that: its worker died on it) moves to the dead
stream, acknowledged, logged with its trace id and counted; `observer fleet dead
--replay` puts it back. Score ids are deterministic
(docs/scores.md#ids-and-timestamps): a trace scored twice upserts the same scores.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

import redis
import structlog

from observer.fleet.entry import BadEntry, Entry, decode
from observer.fleet.epoch import KnownEpoch
from observer.fleet.metrics import FleetMetrics
from observer.fleet.stream import Message, TraceStream, lost
from observer.pipeline import Lookup
from observer.pipeline.traces import Prepared, TraceRecorder, look_up
from observer.state import State, StateError
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.fleet")

HOLD_CHUNK = 1000  # ids per XCLAIM JUSTID
# Errors of this member's own machine, not of an entry: they never count toward the dead stream.
ENVIRONMENT = (StateError, sqlite3.Error, OSError, MemoryError)
# Redis away while an entry is scored (the judge's claim, the trace rules' claims ask it):
# not the entry's fault either; the batch stops at the first, the member waits for Redis.
REDIS_AWAY = (redis.ConnectionError, redis.TimeoutError)


@dataclass
class BatchResult:
    read: int = 0
    claimed: int = 0
    acknowledged: int = 0
    deferred: int = 0
    failed: int = 0
    dead: int = 0
    outbox_full: bool = False


@dataclass
class _Batch:
    """A batch on its way through one step."""

    messages: list[Message]
    entries: dict[str, Entry] = field(default_factory=dict)
    deliveries: dict[str, int] = field(default_factory=dict)

    def message(self, entry_id: str) -> Message:
        return next(m for m in self.messages if m[0] == entry_id)


@dataclass(eq=False, repr=False)
class EntryWorker:
    stream: TraceStream
    member: str
    recorder: TraceRecorder
    state: State
    metrics: Metrics
    _: KW_ONLY
    max_outbox: int
    claim_idle_s: float
    max_deliveries: int = 5
    lookup: Lookup | None = None
    notify: Callable[[], None] = lambda: None
    batch: int = 50
    clock: Callable[[], float] = time.monotonic
    epoch: KnownEpoch = field(default_factory=KnownEpoch)  # the member's (observer.fleet.epoch)

    def __post_init__(self) -> None:
        self.claim_idle_ms = int(self.claim_idle_s * 1000)
        self.read_in = self.epoch.value  # the epoch the entries in hand were read in
        self.reset()

    def reset(self) -> None:
        """Forget every entry in hand: Redis lost them (a data loss), or a fresh start.
        Scores already in the outbox are delivered all the same."""
        self._own: str | None = "0"  # where the start's reading of its own pending is
        self._claim_cursor = "0-0"
        self._claimed_at: float | None = None
        self._held_at = self.clock()
        self.awaiting: dict[str, str] = {}  # entry id -> trace id: recorded, not delivered
        self._recorded_at: dict[str, float] = {}
        self._deferred: dict[str, Message] = {}  # no room in the outbox: tried first
        self._failed: list[str] = []  # scoring raised here: delivered again

    # -- one step --------------------------------------------------------------------

    def step(self, block_ms: int) -> BatchResult:
        """One batch read, scored and recorded; delivered entries acknowledged (no new
        batch while the outbox is full). In the epoch the member knows, its entries in hand
        forgotten when that changed since the last step."""
        known = self.epoch.value
        if known != self.read_in:
            self.reset()
            self.read_in = known
        with self.epoch.pinned(known):  # the judge's claims: in the epoch the batch is read in
            return self._step(block_ms)

    def _step(self, block_ms: int) -> BatchResult:
        result = BatchResult()
        self.settle(result)
        if self.state.outbox_size() >= self.max_outbox:
            result.outbox_full = True
            return result
        messages = self._next(block_ms, result)
        if messages:
            result.read = len(messages)
            self.metrics.part(FleetMetrics).entries.labels(event="read").inc(len(messages))
            self._handle(_Batch(messages), result)
            self.settle(result)
        return result

    def _next(self, block_ms: int, result: BatchResult) -> list[Message]:
        if self._deferred:
            ids = list(self._deferred)[: self.batch]
            return [self._deferred.pop(i) for i in ids]
        if self._own is not None:
            messages = self.stream.read(self.member, self.batch, block_ms=None, own=self._own)
            fresh = [m for m in messages if m[0] not in self.awaiting]
            self._own = messages[-1][0] if messages else None
            if fresh:
                return fresh
        if self._failed:
            ids, self._failed = self._failed[: self.batch], self._failed[self.batch :]
            return self.stream.redeliver(self.member, ids)
        if self._claim_due():
            messages, self._claim_cursor = self.stream.claim(
                self.member, self.claim_idle_ms, self.batch, self._claim_cursor
            )
            result.claimed = len(messages)
            if messages:
                self.metrics.part(FleetMetrics).entries.labels(event="claimed").inc(len(messages))
                log.info("entries_claimed", count=len(messages), member=self.member)
                return messages
        return self.stream.read(self.member, self.batch, block_ms=block_ms)

    def _claim_due(self) -> bool:
        now = self.clock()
        if self._claim_cursor != "0-0":  # a scan under way goes on at once
            return True
        if self._claimed_at is None or now - self._claimed_at >= self.claim_idle_ms / 2000:
            self._claimed_at = now
            return True
        return False

    # -- acknowledged once delivered ---------------------------------------------------

    def settle(self, result: BatchResult | None = None) -> int:
        """Acknowledge the entries whose traces' scores left the outbox; keep the others
        (and the deferred and failed ones) from being claimed. How many were acknowledged."""
        done: list[str] = []
        if self.awaiting:
            undelivered = self.state.undelivered(set(self.awaiting.values()))
            done = [e for e, t in self.awaiting.items() if t not in undelivered]
        if done:
            self.stream.ack(done)  # raises on a Redis error: kept, acknowledged next time
            now = self.clock()
            wait = self.metrics.part(FleetMetrics).delivery_wait
            for entry_id in done:
                del self.awaiting[entry_id]
                wait.observe(max(0.0, now - self._recorded_at.pop(entry_id, now)))
            self.metrics.part(FleetMetrics).entries.labels(event="acknowledged").inc(len(done))
            if result is not None:
                result.acknowledged += len(done)
        now = self.clock()
        if now - self._held_at >= self.claim_idle_ms / 3000:
            self._held_at = now
            held = [*self.awaiting, *self._deferred, *self._failed]
            for i in range(0, len(held), HOLD_CHUNK):
                self.stream.hold(self.member, held[i : i + HOLD_CHUNK])
        return len(done)

    # -- a batch ---------------------------------------------------------------------

    def _handle(self, batch: _Batch, result: BatchResult) -> None:
        batch.deliveries = self.stream.deliveries(self.member, [m[0] for m in batch.messages])
        for message in batch.messages:
            entry_id = message[0]
            deliveries = batch.deliveries.get(entry_id, 1)
            try:
                entry = decode(message[1])
            except BadEntry as error:
                self._bury(message, str(error), deliveries, None, result)
                continue
            if deliveries > self.max_deliveries:
                reason = f"delivered {deliveries} times without being scored (its worker died)"
                self._bury(message, reason, deliveries, entry.trace_id, result)
                continue
            batch.entries[entry_id] = entry
        known = self.state.fingerprints(sorted({e.trace_id for e in batch.entries.values()}))
        prepared: dict[str, Prepared] = {}
        for entry_id, entry in batch.entries.items():
            try:
                prepared[entry_id] = self.recorder.prepare(
                    entry.trace_id,
                    entry.observations,
                    known.get(entry.trace_id),
                    entry.now,
                    entry.root,
                    too_large=entry.too_large,
                )
            except Exception as error:  # a poison entry fails alone
                self._failure(batch, entry_id, error, result)
        self._look_up(batch, prepared, result)
        for entry_id, ready in prepared.items():
            entry = batch.entries[entry_id]
            try:
                outcome = self.recorder.record(
                    entry.trace_id,
                    ready,
                    entry.root,
                    known.get(entry.trace_id),
                    entry.now,
                    entry.latest,
                )
            except Exception as error:
                self._failure(batch, entry_id, error, result)
                continue
            if outcome.kind == "deferred":  # no room in the outbox: tried again first
                result.deferred += 1
                self._deferred[entry_id] = batch.message(entry_id)
                continue
            self.awaiting[entry_id] = entry.trace_id
            self._recorded_at[entry_id] = self.clock()
        self.notify()

    def _look_up(self, batch: _Batch, prepared: dict[str, Prepared], result: BatchResult) -> None:
        """The changed traces' cited chunks in one lookup (the pass's `look_up`); alone, one
        by one, when the batch's lookup raised (so that one trace cannot fail the others)."""
        try:
            look_up(self.lookup, list(prepared.values()))
        except Exception:
            for entry_id, item in list(prepared.items()):
                try:
                    look_up(self.lookup, [item])
                except Exception as error:
                    del prepared[entry_id]
                    self._failure(batch, entry_id, error, result)

    def _failure(self, batch: _Batch, entry_id: str, error: Exception, result: BatchResult) -> None:
        """Scoring an entry raised: delivered again later, or dead after `max_deliveries`.
        Not the entry's fault (the state file cannot be written, the disk is full, Redis
        is away or lost its data): the entries not yet recorded wait in memory, no delivery
        counted, and the error goes up (the member says it is not ready, waits for Redis,
        or handles the loss)."""
        if isinstance(error, (*ENVIRONMENT, *REDIS_AWAY)) or (
            isinstance(error, redis.ResponseError) and lost(error)
        ):
            for message in batch.messages:
                held = message[0] in self.awaiting or message[0] in self._failed
                if message[0] in batch.entries and not held:
                    self._deferred[message[0]] = message
            raise error
        entry = batch.entries[entry_id]
        deliveries = batch.deliveries.get(entry_id, 1)
        result.failed += 1
        self.metrics.part(FleetMetrics).entries.labels(event="failed").inc()
        log.error(
            "entry_failed",
            trace_id=entry.trace_id,
            entry_id=entry_id,
            deliveries=deliveries,
            error=f"{type(error).__name__}: {error}",
            exc_info=error,
        )
        if deliveries >= self.max_deliveries:
            reason = f"scoring raised {type(error).__name__}: {error}"
            self._bury(batch.message(entry_id), reason, deliveries, entry.trace_id, result)
        else:
            self._failed.append(entry_id)

    def _bury(
        self,
        message: Message,
        reason: str,
        deliveries: int,
        trace_id: str | None,
        result: BatchResult,
    ) -> None:
        dead_id = self.stream.bury(self.member, message, reason, deliveries)
        result.dead += 1
        self.metrics.part(FleetMetrics).entries.labels(event="dead").inc()
        log.error(
            "entry_dead",
            trace_id=trace_id,
            entry_id=message[0],
            dead_id=dead_id,
            deliveries=deliveries,
            reason=reason,
            action="moved to the dead stream; `observer fleet dead --replay` puts it back",
        )
