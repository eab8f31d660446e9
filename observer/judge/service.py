"""The judge in the daemon: sampled, budgeted, asynchronous, bounded.

`reservation()` is asked by the pipeline for a trace being recorded, its sample
written in the trace's own transaction beside its deterministic scores, then
`queued()`: it decides (pure sampler), reserves budget and puts the trace on a
bounded queue without ever blocking: a full queue is counted
(`queue_full`) and the trace is simply not judged. The reservation (one trace
for the hourly cap, its expected tokens for the daily cap) and the sample
itself are written to the state file: queued samples cannot overshoot a cap,
and a sample still queued at shutdown is judged after the restart, with the
resolver's findings it was offered with (the funnel). A pool of worker threads
judges, writes the judge's scores to the same outbox and hands every result
to `on_judged` at once (alerting: the history row and the trace rules).

In a fleet (`shared`, observer.fleet.budget) the caps are the fleet's and are
checked by the script that claims the answer, once the decision is otherwise
final (sampled, the queue has room): the claim is confirmed after the trace's
transaction commits (`queued`), and released when the transaction fails or
defers (`release`), so an answer read again is judged then.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol

import orjson
import structlog
from opentelemetry import trace

from observer.background import Deadline
from observer.judge.client import JudgeClient
from observer.judge.identity import judge_of
from observer.judge.outcome import JudgeResult, judge_score_events
from observer.judge.sampler import SamplerParams, decide
from observer.judge.workers import Workers
from observer.model import RagRecord, Signals
from observer.records import RecordError, record_from_obj
from observer.resolver.core import ResolverFindings
from observer.signals import SignalParams, compute
from observer.state import OutboxFull, State
from observer.state.judge import reserve_in
from observer.telemetry.metrics import Metrics
from observer.times import iso

log = structlog.get_logger("observer.judge")
NO_SPANS = trace.NoOpTracer()  # without telemetry

# Called with every result, errors included (alerting reads them all).
JudgedHook = Callable[[RagRecord, JudgeResult], None]


@dataclass(frozen=True, slots=True)
class _Sample:
    record: RagRecord
    signals: Signals
    day: str  # the day its budget was reserved on
    findings: ResolverFindings | None
    basis: str | None = None  # the answer it was taken on (observer.model.answer_basis)


@dataclass(frozen=True, slots=True)
class BudgetClaim:
    """An answer taken for the judge in a fleet's budget, until the trace's commit."""

    trace_id: str
    basis: str
    hour: str
    day: str
    tokens: int
    owner: str  # this claim's own: only it is confirmed or released


@dataclass(frozen=True, slots=True)
class Reservation:
    """A sample decided for a trace, to be written in the trace's own transaction."""

    sample: _Sample
    write: Callable[[sqlite3.Connection], None]
    claim: BudgetClaim | None = None  # the fleet's, when there is one


class SharedBudget(Protocol):
    """The caps counted with other processes (a fleet's, in Redis: observer.fleet.budget)."""

    def claim(
        self,
        trace_id: str,
        basis: str,
        hour: str,
        day: str,
        tokens: int,
        *,
        owner: str,
        max_judged: int,
        max_tokens: int,
    ) -> Literal["taken", "duplicate", "over_budget"]:
        """Take this answer for the judge when the caps allow it, counted, in one step;
        "duplicate" when another one took it."""
        ...

    def confirm(self, trace_id: str, basis: str, tokens: int, owner: str) -> bool:
        """The trace's transaction committed: the claim holds."""
        ...

    def release(self, trace_id: str, basis: str, hour: str, day: str, owner: str) -> bool:
        """The trace's transaction failed: the claim and what it counted given back."""
        ...

    def spent(self, trace_id: str, basis: str | None, day: str, tokens: int) -> None:
        """The tokens judging it used, in place of what `claim` reserved."""
        ...


def buckets(now: datetime) -> tuple[str, str]:
    """(hour bucket, day bucket) of the budget caps, in UTC."""
    moment = now.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H"), moment.strftime("%Y-%m-%d")


def judge_used(metrics: Metrics, result: JudgeResult) -> None:
    """What judging one answer cost: a trace's or a canary case's, counted alike."""
    metrics.judge_calls.inc(result.calls)
    metrics.judge_tokens.labels(kind="prompt").inc(result.prompt_tokens)
    metrics.judge_tokens.labels(kind="completion").inc(result.completion_tokens)
    metrics.judge_cost.inc(result.cost_usd)


class JudgeCounts:
    """Traces judged (an abstention is judged), judge errors, judge scores queued: counted
    as the workers go (several at once), read by a run's report."""

    def __init__(self) -> None:
        self.judged = self.errors = self.scores = 0
        self._lock = threading.Lock()

    def add(self, *, judged: int = 0, errors: int = 0, scores: int = 0) -> None:
        with self._lock:
            self.judged += judged
            self.errors += errors
            self.scores += scores


class JudgeService:
    def __init__(
        self,
        client: JudgeClient,
        state: State,
        metrics: Metrics,
        params: SamplerParams,
        *,
        notify: Callable[[], None] = lambda: None,
        concurrency: int = 4,
        queue_size: int = 1000,
        on_judged: JudgedHook | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        signal_params: SignalParams | None = None,
        tracer: trace.Tracer = NO_SPANS,
        shared: SharedBudget | None = None,
    ) -> None:
        """`shared`: a fleet's caps and claims, counted once for every member."""
        self.tracer = tracer  # Telemetry.tracer, from the composition root
        self.client = client
        self.judge = judge_of(client.model)  # in every judge score's metadata
        self.state = state
        self.metrics = metrics
        self.counted = JudgeCounts()  # what this process judged: a run's report says it
        self.params = params
        self.notify = notify
        self.concurrency = concurrency
        self.on_judged = on_judged
        self.clock = clock
        self.signal_params = signal_params or SignalParams()
        self._workers: Workers[_Sample] = Workers(
            self._work,
            concurrency=concurrency,
            queue_size=queue_size,
            on_pending=metrics.judge_pending.set,
        )
        self._budget_lock = threading.Lock()
        self._held_lock = threading.Lock()
        self._held: set[tuple[str, str | None]] = set()  # (trace, basis) queued or judged now
        self._started = False
        self.shared = shared

    # -- intake -----------------------------------------------------------------

    def reservation(
        self,
        record: RagRecord,
        signals: Signals,
        findings: ResolverFindings | None,
        basis: str,
    ) -> Reservation | None:
        """Decide for a trace being recorded; a sample to write with it, or None.

        The pass writes the sample in the trace's transaction (`Reservation.write`) and
        calls `queued` after the commit, or `release` when the transaction failed: a
        kill in between leaves the sample in the state file, judged after the restart.
        In a fleet the answer is claimed here, last, when nothing but the fleet's caps
        can still say no."""
        waiting, queued_on = self.state.judge.basis(record.trace_id)
        if waiting and queued_on == basis:
            return None  # this very answer waits to be judged already
        now = self.clock()
        hour, day = buckets(now)
        flagged = findings is not None and findings.flagged
        expected = self.state.judge.tokens_per_trace()
        with self._budget_lock:
            judged, tokens, needed = 0, 0, 0
            if self.shared is None:  # else the claim checks the fleet's, as it counts
                judged, tokens = self.state.judge.budget(hour, day)
                needed = expected
            decision = decide(
                record.trace_id, signals, self.params, judged, tokens, needed, flagged
            )
        sampled = decision in ("sampled", "risk")
        if sampled and self._workers.full():
            self.metrics.judge_decisions.labels(decision="queue_full").inc()
            log.warning("judge_dropped", trace_id=record.trace_id, reason="queue_full")
            return None
        claim = None
        if sampled and self.shared is not None:
            claim = BudgetClaim(record.trace_id, basis, hour, day, expected, uuid.uuid4().hex)
            answer = self.shared.claim(
                record.trace_id,
                basis,
                hour,
                day,
                expected,
                owner=claim.owner,
                max_judged=self.params.max_judged_per_hour,
                max_tokens=self.params.max_tokens_per_day,
            )
            if answer == "duplicate":
                return None  # another member took this answer: counted there
            if answer == "over_budget":  # the fleet's caps, as one daemon's own
                decision, sampled, claim = "over_budget", False, None
        self.metrics.judge_decisions.labels(decision=decision).inc()
        if not sampled:
            return None
        payload = orjson.dumps(record)
        found = None if findings is None else orjson.dumps(findings)
        queued_at = iso(now)

        def write(db: sqlite3.Connection) -> None:
            reserve_in(db, record.trace_id, payload, hour, day, expected, queued_at, found, basis)

        return Reservation(_Sample(record, signals, day, findings, basis), write, claim)

    def release(self, reservation: Reservation) -> None:
        """The trace's transaction failed or was deferred: the fleet's claim is given back,
        so the answer is judged when the trace is read again. Never raises (it runs while
        the failure is handled); a claim not released expires unconfirmed."""
        claim = reservation.claim
        if claim is None or self.shared is None:
            return  # one daemon's reservation was in the transaction that failed
        try:
            released = self.shared.release(
                claim.trace_id, claim.basis, claim.hour, claim.day, claim.owner
            )
        except Exception as error:
            log.warning("judge_claim_not_released", trace_id=claim.trace_id, error=str(error))
            return
        log.info("judge_claim_released", trace_id=claim.trace_id, released=released)

    def queued(self, reservation: Reservation) -> None:
        """The trace's transaction committed: the fleet's claim holds, and the sample joins
        the in-memory queue."""
        claim = reservation.claim
        if claim is not None and self.shared is not None:
            try:
                if not self.shared.confirm(claim.trace_id, claim.basis, claim.tokens, claim.owner):
                    # The claim expired before a slow commit and another member took the
                    # answer since: that member judges it.
                    self.state.judge.abandon(claim.trace_id)
                    log.warning("judge_claim_lost", trace_id=claim.trace_id)
                    return
            except Exception as error:  # judged all the same: the claim expires unconfirmed
                log.warning("judge_claim_not_confirmed", trace_id=claim.trace_id, error=str(error))
        try:
            self._enqueue(reservation.sample)
        except queue.Full:  # it waits in the state file for the next start
            log.warning("judge_deferred", trace_id=reservation.sample.record.trace_id)

    def _enqueue(self, sample: _Sample) -> None:
        key = (sample.record.trace_id, sample.basis)
        with self._held_lock:
            if key in self._held:
                return  # queued already (a sample this process reserved, then restored)
            self._workers.put(sample)
            self._held.add(key)

    # -- workers ----------------------------------------------------------------

    def restore(self) -> int:
        """Queue the samples a previous process left in the state file; how many."""
        restored = 0
        for sample in self.state.judge.pending():
            try:
                record = record_from_obj(orjson.loads(sample.record))
                findings = (
                    None
                    if sample.findings is None
                    else ResolverFindings.from_obj(orjson.loads(sample.findings))
                )
            except (RecordError, ValueError) as error:  # orjson's JSONDecodeError included
                self.state.judge.abandon(sample.trace_id)
                self.metrics.judged.labels(result="abandoned").inc()
                log.warning("judge_sample_abandoned", trace_id=sample.trace_id, error=str(error))
                continue
            if self._workers.full():
                break  # the rest waits in the state file for a later start
            signals = compute(record, self.signal_params)
            self._enqueue(_Sample(record, signals, sample.day, findings, sample.basis))
            restored += 1
        if restored:
            log.info("judge_samples_restored", count=restored)
        return restored

    def start(self) -> None:
        """Start the workers; the first start also queues what a previous process left."""
        if not self._started:
            self._started = True
            self.restore()
        self._workers.start()

    def _work(self, item: _Sample) -> None:
        # An error leaves the sample in the state file for the next start (Workers logs it).
        try:
            waiting, basis = self.state.judge.basis(item.record.trace_id)
            if waiting and basis == item.basis:
                self.judge_now(item.record, item.signals, item.day, item.findings, basis)
            # else: re-scored with another answer since; that sample is queued too
        finally:
            with self._held_lock:
                self._held.discard((item.record.trace_id, item.basis))

    def judge_now(
        self,
        record: RagRecord,
        signals: Signals,
        reserved_day: str | None = None,
        findings: ResolverFindings | None = None,
        basis: str | None = None,
    ) -> JudgeResult:
        """Judge one trace (in the calling thread) and record everything about it."""
        with self.tracer.start_as_current_span(
            "observer.judge", attributes={"observer.trace_id": record.trace_id}
        ) as span:
            result = self.client.judge(record, signals, findings)
            if span.is_recording():
                span.set_attributes(
                    {
                        "observer.judge.result": "error"
                        if result.error
                        else ("abstained" if result.abstained else "judged"),
                        "observer.judge.calls": result.calls,
                        "gen_ai.usage.input_tokens": result.prompt_tokens,
                        "gen_ai.usage.output_tokens": result.completion_tokens,
                    }
                )
                if result.error:
                    span.set_status(trace.StatusCode.ERROR, result.error.split(":", 1)[0])
        hour, day = buckets(self.clock())
        if reserved_day is None:  # judged directly, never queued
            self.state.judge.spend(hour, day, judged=1, tokens=result.tokens)
        else:
            self.state.judge.settle(record.trace_id, day, result.tokens, basis)
        if self.shared is not None:
            try:
                self.shared.spent(record.trace_id, basis, day, result.tokens)
            except Exception as error:  # the fleet's count must not cost the trace its scores
                # The reservation stays counted in its place: the day's tokens over, never under.
                log.warning("judge_spend_not_shared", trace_id=record.trace_id, error=str(error))
        judge_used(self.metrics, result)
        self.metrics.judge_funnel_claims.inc(len(result.decided))
        if self.on_judged is not None:
            try:
                self.on_judged(record, result)
            except Exception:  # alerting must not cost the trace its judge scores
                log.exception("judge_hook_failed", trace_id=record.trace_id)
        if result.error:
            reason = result.error.split(":", 1)[0]
            self.metrics.judge_errors.labels(reason=reason).inc()
            self.metrics.judged.labels(result="error").inc()
            self.counted.add(errors=1)
            log.warning(
                "judge_failed",
                trace_id=record.trace_id,
                reason=reason,
                calls=result.calls,
                error=result.error[:300],
            )
            return result
        scores = judge_score_events(record, result, self.judge)
        try:
            self.state.enqueue(scores, basis)
            for score in scores:  # counted as the pass counts its own
                self.metrics.scores_enqueued.labels(score.name).inc()
            self.counted.add(scores=len(scores))
        except OutboxFull:
            self.metrics.scores_dropped.labels(reason="outbox_full").inc(len(scores))
            log.error(
                "score_dropped", reason="outbox_full", trace_id=record.trace_id, count=len(scores)
            )
        self.notify()
        self.metrics.judged.labels(result="abstained" if result.abstained else "judged").inc()
        self.counted.add(judged=1)
        log.info(
            "trace_judged",
            trace_id=record.trace_id,
            claims=len(result.claims),
            faithfulness=result.faithfulness,
            citation_accuracy=result.citation_accuracy,
            critical_unsupported=result.critical_unsupported,
            calls=result.calls,
            tokens=result.tokens,
        )
        self._observe(record, result)
        return result

    def _observe(self, record: RagRecord, result: JudgeResult) -> None:
        """A judged answer's figures into the quality metrics."""
        labels = self.metrics.quality_labels(record.environment, record.query_type)
        for ratio, value in (
            (self.metrics.faithfulness, result.faithfulness),
            (self.metrics.citation_accuracy, result.citation_accuracy),
        ):
            if value is not None:
                ratio.labels(*labels).observe(value)
        if result.critical_unsupported:
            self.metrics.critical_unsupported.labels(*labels).inc()
            log.warning(
                "critical_unsupported_detected",
                trace_id=record.trace_id,
                observation_id=record.observation_id,
                claims=len(result.critical_claims()),
            )

    # -- lifecycle --------------------------------------------------------------

    def drain(self, deadline: Deadline) -> bool:
        """Wait until the queue is empty and no worker is busy; True when done in time."""
        return self._workers.drain(deadline)

    def pending(self) -> int:
        return self._workers.pending()

    @property
    def ended(self) -> bool:
        """After a shutdown: no judging call still runs (the state file may be closed)."""
        return self._workers.ended

    def shutdown(self, deadline: Deadline) -> bool:
        """Finish in-flight judging by `deadline`; True when nothing was left (and no
        judging call still runs, so the state file may be closed).

        Samples still queued stay in the state file with their reservation and
        are judged after the restart; a judging call still running at the
        deadline is abandoned (its sample stays too).
        """
        done = self.drain(deadline)
        left = self._workers.shutdown(deadline)
        with self._held_lock:
            for item in left:
                self._held.discard((item.record.trace_id, item.basis))
        if left:
            log.info("judge_samples_kept", count=len(left), reason="judged after the restart")
        self._started = False
        return done and not left
