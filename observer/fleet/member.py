"""One member of the fleet: its threads and its role, around the daemon's Parts.

    keeper   every lease_s / 3: renew or try the reader's lease; say this member is
             alive (members ZSET, its figures in a hash that expires); Redis's
             reachability for /readyz
    reader   while the lease is held: one pass of the reader's pipeline every
             poll interval (the first at once when the lease is gained)
    worker   always: `Worker.step` in a loop, waiting at most BLOCK_MS for entries
    follower always: the other members' signal rows into this history, then the
             fleet's watermark as this state file's (observer.fleet.alerts)

The window rules are evaluated where the lease is (the reader), with the alert
state taken over from the last evaluator when the lease is gained, and handed on
after every evaluation.

A member that cannot reach Redis stops taking work (its worker and reader
wait), says so in /readyz, and keeps delivering its outbox (the dispatcher does
not need Redis). It gives up acting as the reader once its lease could have run
out (`Lease.held`); any write it still tries is fenced. Threads never die of an
error: each is logged and tried again.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from datetime import datetime
from typing import TYPE_CHECKING

import redis
import structlog

from observer.errors import RemoteError
from observer.fleet.alerts import FleetAlerts
from observer.fleet.budget import FleetBudget
from observer.fleet.connect import BLOCK_MS, LeaseLost
from observer.fleet.keys import Keys
from observer.fleet.lease import Lease
from observer.fleet.reader import FleetMarks, StreamPublisher
from observer.fleet.stream import TraceStream
from observer.fleet.worker import Worker
from observer.pipeline import Pipeline
from observer.sources.langfuse import Stopped

if TYPE_CHECKING:
    from observer.app.parts import Parts

log = structlog.get_logger("observer.fleet")

UNREACHABLE = "the fleet's Redis is unreachable"


def member_name(parts: Parts) -> str:
    """This member's consumer name, kept in its state file: a member restarted on the
    same state file reads its own pending entries again."""
    known = parts.state.noted("fleet_member")
    if known:
        return known
    name = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    parts.state.note("fleet_member", name)
    return name


class Member:
    def __init__(self, parts: Parts, client: redis.Redis, *, name: str | None = None) -> None:
        settings = parts.settings
        fleet = settings.fleet
        assert fleet is not None
        self.parts = parts
        self.client = client
        self.name = name or member_name(parts)
        parts.metrics.fleet.redis_up.set(1)  # the member's series exist from its start
        self.keys = Keys(fleet.name)
        self.lease_s = fleet.lease_s
        self.lease = Lease(client, self.keys, self.name, fleet.lease_s)
        self.stream = TraceStream(client, self.keys, maxlen=fleet.stream_maxlen)
        self.stop = parts.stop
        self.wake = threading.Event()  # the lease was gained: read at once
        self.redis_ok = True
        self.passes = 0
        self.publisher = StreamPublisher(
            self.stream,
            self.lease,
            parts.metrics,
            settle_s=settings.source.settle_s,
            overlap_s=settings.source.overlap_s,
            stop=self.stop,
        )
        base = parts.pipeline
        self.pipeline = Pipeline(
            parts.source,
            parts.state,
            parts.metrics,
            settings.signal_params(),
            base.traces.rules,
            notify=parts.dispatcher.notify,
            settle_s=settings.source.settle_s,
            overlap_s=settings.source.overlap_s,
            sweep_interval_s=settings.source.sweep_interval_s,
            lookback_s=settings.source.lookback_s,
            should_stop=self._reader_should_stop,
            marks=FleetMarks(self.stream, self.lease),
            publisher=self.publisher,
            tracer=base.tracer,  # the reader's passes are spans like a daemon's
        )
        self.worker = Worker(
            self.stream,
            self.name,
            base.traces,
            parts.state,
            parts.metrics,
            max_outbox=settings.sink.max_outbox,
            claim_idle_s=fleet.claim_idle_s,
            lookup=base.lookup,
            notify=parts.dispatcher.notify,
        )
        # Alerts once per fleet: rows shared, trace rules raised once, one evaluator.
        self.alerts = FleetAlerts(
            client, self.keys, parts.state, self.name, maxlen=fleet.stream_maxlen
        )
        self.evaluating = False
        parts.state.history.on_row = self.alerts.publish
        parts.alerts.shared_admit = self.alerts.admit
        if parts.judge is not None:  # the judge's caps and samples counted once for the fleet
            parts.judge.shared = FleetBudget(client, self.keys)
        self._threads: list[threading.Thread] = []

    # -- life -------------------------------------------------------------------

    def start(self) -> None:
        """The stream's group, then the three threads (the lease tried at once)."""
        self.stream.ensure_group()
        evaluator = self.parts.evaluator
        if evaluator is not None:
            evaluator.active = lambda: self.evaluating and self.lease.held()
            evaluator.after_tick = self.hand_over
        self.keep()
        for target, role in (
            (self._keeping, "keeper"),
            (self._reading, "reader"),
            (self._working, "worker"),
            (self._following, "follower"),
        ):
            thread = threading.Thread(target=target, name=f"fleet-{role}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("fleet_joined", member=self.name, fleet=self.keys.name, reader=self.lease.held())

    def shutdown(self, deadline: float) -> bool:
        """Stop (the daemon's stop is set), join the threads, give the lease up."""
        self.stop.set()
        self.wake.set()
        joined = True
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            joined = joined and not thread.is_alive()
        try:
            if self.lease.value is not None:
                self.lease.release()
                self.parts.metrics.fleet.reader.set(0)
            self.client.zrem(self.keys.members, self.name)
        except redis.RedisError:
            pass  # the lease runs out by itself
        self.client.close()
        log.info("fleet_left", member=self.name)
        return joined

    # -- keeper -------------------------------------------------------------------

    def _keeping(self) -> None:
        while not self.stop.wait(self.lease_s / 3):
            self.keep()

    def keep(self) -> None:
        """One round: the lease renewed or tried, this member's figures, reachability."""
        metrics = self.parts.metrics
        was = self.lease.held()
        try:
            held = self.lease.keep()
            pending = self.stream.pending().consumers.get(self.name, 0)
            self._announce(held, pending)
        except redis.RedisError as error:
            held = self.lease.held()  # still ours until it could have run out
            if not held:
                self.lease.forget()
            self._unreachable(error)
        else:
            self._reachable()
            metrics.fleet.pending.set(pending)
        if held != was:
            metrics.fleet.lease_changes.inc()
            metrics.fleet.reader.set(1 if held else 0)
            log.info(
                "lease_gained" if held else "lease_lost", member=self.name, token=self.lease.token
            )
            if held:
                self.pipeline.cursor = None  # from the fleet's watermark, as a new reader
                self._take_over()
                self.wake.set()
            else:
                self.evaluating = False
        health = self.parts.health
        health.langfuse_not_used = None if held else "read by the fleet's reader"

    def _announce(self, reader: bool, pending: int) -> None:
        metrics = self.parts.metrics
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
            "outbox": self.parts.state.outbox_size(),
            "lease_changes": int(metrics.value("observer_fleet_lease_changes_total")),
        }
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zadd(self.keys.members, {self.name: int(time.time() * 1000)})
            pipe.hset(self.keys.member(self.name), mapping=figures)
            pipe.pexpire(self.keys.member(self.name), int(self.lease_s * 3000))
            pipe.execute()

    def _unreachable(self, error: Exception) -> None:
        if self.redis_ok:
            log.warning(
                "fleet_redis_unreachable",
                member=self.name,
                error=str(error),
                action="work paused, outbox still delivered",
            )
        self.redis_ok = False
        self.parts.metrics.fleet.redis_up.set(0)
        self.parts.health.not_ready_because = UNREACHABLE

    def _reachable(self) -> None:
        if not self.redis_ok:
            log.info("fleet_redis_reachable", member=self.name, action="work resumed")
            self.worker.reread_own()  # an acknowledgement may have failed with the link
        self.redis_ok = True
        self.parts.metrics.fleet.redis_up.set(1)
        if self.parts.health.not_ready_because == UNREACHABLE:
            self.parts.health.not_ready_because = None

    def _take_over(self) -> None:
        """The alert state the last evaluator handed on, before this member evaluates."""
        try:
            took = self.alerts.take_over()
        except redis.RedisError as error:
            self._unreachable(error)
            return
        self.evaluating = True
        log.info("alert_state_taken_over" if took else "alert_state_started", member=self.name)

    def hand_over(self) -> None:
        """After an evaluation: the alert state for whoever evaluates next."""
        if not (self.evaluating and self.lease.held()):
            return
        try:
            self.alerts.hand_over(self.lease.value)
        except LeaseLost:
            self.evaluating = False
        except redis.RedisError as error:
            self._unreachable(error)

    # -- follower -------------------------------------------------------------------

    def _following(self) -> None:
        while not self.stop.wait(0.5):
            if not self.redis_ok:
                continue
            try:
                self.alerts.sync(self.stream.watermark())
            except redis.RedisError as error:
                self._unreachable(error)
            except Exception:
                log.exception("follow_crashed", member=self.name)

    # -- reader -------------------------------------------------------------------

    def _reader_should_stop(self) -> bool:
        self.parts.health.beat()
        self.parts.health.langfuse_answered()
        return self.stop.is_set() or not self.lease.held()

    def _reading(self) -> None:
        interval = self.parts.settings.source.poll_interval_s
        while not self.stop.is_set():
            if not (self.lease.held() and self.redis_ok):
                self.wake.wait(self.lease_s / 3)
                self.wake.clear()
                continue
            self.read_once()
            self.wake.wait(interval)
            self.wake.clear()

    def read_once(self) -> None:
        """One pass of the reader's pipeline; never raises."""
        parts = self.parts
        try:
            moment = parts.clock()
            result = self.pipeline.poll(moment)
            self.passes += 1
            parts.health.langfuse_answered()
            watermark = self.stream.watermark()
            lag = (moment - watermark).total_seconds() if watermark is not None else 0.0
            if parts.evaluator is not None:
                parts.evaluator.after_pass(moment, max(0.0, lag))
            log.info(
                "poll_completed",
                role="reader",
                sweep=result.sweep,
                observations=result.observations,
                published=result.published,
                unchanged=result.unchanged,
                unsettled=result.unsettled,
                unacknowledged=self.stream.unacked(),
            )
        except (Stopped, LeaseLost) as error:
            log.info("pass_ended", member=self.name, reason=type(error).__name__)
        except redis.RedisError as error:
            self._unreachable(error)
        except RemoteError as error:
            log.warning("poll_failed", kind="unreachable", error=str(error))
        except Exception:  # the loop never dies on a strange trace or a bug
            log.exception("poll_crashed")

    def watermark(self) -> datetime | None:
        """The fleet's watermark (None when unknown or Redis cannot say)."""
        try:
            return self.stream.watermark()
        except redis.RedisError:
            return None

    # -- worker -------------------------------------------------------------------

    def _working(self) -> None:
        while not self.stop.is_set():
            if not self.redis_ok:
                self.stop.wait(0.5)
                continue
            self.parts.health.beat()
            try:
                done = self.worker.step(BLOCK_MS)
                if done.outbox_full:
                    self.stop.wait(0.5)  # backpressure: the dispatcher must make room first
            except redis.RedisError as error:
                self._unreachable(error)
            except Exception:  # never dies; the entries stay pending and are read again
                log.exception("work_crashed", member=self.name)
                self.stop.wait(0.5)
