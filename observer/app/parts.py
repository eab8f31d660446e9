"""`Parts` and `build`: the composition root, every part wired, and the one stop.

`build(settings, mode=...)` wires what one command needs (the clients come from
observer.app.builders, a fleet member's pieces from observer.app.fleet_parts);
`Parts.stop(deadline)` is the only stop sequence: `run`, `run --once`, `backfill`
and the demo all end through it, one deadline handed down to every part.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import redis
import structlog
from langfuse.api.client import LangfuseAPI

from observer.alerts.evaluator import AlertEvaluator
from observer.alerts.service import AlertService
from observer.app import event_path
from observer.app.builders import (
    both_hooks,
    build_alerts,
    build_api,
    build_budget,
    build_health,
    build_judge_client,
    build_resolver,
    build_source,
    judge_to_langfuse,
    now_utc,
)
from observer.app.contact import ready
from observer.app.event_path import EventPath, ProjectId
from observer.app.fleet_parts import FleetParts, connect_fleet, reader_wiring
from observer.app.judge_checks import judge_checks
from observer.app.passes import Passes
from observer.background import Deadline, Periodic, Schedule
from observer.config import Settings
from observer.fleet.alerts import FleetAlerts, FleetEvaluation
from observer.fleet.member import Member
from observer.fleet.worker import EntryWorker
from observer.health import Health
from observer.judge.client import JudgeClient
from observer.judge.service import JudgedHook, JudgeService
from observer.mapping.rules import MappingRules
from observer.model import RagRecord, Signals
from observer.otlp.assembly import Limits
from observer.otlp.receiver import Receiver
from observer.pipeline import Pipeline
from observer.resolver.daemon import ResolverLookup
from observer.signals.summary import Summary
from observer.sinks import ScoreSink
from observer.sinks.dispatcher import Dispatcher
from observer.sinks.langfuse_scores import LangfuseScoreSink
from observer.sources import ObservationSource
from observer.sources.langfuse import LangfuseSource
from observer.sources.ratelimit import RateLimiter
from observer.state import State
from observer.state.rows import Row
from observer.telemetry.http import HttpServer
from observer.telemetry.metrics import Metrics
from observer.telemetry.otel import Telemetry

log = structlog.get_logger("observer.app")


@dataclass
class Parts:
    """Everything one command needs, wired; a context manager that closes what
    `build()` opened (the state file, the chunk store's client, telemetry), last
    opened first, each once: `with app.build(settings) as parts: ...`."""

    settings: Settings
    state: State
    metrics: Metrics
    source: ObservationSource
    dispatcher: Dispatcher
    pipeline: Pipeline
    stopping: threading.Event  # set by a signal, or by the stop: every loop ends
    summary: Summary
    alerts: AlertService
    health: Health
    telemetry: Telemetry
    evaluator: AlertEvaluator  # the window rules' thread (a one-shot run works it in burst)
    passes: Passes  # the one pass driver: `run`, `run --once` and a fleet's reader
    judge: JudgeService | None = None
    resolver: ResolverLookup | None = None
    member: Member | None = None  # mode "member": this process's part of the fleet
    # "Now" for windows and the watermark: Langfuse's clock when reading Langfuse.
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # What build() opened, to close: `close()`, or leaving the `with` block.
    closing: ExitStack = field(default_factory=ExitStack, repr=False)
    # The chunk store's client, closed once (a Milvus Lite file is one process's at a time).
    close_resolver: Callable[[], None] = field(default=lambda: None, repr=False)
    # The request budget reads and score posts share (None: no Langfuse client built).
    budget: RateLimiter | None = None
    # The judge's own health looked at on the daemon's schedule (observer.app.judge_checks).
    judge_checks: tuple[Periodic, ...] = ()
    # The event path's receiver (`[otlp]`, docs/daemon.md#the-event-path), in the daemon.
    receiver: EventPath | None = None
    # The periodic jobs (the daemon's poll, housekeeping, the judge's looks).
    schedule: Schedule = field(default_factory=Schedule, repr=False)
    http: HttpServer | None = None  # the daemon's /metrics, /healthz, /readyz port
    _stopped: tuple[bool, int] | None = field(default=None, repr=False)
    _abandoned: bool = field(default=False, repr=False)

    def __enter__(self) -> Parts:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close what build() opened; again, nothing happens. After a stop that left a
        thread inside a request, nothing is closed under it (the state file's hold alone is
        given up): the process ends anyway."""
        if self._abandoned:  # the process ends anyway; another may take the file now
            self.closing.pop_all()
            self.state.let_go()
        self.closing.close()

    def stop(self, deadline: Deadline, *, deliver: bool = True) -> tuple[bool, int]:
        """Stop every part by `deadline`, in an order where none is closed under a thread
        that still uses it: whether the outbox was flushed, and how many scores it holds.
        Idempotent. `deliver` false: no last flush (Langfuse was never reached).

        Intake first (the receiver, the schedule's jobs: a pass in flight sees the stop
        between pages and hands back the rest), then the fleet member (its lease given
        up), the judge (half of what is left), the outbox flushed until a reserve before
        the deadline, which the evaluator, the notifiers and telemetry share. A thread
        still inside a request at the deadline is abandoned (each is a daemon thread),
        and `close()` then leaves the state file open under it."""
        if self._stopped is not None:
            return self._stopped
        self.stopping.set()
        reserve = min(3.0, self.settings.run.shutdown_grace_s / 4)
        early = deadline.before(reserve)
        # Spans no longer taken (503: the sender retries elsewhere or later).
        ended = self.receiver is None or self.receiver.stop(early)
        if not self.schedule.stop(early):
            log.warning("poll_abandoned", reason="still inside a request at the grace's end")
            ended = False
        if self.member is not None:  # no new entries; the lease given up for the next reader
            ended = self.member.shutdown(early) and ended
        if self.judge is not None:
            halfway = Deadline(time.monotonic() + max(0.0, deadline.left() - reserve) / 2)
            if not self.judge.shutdown(halfway):
                log.warning("judge_abandoned", pending=self.judge.pending())
            ended = self.judge.ended and ended
        flushed, sent = self.dispatcher.shutdown(early, flush=deliver)
        ended = self.evaluator.shutdown(deadline) and sent and ended
        if not self.alerts.shutdown(deadline):
            log.warning("alert_notifications_undelivered")
        ended = self.alerts.ended and ended
        self.telemetry.shutdown(deadline.left())
        if ended:
            self.close_resolver()
        left = self.state.outbox_size()  # a read: the state stays open under a late thread
        if self.http is not None:
            self.http.stop()
        self._abandoned = not ended
        self._stopped = (flushed, left)
        return self._stopped


Mode = Literal["solo", "once", "member"]


def build(
    settings: Settings,
    *,
    mode: Mode = "once",
    state_path: str | Path | None = None,
    source: ObservationSource | None = None,
    sink: ScoreSink | None = None,
    metrics: Metrics | None = None,
    stop: threading.Event | None = None,
    judge_client: JudgeClient | None = None,
    on_judged: JudgedHook | None = None,
    telemetry: Telemetry | None = None,
    redis_client: redis.Redis | None = None,
    member_name: str | None = None,
) -> Parts:
    """Wire every part for `mode`: "solo" (the daemon alone), "once" (`run --once`,
    backfill, the demo) or "member" (the daemon as a member of the `[fleet]`, its reader,
    worker and shared alerts and budget included). Without `source`/`sink`, both talk to
    Langfuse. Every part gets what it works with at construction; nothing is assigned
    into a part after.

    What it opens is closed when it raises (ConfigError, StateError, FleetUnreachable),
    or when the returned Parts is closed. A `telemetry` passed in stays the caller's to
    shut down. Mode "member" connects to the fleet's Redis (or uses `redis_client`).
    """
    if mode != "once":  # the receiver runs in the daemon only; a one-shot reads as configured
        event_path.check(settings)
        settings = event_path.with_backstop(settings)
    with ExitStack() as closing:
        wiring = _Wiring(closing, settings, mode, metrics, stop, judge_client, on_judged)
        wiring.open(state_path, redis_client, member_name, telemetry)
        wiring.clients(source, sink)
        parts = wiring.parts()
        parts.closing = closing.pop_all()
    return parts


class _Wiring:
    """`build`'s steps, each a room of its own: the state file (and a fleet's Redis
    before it), the clients, then the pipeline and what drives it."""

    def __init__(
        self,
        closing: ExitStack,
        settings: Settings,
        mode: Mode,
        metrics: Metrics | None,
        stop: threading.Event | None,
        judge_client: JudgeClient | None,
        on_judged: JudgedHook | None,
    ) -> None:
        self.closing = closing
        self.settings = settings
        self.mode = mode
        self.metrics = metrics or Metrics(max_query_types=settings.metrics.max_query_types)
        self.stop = stop or threading.Event()
        self.judge_client = judge_client
        self.on_judged = on_judged
        self.fleet: FleetParts | None = None
        self.fleet_alerts: FleetAlerts | None = None
        self.api: LangfuseAPI | None = None

    def open(
        self,
        state_path: str | Path | None,
        client: redis.Redis | None,
        member_name: str | None,
        telemetry: Telemetry | None,
    ) -> None:
        """A fleet's Redis, the state file (held: one process on it), health, the chunk
        store, telemetry and the alert service."""
        settings, closing, metrics = self.settings, self.closing, self.metrics
        path = state_path or settings.state.path
        if self.mode == "member":
            self.fleet = connect_fleet(closing, settings, path, client, member_name)
        on_row = self.fleet.on_row(settings) if self.fleet is not None else None
        self.state = State(path, max_outbox=settings.sink.max_outbox, on_row=on_row)
        closing.callback(self.state.close)
        self.state.hold()  # one process on a state file: a second one stops here, naming it
        self.watermark = self.state.watermark()
        if self.watermark is not None:  # the lag is known from the start, not after a pass
            metrics.set_watermark(self.watermark.timestamp())
        self.health = build_health(settings, self.state, metrics)
        self.resolver = build_resolver(settings, metrics)
        self.close_resolver = once(self.resolver.close if self.resolver else lambda: None)
        closing.callback(self.close_resolver)
        if telemetry is None:
            telemetry = Telemetry(judge_to_langfuse=judge_to_langfuse(settings))
            closing.callback(telemetry.shutdown, min(5.0, settings.run.shutdown_grace_s))
        self.telemetry = telemetry
        if self.fleet is not None:
            self.fleet_alerts = self.fleet.alerts(settings, self.state)
        self.alerts = build_alerts(settings, self.state, metrics, shared=self.fleet_alerts)

    def clients(self, source: ObservationSource | None, sink: ScoreSink | None) -> None:
        """Langfuse's client (unless both ends are given), the one request budget reads and
        score posts share (docs/daemon.md: the request budget), the dispatcher, the judge."""
        settings, metrics = self.settings, self.metrics
        if source is None or sink is None:
            self.api = build_api(settings)
        self.limiter = build_budget(settings, metrics)
        if source is None:
            assert self.api is not None
            waiting = _alive_while_waiting(self.health, self.stop)
            source = build_source(
                settings, metrics, api=self.api, should_stop=waiting, limiter=self.limiter
            )
        if sink is None:
            assert self.api is not None
            sink = LangfuseScoreSink(
                self.api, limiter=self.limiter, score_configs=True, metrics=metrics
            )
        self.source, self.sink = source, sink
        self.dispatcher = Dispatcher(
            self.state,
            sink,
            metrics,
            batch_size=settings.sink.batch_size,
            max_backoff_s=settings.sink.max_backoff_s,
            tracer=self.telemetry.tracer,
        )
        self.judge = self._judge() if settings.judge.enabled else None

    def _judge(self) -> JudgeService:
        settings = self.settings
        return JudgeService(
            self.judge_client or build_judge_client(settings, self.telemetry),
            self.state,
            self.metrics,
            settings.sampler_params(),
            notify=self.dispatcher.notify,
            concurrency=settings.judge.concurrency,
            queue_size=settings.judge.queue_size,
            on_judged=both_hooks(self.alerts.judged, self.on_judged),
            signal_params=settings.signal_params(),
            tracer=self.telemetry.tracer,
            # A fleet's caps and samples counted once for the whole fleet.
            shared=self.fleet.budget if self.fleet is not None else None,
        )

    def parts(self) -> Parts:
        """The pipeline and its clock, the evaluator and the pass driver, the receiver and
        the fleet member, the judge's checks: `Parts`."""
        settings, fleet = self.settings, self.fleet
        summary = Summary()
        pipeline = self._pipeline(settings.mapping_rules(), summary)
        clock = self._clock()
        evaluation = None
        if self.fleet_alerts is not None and fleet is not None:
            evaluation = FleetEvaluation(self.fleet_alerts, fleet.lease)
        active = evaluation.active if evaluation is not None else lambda: True
        # Window rules on their own thread: a catch-up after a gap never holds a pass.
        evaluator = AlertEvaluator(
            self.alerts,
            interval_s=settings.source.poll_interval_s,
            active=active,
            after_tick=evaluation.hand_over if evaluation is not None else lambda: None,
        )
        passes = Passes(
            pipeline,
            self.health,
            evaluator,
            clock,
            check_server=self._server_check(),
            **_pass_report(self.state, fleet),
        )
        receiver = self._receiver(pipeline, clock) if self.mode == "solo" else None
        member = None
        if fleet is not None and self.fleet_alerts is not None and evaluation is not None:
            member = self._member(fleet, self.fleet_alerts, evaluation, pipeline, passes)
        checks = judge_checks(
            settings,
            self.mode != "once",
            self.api,
            self.limiter,
            self.judge,
            self.metrics,
            self.state,
            self.stop,
            active,
        )
        return Parts(
            settings,
            self.state,
            self.metrics,
            self.source,
            self.dispatcher,
            pipeline,
            self.stop,
            summary,
            self.alerts,
            self.health,
            self.telemetry,
            evaluator,
            passes,
            self.judge,
            self.resolver,
            member,
            clock=clock,
            close_resolver=self.close_resolver,
            budget=self.limiter,
            judge_checks=checks,
            receiver=receiver,
        )

    def _member(
        self,
        fleet: FleetParts,
        fleet_alerts: FleetAlerts,
        evaluation: FleetEvaluation,
        pipeline: Pipeline,
        passes: Passes,
    ) -> Member:
        """This process's part of the fleet: its worker scores with the pipeline's recorder."""
        settings, state = self.settings, self.state
        assert settings.fleet is not None
        worker = EntryWorker(
            fleet.stream,
            fleet.name,
            pipeline.traces,
            state,
            self.metrics,
            max_outbox=settings.sink.max_outbox,
            claim_idle_s=settings.fleet.claim_idle_s,
            max_deliveries=settings.fleet.max_deliveries,
            lookup=self.resolver,
            notify=self.dispatcher.notify,
            epoch=fleet.epoch,
        )
        return Member(
            name=fleet.name,
            client=fleet.client,
            keys=fleet.keys,
            lease=fleet.lease,
            stream=fleet.stream,
            alerts=fleet_alerts,
            evaluation=evaluation,
            worker=worker,
            pipeline=pipeline,
            read=passes.tick,
            state=state,
            metrics=self.metrics,
            health=self.health,
            stop=self.stop,
            lease_s=settings.fleet.lease_s,
            poll_interval_s=settings.source.poll_interval_s,
            restorers={
                "judge": lambda epoch: fleet.budget.restore(state, epoch, fleet.name, now_utc()),
                "trace_rules": lambda epoch: fleet_alerts.restore(
                    state, epoch, fleet.name, now_utc()
                ),
                "alert_state": evaluation.give_back,
            },
            known=fleet.epoch,
        )

    def _receiver(self, pipeline: Pipeline, clock: Callable[[], datetime]) -> EventPath | None:
        """The receiver of a daemon with `[otlp]` on (a one-shot run and a fleet have none)."""
        o = self.settings.otlp
        if not o.on:
            return None
        receiver = Receiver(
            pipeline.traces.settled_elsewhere(),
            self.state,
            self.metrics,
            Limits(o.settle_s, o.keep_s, o.max_traces, o.max_bytes, o.root_grace_s),
            project_id=ProjectId(self.api, self.limiter, self.stop),
            lookup=self.resolver,
            notify=self.dispatcher.notify,
            clock=clock,
        )
        return EventPath(self.settings, receiver)

    def _pipeline(self, rules: MappingRules, summary: Summary) -> Pipeline:
        settings, metrics, judge = self.settings, self.metrics, self.judge
        alerts = self.alerts
        disabled = metrics.judge_decisions.labels(decision="disabled")

        def on_scored(record: RagRecord, signals: Signals, row: Row) -> None:
            alerts.scored(row)
            if judge is None:
                disabled.inc()

        src = settings.source
        local = self.state.watermark
        marks, publisher, should_stop = reader_wiring(
            settings, self.fleet, metrics, self.health, self.stop, local
        )
        return Pipeline(
            self.source,
            self.state,
            metrics,
            settings.signal_params(),
            rules,
            notify=self.dispatcher.notify,
            settle_s=src.settle_s,
            overlap_s=src.overlap_s,
            sweep_interval_s=src.sweep_interval_s,
            lookback_s=src.lookback_s,
            on_scored=on_scored,
            on_signals=lambda _record, signals: summary.add(signals),
            lookup=self.resolver,
            should_stop=should_stop,
            judge=judge,
            tracer=self.telemetry.tracer,
            marks=marks,
            publisher=publisher,
            max_trace_cpu_s=settings.limits.max_trace_cpu_s,
        )

    def _clock(self) -> Callable[[], datetime]:
        """Langfuse's clock when reading Langfuse (this host's otherwise), and the lag
        against it: before a first pass has moved a watermark, the lag counts from the
        first window's start (a daemon whose every pass fails is not "0 s behind")."""
        source = self.source
        if not isinstance(source, LangfuseSource) or self.settings.otlp.alone:
            return now_utc  # the receiver alone reads nothing from Langfuse, its clock neither
        server = source.clock
        first = now_utc() - timedelta(seconds=self.settings.source.lookback_s)
        self.metrics.set_watermark(
            (self.watermark or first).timestamp(), clock=lambda: server.now().timestamp()
        )
        return source.now

    def _server_check(self) -> Callable[[], object] | None:
        """Before the first pass reads Langfuse: it answers, is the state file's project, is
        new enough for batch score posts (v4.59+) when posting, and the judge's endpoint
        answers (observer.app.contact)."""
        if not isinstance(self.source, LangfuseSource):
            return None
        posting = isinstance(self.sink, LangfuseScoreSink)
        api = self.api or build_api(self.settings)
        return functools.partial(
            ready, self.settings, api, self.state, posting=posting, stop=self.stop
        )


def _pass_report(state: State, fleet: FleetParts | None) -> dict[str, Any]:
    """What `poll_completed` says: the outbox's size, or a reader's hand-over to workers."""
    if fleet is None:
        return {"extra": lambda: {"outbox": state.outbox_size()}}
    stream = fleet.stream
    return {
        "counts": ("observations", "published", "unchanged", "unsettled"),
        "extra": lambda: {"role": "reader", "unacknowledged": stream.unacked()},
    }


def once(close: Callable[[], object]) -> Callable[[], None]:
    """`close`, called at most once however often the result is."""
    done = threading.Event()

    def close_once() -> None:
        if not done.is_set():
            done.set()
            close()

    return close_once


def _alive_while_waiting(health: Health, stop: threading.Event) -> Callable[[], bool]:
    """The source asks whether to stop while it waits out a 429 or a backoff: the loop
    is alive (not wedged), so /healthz must not have the process restarted for it."""

    def should_stop() -> bool:
        health.beat()
        return stop.is_set()

    return should_stop
