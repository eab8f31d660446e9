"""One member of the fleet: its threads and its role, on parts the composition root built.

    keeper   a job on the daemon's schedule, every lease_s / 3: the fleet's epoch
             checked; renew or try the reader's lease; say this member is alive
             (members ZSET, its figures in a hash that expires); Redis's reachability
             for /readyz; as the reader, consumers gone for a day deleted
    reader   a thread, while the lease is held: one pass of the reader's pipeline
             every poll interval (at once when the lease is gained: an event)
    worker   a thread, always: `Worker.step` in a loop, waiting at most BLOCK_MS for
             entries
    follower a job on the daemon's schedule, every FOLLOW_EVERY_S: the other members'
             signal rows into this history, then the fleet's watermark as this state
             file's (observer.fleet.alerts)

The window rules are evaluated where the lease is (the reader), with the alert
state taken over from the last evaluator when the lease is gained, and handed on
after every evaluation.

A member that cannot reach Redis stops taking work (its worker and reader
wait), says so in /readyz, and keeps delivering its outbox (the dispatcher does
not need Redis). It gives up acting as the reader once its lease could have run
out (`Lease.held`); any write it still tries is fenced. Threads never die of an
error: each is logged and tried again.

Redis that lost its data (a restart without persistence, a failover, an
eviction) is noticed by the epoch key gone or changed, or a `NOGROUP` answer:
the member recreates the epoch and the group (whoever comes first), says so once
at error level (`fleet_redis_data_lost`) and in
`observer_fleet_redis_resets_total`, forgets the entries it held (their scores
in its outbox are delivered all the same), and gives back what it remembers
doing that the fleet must not do twice (`Member.restorers`: the judge's spend and
claims, the trace rules' claims). Until it has, it cannot take the reader's lease
or claim an answer for the judge in the new epoch: those scripts carry the epoch
it acts in (`Member.known`) and refuse another (observer.fleet.epoch), which it
handles as the loss; a batch its worker read before the loss is not claimed
after it, and is forgotten. A reader then waits one lease before it publishes,
so that every live member has given its memory back; it reads from its own copy
of the watermark (the follower's), which stayed below every trace not yet
delivered.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis
import structlog

from observer.background import Deadline, Schedule
from observer.background import Worker as Loop
from observer.failures import PassOutcome, said
from observer.fleet.alerts import FleetAlerts, FleetEvaluation
from observer.fleet.connect import BLOCK_MS
from observer.fleet.epoch import KnownEpoch
from observer.fleet.keys import Keys, epoch_parts, epoch_value
from observer.fleet.lease import Lease
from observer.fleet.metrics import FleetMetrics
from observer.fleet.stream import TraceStream, lost
from observer.fleet.worker import ENVIRONMENT, EntryWorker
from observer.health import Health
from observer.pipeline import Pipeline
from observer.state import State
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.fleet")

UNREACHABLE = "the fleet's Redis is unreachable"
UNWRITABLE = "the state file cannot be written"
# Consumers with nothing pending, not seen this long, are deleted (by the reader).
CONSUMER_KEPT_MS = 86_400_000
FORGET_EVERY_S = 600.0
FOLLOW_EVERY_S = 0.5


def member_name(state: State) -> str:
    """This member's consumer name, kept in its state file: a member restarted on the
    same state file reads its own pending entries again."""
    known = state.noted("fleet_member")
    if known:
        return known
    name = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    state.note("fleet_member", name)
    return name


@dataclass(eq=False, repr=False)
class Member:
    """A fleet member, on what the composition root built for it (observer.app.parts)."""

    name: str
    client: redis.Redis
    keys: Keys
    lease: Lease
    stream: TraceStream
    alerts: FleetAlerts
    evaluation: FleetEvaluation
    worker: EntryWorker
    pipeline: Pipeline  # the reader's (marks and publisher in Redis)
    read: Callable[[], PassOutcome]  # one reader's pass (observer.app.passes.Passes.tick)
    state: State
    metrics: Metrics
    health: Health
    stop: threading.Event
    lease_s: float
    poll_interval_s: float
    # What this member gives back after Redis lost its data: each (epoch) -> how many.
    restorers: Mapping[str, Callable[[str], int]] = field(default_factory=dict)
    # The epoch this member acts in (once it gave its memory to it), shared with its lease,
    # its judge's claims and its worker (observer.fleet.epoch).
    known: KnownEpoch = field(default_factory=KnownEpoch)

    def __post_init__(self) -> None:
        self.metrics.part(FleetMetrics).redis_up.set(1)  # the member's series exist from its start
        self.wake = threading.Event()  # the lease was gained: read at once
        self.redis_ok = True
        self.passes = 0
        self.epoch: str | None = self.state.noted(self._epoch_note)  # the last noticed
        self.known.value = self.epoch  # noted once given back to
        self.resets = 0
        self.last_reset: datetime | None = None
        self._owed: str | None = None  # an epoch this member has not given its memory to
        self._read_after = 0.0  # monotonic: after a data loss, the reader waits a lease
        self._forgot_at = 0.0
        # The event-driven two (observer.background.Worker), stopped by the daemon's stop;
        # the keeper and the follower are periodic: jobs on the daemon's schedule (`start`).
        self._loops = [
            Loop(
                "fleet-reader",
                self._read_step,
                interval_s=self.poll_interval_s,
                crash_event="poll_crashed",
                wake=self.wake,
                stopping=self.stop,
            ),
            Loop(
                "fleet-worker",
                self._work_step,
                interval_s=0.5,
                crash_event="work_crashed",
                stopping=self.stop,
            ),
        ]

    # -- life -------------------------------------------------------------------

    def start(self, schedule: Schedule) -> None:
        """The epoch and the stream's group (the lease tried at once), then the keeper and
        the follower on `schedule` (stopped by its stop, before `shutdown`) and the threads."""
        self.check_epoch()
        self.keep()
        schedule.every("fleet-keeper", self.keep, self.lease_s / 3, crash_event="keep_crashed")
        schedule.every("fleet-follower", self.follow, FOLLOW_EVERY_S, crash_event="follow_crashed")
        for loop in self._loops:
            loop.start()
        log.info("fleet_joined", member=self.name, fleet=self.keys.name, reader=self.lease.held())

    def shutdown(self, deadline: Deadline) -> bool:
        """Stop (the daemon's stop is set), join the threads, give the lease up."""
        self.stop.set()
        joined = all([loop.stop(deadline) for loop in self._loops])
        try:
            if self.lease.value is not None:
                self.lease.release()
                self.metrics.part(FleetMetrics).reader.set(0)
            self.client.zrem(self.keys.members, self.name)
        except redis.RedisError:
            pass  # the lease runs out by itself
        self.client.close()
        log.info("fleet_left", member=self.name)
        return joined

    # -- keeper -------------------------------------------------------------------

    def keep(self) -> None:
        """One round: the lease renewed or tried, this member's figures, reachability."""
        metrics = self.metrics
        was = self.lease.held()
        try:
            self.check_epoch()
            held = self.lease.keep()
            pending = self.stream.pending().consumers.get(self.name, 0)
            self._announce(held, pending)
            if held:
                self._forget_idle_consumers()
        except redis.ResponseError as error:
            held = self.lease.held()
            if lost(error):
                self.recover()
            else:
                log.warning("fleet_keep_failed", member=self.name, error=str(error))
        except redis.RedisError as error:
            held = self.lease.held()  # still ours until it could have run out
            if not held:
                self.lease.forget()
            self._unreachable(error)
        else:
            self._reachable()
            metrics.part(FleetMetrics).pending.set(pending)
        if held != was:
            metrics.part(FleetMetrics).lease_changes.inc()
            metrics.part(FleetMetrics).reader.set(1 if held else 0)
            log.info(
                "lease_gained" if held else "lease_lost", member=self.name, token=self.lease.token
            )
            if held:
                self.pipeline.cursor = None  # from the fleet's watermark, as a new reader
                self._take_over()
                self.wake.set()
            else:
                self.evaluation.evaluating = False
        health = self.health
        health.langfuse_not_used = None if held else "read by the fleet's reader"

    def _announce(self, reader: bool, pending: int) -> None:
        metrics = self.metrics
        figures = {
            "role": "reader" if reader else "worker",
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "read": int(metrics.value("observer_fleet_entries_total", event="read")),
            "acknowledged": int(
                metrics.value("observer_fleet_entries_total", event="acknowledged")
            ),
            "claimed": int(metrics.value("observer_fleet_entries_total", event="claimed")),
            "published": int(metrics.value("observer_fleet_entries_total", event="published")),
            "pending": pending,
            "outbox": self.state.outbox_size(),
            "lease_changes": int(metrics.value("observer_fleet_lease_changes_total")),
            "failed": int(metrics.value("observer_fleet_entries_total", event="failed")),
            "dead": int(metrics.value("observer_fleet_entries_total", event="dead")),
            "resets": self.resets,
            "last_reset": self.last_reset.isoformat() if self.last_reset else "",
            "awaiting": len(self.worker.awaiting),
        }
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zadd(self.keys.members, {self.name: int(time.time() * 1000)})
            pipe.hset(self.keys.member(self.name), mapping=figures)
            pipe.pexpire(self.keys.member(self.name), int(self.lease_s * 3000))
            pipe.execute()

    # -- Redis that lost its data -------------------------------------------------

    @property
    def _epoch_note(self) -> str:
        return f"fleet_epoch:{self.keys.name}"

    def check_epoch(self) -> None:
        """The fleet's epoch as this member knows it; a missing or another one means Redis
        lost its data: recreated, said once, and this member's memory given back."""
        found = self.client.get(self.keys.epoch)
        value = found.decode() if isinstance(found, bytes) else None
        if value is None or value != self.epoch:
            known = self.epoch
            if value is None:
                kind = "new" if known is None else "reset"
                mine = epoch_value(self.name, kind, int(time.time() * 1000))
                self.client.set(self.keys.epoch, mine, nx=True)
                raw = self.client.get(self.keys.epoch)
                value = raw.decode() if isinstance(raw, bytes) else mine
            self.stream.ensure_group()
            self.epoch = value
            if known is None:
                self.state.note(self._epoch_note, value)
            else:
                self._reset(value)
        if self._owed is not None:
            self._give_back(self._owed)
        self.known.value = self.epoch  # given back to: the member acts in it now

    def recover(self) -> None:
        """A `NOGROUP` answer: the group recreated, the epoch checked (never raises)."""
        try:
            self.check_epoch()
            self.stream.ensure_group()  # the epoch may have survived what the group did not
        except redis.RedisError as error:
            self._unreachable(error)

    def _reset(self, epoch: str) -> None:
        at, by, _kind = epoch_parts(epoch)
        self.resets += 1
        self.last_reset = datetime.now(UTC)
        self.metrics.part(FleetMetrics).redis_resets.inc()
        # The worker forgets its entries in hand on its own thread, once `known` moves on.
        self.pipeline.cursor = None  # a reader reads again from its watermark
        self._read_after = time.monotonic() + self.lease_s
        self._owed = epoch
        log.error(
            "fleet_redis_data_lost",
            member=self.name,
            epoch_since=at.isoformat(),
            recreated_by=by,
            action=(
                "stream, group and epoch recreated; entries in hand forgotten (their scores "
                "are delivered from the outbox); this member's judge spend and pages given "
                "back; traces read again from the watermark; Redis needs AOF and "
                "maxmemory-policy noeviction (docs/operating.md#redis)"
            ),
        )

    def _give_back(self, epoch: str) -> None:
        """What this member remembers doing, into the new epoch (each restorer is once per
        epoch and member in Redis: a retry after a failure never counts twice)."""
        given = {what: restore(epoch) for what, restore in self.restorers.items()}
        self._owed = None
        self.state.note(self._epoch_note, epoch)  # only now: a crash before gives back again
        log.info("fleet_memory_given_back", member=self.name, given=given)

    def _forget_idle_consumers(self) -> None:
        now = time.monotonic()
        if now - self._forgot_at < FORGET_EVERY_S:
            return
        self._forgot_at = now
        gone = self.stream.forget_idle_consumers(CONSUMER_KEPT_MS)
        if gone:
            log.info("fleet_consumers_deleted", consumers=gone, reason="idle a day, none pending")

    def _unreachable(self, error: Exception) -> None:
        if self.redis_ok:
            log.warning(
                "fleet_redis_unreachable",
                member=self.name,
                error=str(error),
                action="work paused, outbox still delivered",
            )
        self.redis_ok = False
        self.metrics.part(FleetMetrics).redis_up.set(0)
        self.health.hold("redis", UNREACHABLE)

    def _reachable(self) -> None:
        if not self.redis_ok:
            log.info("fleet_redis_reachable", member=self.name, action="work resumed")
            self.wake.set()  # a reader reads again at once
        self.redis_ok = True
        self.metrics.part(FleetMetrics).redis_up.set(1)
        self.health.release("redis")

    def _take_over(self) -> None:
        """The alert state the last evaluator handed on, before this member evaluates."""
        try:
            took = self.evaluation.take_over()
        except redis.RedisError as error:
            self._unreachable(error)
            return
        log.info("alert_state_taken_over" if took else "alert_state_started", member=self.name)

    # -- follower -------------------------------------------------------------------

    def follow(self) -> None:
        """The other members' signal rows and the fleet's watermark, while Redis answers."""
        if self.redis_ok:
            try:
                self.alerts.sync(self.stream.watermark())
            except redis.RedisError as error:
                self._unreachable(error)

    # -- reader -------------------------------------------------------------------

    def _read_step(self) -> bool:
        """A pass while this member holds the lease (woken at once when it gains it)."""
        if self.lease.held() and self.redis_ok and time.monotonic() >= self._read_after:
            self.read_once()
        return False

    def read_once(self) -> None:
        """One pass of the reader's pipeline; never raises. What stopped it is said once
        (observer.failures), and Redis's part acted on: its data lost, or away."""
        outcome = self.read()
        error = outcome.error
        if error is None:
            self.passes += 1
        elif isinstance(error, redis.ResponseError) and lost(error):
            self.recover()
        elif isinstance(error, redis.RedisError) and not isinstance(error, redis.ResponseError):
            self._unreachable(error)
        else:
            said(outcome, member=self.name)

    def watermark(self) -> datetime | None:
        """The fleet's watermark (None when unknown or Redis cannot say)."""
        try:
            return self.stream.watermark()
        except redis.RedisError:
            return None

    # -- worker -------------------------------------------------------------------

    def _work_step(self) -> bool:
        """One batch (waiting up to BLOCK_MS for entries); at once again unless the outbox is
        full (backpressure: the dispatcher must make room first) or Redis is away. An error
        leaves the entries pending: they are read again."""
        if not self.redis_ok:
            return False
        self.health.beat()
        try:
            more = not self.worker.step(BLOCK_MS).outbox_full
        except ENVIRONMENT as error:
            # Disk full or read-only: the entries wait in memory; the outbox still drains.
            if self.health.held("state") is None:
                log.error("state_unwritable", error=str(error), action="work paused")
            self.health.hold("state", UNWRITABLE)
            return False
        except redis.ResponseError as error:
            if lost(error):
                self.recover()
                return True
            raise
        except redis.RedisError as error:
            self._unreachable(error)
            return False
        if self.health.release("state"):
            log.info("state_writable_again", action="work resumed")
        return more
