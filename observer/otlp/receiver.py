"""The event path: spans received over OTLP -> traces assembled -> scored as a poll would.

`Receiver.accept` runs on the HTTP server's threads: an export's spans are converted by
Langfuse's rules (observer.otlp.spans) and added to the assembly (observer.otlp.assembly),
or refused whole with a Retry-After: 429 while the assembly is full, 503 while the
outbox is full or the daemon is stopping (nothing taken is ever dropped in silence).
`Receiver.step` runs on its `observer.background.Worker`: it scores the traces that are
due (at most BATCH) with the pipeline's own `TraceRecorder` (mapping, signals,
fingerprint, the resolver and the judge; the step's scores, fingerprints and history rows
into the state file in one transaction, each trace all or nothing), so a trace received here gets
the same record, score ids and timestamps as the same trace polled from Langfuse (§4: a
score's id comes from the trace id and its name, its timestamp from the trace's earliest
root). The fingerprints in the state file make either path find the other's work
unchanged: scored here first, the poller's backstop pass pushes nothing.

What cannot be scored from here is counted and left to the poller's backstop:
- a trace the state file knows (scored before this process, or by the poller) whose
  roots here start after the one it had: a part of it (`partial`);
- a late span of a trace no longer held in memory (`late_forgotten`);
- a trace whose root never arrived (`no_root`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import structlog

from observer.background import Deadline, Worker
from observer.otlp.assembly import Assembly, Dropped, Handed, Limits, SpanIn
from observer.otlp.metrics import OtlpMetrics
from observer.otlp.server import ExportAnswer, Result
from observer.otlp.spans import origin, span_observation
from observer.otlp.values import attributes_of
from observer.otlp.wire import Decoded
from observer.pipeline import CLOCK_SKEW, Lookup
from observer.pipeline.traces import Prepared, TraceRecorder, look_up
from observer.state import State, StateError
from observer.telemetry.metrics import Metrics
from observer.times import parse_time

log = structlog.get_logger("observer.otlp")

# Traces scored per step at most: one query for their fingerprints, one commit. Past a few
# dozen a bigger step saves little (the commit is shared already) and its first traces'
# scores wait for its last ones.
BATCH = 50
STOPPING_RETRY_S = 5.0
OUTBOX_RETRY_S = 10.0
PROJECT_RETRY_S = 10.0
EXPIRE_EVERY_S = 1.0
# How long after its first span started a trace may reach observer with none of it seen:
# the first span's own time and the SDK's export delay. The receiver's mark trails the
# clock by this much (what is already held holds it by itself).
LATE_S = 30.0


def observations_of(decoded: Decoded, project_id: str | None) -> list[SpanIn]:
    """Every span of an export, converted, with its trace, size and whether it is a root."""
    out: list[SpanIn] = []
    for resource_spans in decoded.body.get("resourceSpans") or []:
        resource = attributes_of((resource_spans.get("resource") or {}).get("attributes"))
        for scope_spans in resource_spans.get("scopeSpans") or []:
            where = origin(resource, scope_spans.get("scope") or {})
            for span in scope_spans.get("spans") or []:
                observation = span_observation(span, where, project_id)
                trace_id, span_id = observation["traceId"], observation["id"]
                out.append(
                    SpanIn(
                        trace_id,
                        span_id,
                        observation,
                        decoded.sizes.get((trace_id, span_id), 0),
                        bool(observation["isRootObservation"]),
                        observation["parentObservationId"],
                    )
                )
    return out


class Receiver:
    def __init__(
        self,
        recorder: TraceRecorder,
        state: State,
        metrics: Metrics,
        limits: Limits,
        *,
        project_id: Callable[[], str | None] = lambda: None,  # may raise: tried again
        lookup: Lookup | None = None,
        notify: Callable[[], None] = lambda: None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        interval_s: float = 0.1,
    ) -> None:
        self.recorder = recorder
        self.state = state
        self.metrics = metrics
        self.otlp = metrics.part(OtlpMetrics)
        self.assembly = Assembly(limits)
        self.project_id = project_id
        self.lookup = lookup
        self.notify = notify
        self.clock = clock
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self.worker = Worker(
            "observer-otlp-scoring",
            self.step,
            interval_s=interval_s,
            crash_event="otlp_scoring_failed",
        )
        self.outbox_full = False  # set by a step whose trace found no room in the outbox
        self._paused_until = 0.0  # the project could not be read: no step scores before
        self._expired_at = 0.0
        self._marked: datetime | None = None

    # -- the HTTP side --------------------------------------------------------------------

    def accept(self, decoded: Decoded) -> ExportAnswer:
        """Take an export's spans, or say when to come back (never blocks on scoring)."""
        if self.worker.stopping.is_set():
            return ExportAnswer("unavailable", STOPPING_RETRY_S, "observer is stopping")
        if self.outbox_full and self.state.outbox_size() >= self.state.max_outbox:
            return ExportAnswer(
                "unavailable",
                OUTBOX_RETRY_S,
                "observer's outbox is full (Langfuse is not taking scores): try again later",
            )
        self.outbox_full = False
        spans = observations_of(decoded, None)  # the project is set when scored
        with self._lock:
            admission = self.assembly.add(spans, self.monotonic())
            self._gauges()
        for reason, count in admission.early.items():  # counted again when handed out
            log.info("otlp_settled_early", reason=reason, traces=count)
        if admission.early:
            self.worker.wake()
        if not admission.taken:
            log.warning(
                "otlp_throttled",
                spans=len(spans),
                held_traces=len(self.assembly),
                held_bytes=self.assembly.size,
                retry_after_s=admission.retry_after_s,
            )
            return ExportAnswer(
                "throttled",
                admission.retry_after_s,
                "observer's assembly is full: the oldest traces are being scored early",
            )
        self.otlp.spans.inc(admission.new_spans)
        return ExportAnswer("accepted")

    def count(self, result: Result) -> None:
        self.otlp.requests.labels(result=result).inc()

    # -- the scoring side -----------------------------------------------------------------

    def start(self) -> None:
        self.worker.start()

    def stop(self, deadline: Deadline) -> bool:
        """No more spans taken; the worker joined by `deadline`. What is still in assembly
        is lost to this process (the poller's backstop scores it)."""
        ended = self.worker.stop(deadline)
        with self._lock:
            waiting = self.assembly.waiting
        if waiting:
            log.info("otlp_left_in_assembly", traces=waiting, action="the poller's backstop")
        return ended

    def step(self) -> bool:
        """Score the traces that are due (at most BATCH); whether more are due now."""
        now = self.monotonic()
        if now < self._paused_until:
            return False
        with self._lock:
            dropped: list[Dropped] = []
            earliest: str | None = None
            marking = now - self._expired_at >= EXPIRE_EVERY_S  # a walk over all it holds
            if marking:
                dropped, self._expired_at = self.assembly.expire(now), now
                earliest = self.assembly.earliest_waiting()
            handed = self.assembly.due(now, BATCH)
            self._gauges()
        if dropped:
            self._dropped(dropped)
        if marking:
            self._mark(earliest)
        if not handed:
            return False
        try:
            project = self.project_id()
        except Exception as error:  # Langfuse does not answer yet: the traces wait
            self._put_back(handed)
            self._paused_until = now + PROJECT_RETRY_S
            log.warning("otlp_project_unread", error=str(error), retry_in_s=PROJECT_RETRY_S)
            return False
        try:
            self._score(handed, project)
        except StateError:
            self._put_back(handed)
            raise
        return len(handed) >= BATCH

    def _mark(self, earliest: str | None) -> None:
        """The receiver's mark moved on (`State.received_through`, what the alert rules on
        traces evaluate up to): to the earliest span of the traces still waiting, never
        past `LATE_S` ago, never back. Each step scores what it was handed before the next
        one marks: what lies below the mark is in the history."""
        mark = self.clock() - timedelta(seconds=LATE_S)
        first = parse_time(earliest) if earliest is not None else None
        if first is not None and first < mark:
            mark = first
        if self._marked is None:
            self._marked = self.state.received_through()  # a restart does not move it back
        if self._marked is None or mark > self._marked:
            self.state.set_received_through(mark)
            self._marked = mark

    def _put_back(self, handed: list[Handed]) -> None:
        with self._lock:
            for trace in handed:
                self.assembly.put_back(trace)

    def _dropped(self, dropped: list[Dropped]) -> None:
        known = self.state.fingerprints([d.trace_id for d in dropped])
        for item in dropped:
            reason = "late_forgotten" if item.trace_id in known else item.reason
            self.otlp.dropped.labels(reason=reason).inc()
            log.info("otlp_trace_dropped", trace_id=item.trace_id, reason=reason, spans=item.spans)

    def _score(self, handed: list[Handed], project_id: str | None) -> None:
        for trace in handed:
            for observation in trace.observations:
                observation["projectId"] = project_id
        ids = [h.trace_id for h in handed]
        known = self.state.fingerprints(ids)
        marks = self.state.trace_marks(ids)
        now = self.clock()
        ready: list[tuple[Handed, datetime, datetime | None, Prepared]] = []
        for trace in handed:
            try:
                item = self._prepare(trace, known.get(trace.trace_id), marks, now)
            except Exception:  # a strange trace fails alone
                log.exception("otlp_trace_failed", trace_id=trace.trace_id, step="prepare")
                continue
            if item is not None:
                ready.append(item)
        self._look_up([p for *_, p in ready])
        outcomes = self.recorder.record_many(
            [(t.trace_id, p, root, known.get(t.trace_id), latest) for t, root, latest, p in ready],
            now,
        )
        for (trace, *_), outcome in zip(ready, outcomes, strict=True):
            if isinstance(outcome, Exception):
                log.error(
                    "otlp_trace_failed",
                    trace_id=trace.trace_id,
                    step="record",
                    exc_info=outcome,
                )
                continue
            if outcome.kind == "deferred":
                self.outbox_full = True
                with self._lock:
                    self.assembly.put_back(trace)
                continue
            self.otlp.handed.labels(reason=trace.reason).inc()
        self.notify()

    def _prepare(
        self,
        trace: Handed,
        known: str | None,
        marks: dict[str, tuple[datetime, datetime | None]],
        now: datetime,
    ) -> tuple[Handed, datetime, datetime | None, Prepared] | None:
        observations = trace.observations
        roots = [
            moment
            for o in observations
            if o.get("isRootObservation") and (moment := parse_time(o.get("startTime")))
        ]
        root = min(roots)
        mark = marks.get(trace.trace_id)
        if mark is not None and not trace.again and mark[0] < root - CLOCK_SKEW:
            # Known with a root this process does not hold: only a part of it is here.
            self.otlp.dropped.labels(reason="partial").inc()
            log.info("otlp_trace_dropped", trace_id=trace.trace_id, reason="partial")
            return None
        if mark is not None:
            root = min(root, mark[0])
        # Not after now (Langfuse's): a client clock ahead stamps the future (docs/daemon.md).
        root = min(root, now)
        latest = max(
            (m for o in observations if (m := parse_time(o.get("startTime"))) and m <= now),
            default=None,
        )
        prepared = self.recorder.prepare(trace.trace_id, observations, known, now, root)
        return trace, root, latest, prepared

    def _look_up(self, prepared: list[Prepared]) -> None:
        try:
            look_up(self.lookup, prepared)
        except Exception:  # the resolver never blocks scoring
            log.exception("otlp_lookup_failed")

    def _gauges(self) -> None:
        self.otlp.held_traces.set(len(self.assembly))
        self.otlp.held_bytes.set(self.assembly.size)
