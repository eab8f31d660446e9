"""One complete trace through the daemon: prepared, then recorded (docs/daemon.md).

`TraceRecorder.prepare` maps, computes and fingerprints a trace without any
I/O, so a page's new and changed traces can go to the citation resolver
together before any is recorded. `record` then writes what changed: a trace
still changing waits (and holds the watermark at its root), a skip is
recorded once with its reason (and, when it looked like an answer, a
signal-history row saying so, for `skip_rate_high`), an unchanged trace
pushes nothing, and a new or changed one gets its scores (with its last
activity, for `observer_trace_to_score_seconds`), fingerprint and
signal-history row in one transaction. It returns the `Outcome` the pass
counts.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

import orjson
import structlog

from observer.alerts.history import resolver_values, signal_values, skip_row, trace_row
from observer.mapping.convention import find_root, read_trace
from observer.mapping.rules import MappingRules, Provenance, Skip
from observer.model import RagRecord, Signals, answer_basis
from observer.resolver.core import ResolverFindings
from observer.resolver.scores import resolver_score_events
from observer.scores import score_events
from observer.signals import SignalParams, compute
from observer.state import OutboxFull, State
from observer.state.rows import Row
from observer.telemetry.metrics import Metrics
from observer.times import iso, parse_time

if TYPE_CHECKING:
    from observer.judge.service import Reservation

log = structlog.get_logger("observer.pipeline")

# on_scored: a trace's scores are safely in the outbox (new or changed traces), with the
# history row written with them (what the resolver found of its cited chunks included: the
# row the trace rules see); on_signals: every answer trace read, changed or not (summaries).
ScoredHook = Callable[[RagRecord, Signals, Row], None]
SignalsHook = Callable[[RagRecord, Signals], None]


class JudgeGate(Protocol):
    """The judge as a pass sees it: a sample decided, written with the trace, queued after."""

    def reservation(
        self,
        record: RagRecord,
        signals: Signals,
        findings: ResolverFindings | None,
        basis: str,
    ) -> Reservation | None: ...

    def queued(self, reservation: Reservation) -> None: ...

    def release(self, reservation: Reservation) -> None: ...


OutcomeKind = Literal["unsettled", "skipped", "unchanged", "deferred", "scored", "rescored"]


def params_digest(params: SignalParams) -> str:
    """Changing a threshold changes every fingerprint, so seen traces are re-scored."""
    described = orjson.dumps(
        {
            "min_chars": params.min_chars,
            "pleasantry_prefixes": list(params.pleasantry_prefixes),
            "abbreviations": sorted(params.abbreviations),
            "crag": params.crag,
            "band": [params.band_high, params.band_medium],
            "refusal_phrases": list(params.refusal_phrases),
            "max_refs_per_sentence": params.max_refs_per_sentence,
        }
    )
    return hashlib.sha256(described).hexdigest()[:16]


def last_activity(observations: list[dict[str, Any]], now: datetime) -> datetime | None:
    """The latest time the trace shows, leaving out times after `now` (Langfuse's).

    A time later than Langfuse's now comes from a wrong client clock (an `endTime`
    in 2099): taken at face value it would keep the trace unsettled, and the
    watermark at its root, for ever. `updatedAt` is Langfuse's own clock.
    """
    latest: datetime | None = None
    for observation in observations:
        for key in ("updatedAt", "endTime", "startTime"):
            moment = parse_time(observation.get(key))
            if moment is not None and moment <= now and (latest is None or moment > latest):
                latest = moment
    return latest


@dataclass
class Prepared:
    """A trace mapped and fingerprinted, before anything is recorded."""

    unsettled: bool = False
    skip: Skip | None = None
    record: RagRecord | None = None
    signals: Signals | None = None
    fingerprint: str | None = None  # None: unchanged since the last pass
    findings: ResolverFindings | None = None
    last_activity: datetime | None = None  # the latest time the trace shows (not after now)
    environment: str | None = None  # a skipped trace's, from its root
    project_id: str | None = None  # a skipped trace's, from its root
    # Where its parts came from and the content checks' verdicts (an answer's).
    provenance: Provenance | None = None

    @property
    def changed(self) -> bool:
        """New or changed since the last pass: worth a resolver lookup."""
        return self.fingerprint is not None and self.signals is not None


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: OutcomeKind
    scores: int = 0
    reason: str = ""  # a skip's reason

    @property
    def holds(self) -> bool:
        """The trace is not done: the watermark must not pass its root."""
        return self.kind in ("unsettled", "deferred")

    def __str__(self) -> str:
        return f"{self.kind}:{self.reason}" if self.reason else self.kind


class TraceRecorder:
    def __init__(
        self,
        state: State,
        metrics: Metrics,
        params: SignalParams,
        rules: MappingRules,
        *,
        settle_s: float = 20.0,
        on_scored: ScoredHook | None = None,
        on_signals: SignalsHook | None = None,
        judge: JudgeGate | None = None,
    ) -> None:
        self.state = state
        self.judge = judge
        self.metrics = metrics
        self.params = params
        self.rules = rules
        self.settle = timedelta(seconds=settle_s)
        self.on_scored = on_scored
        self.on_signals = on_signals
        self._params_digest = params_digest(params)

    def settled_elsewhere(self) -> TraceRecorder:
        """This recorder for traces whose settling another part decided (the OTLP
        receiver's assembly, docs/daemon.md#the-event-path): same hooks, no settle delay."""
        twin = copy.copy(self)
        twin.settle = timedelta(0)
        return twin

    def prepare(
        self,
        trace_id: str,
        observations: list[dict[str, Any]],
        known: str | None,
        now: datetime,
        root_start: datetime | None = None,
        *,
        too_large: int | None = None,
    ) -> Prepared:
        """Map, compute and fingerprint one complete trace: no I/O, no counting.

        `root_start`, the trace's earliest root, is the record's (and its scores')
        timestamp whatever the mapping found: fixed for the trace's life
        (docs/scores.md#ids-and-timestamps).
        `too_large`: the trace had this many observations, more than the limit, and
        they were counted while reading, not kept.
        """
        if too_large is not None:
            return Prepared(
                skip=Skip(
                    "too_large",
                    f"{too_large}+ observations (limits.max_observations_per_trace "
                    f"{self.rules.max_observations})",
                )
            )
        last = last_activity(observations, now)
        if last is not None and now - last < self.settle:
            return Prepared(unsettled=True)
        read = read_trace(trace_id, observations, self.rules)
        mapped, provenance = read.result, read.provenance
        if isinstance(mapped, Skip):
            environment, project_id = _root_labels(observations)
            return Prepared(
                skip=mapped,
                last_activity=last,
                environment=environment,
                project_id=project_id,
                provenance=provenance,
            )
        if root_start is not None:
            mapped = replace(mapped, timestamp=iso(root_start))
        signals = compute(mapped, self.params)
        fingerprint = hashlib.sha256(
            orjson.dumps(mapped) + self._params_digest.encode()
        ).hexdigest()
        if fingerprint == known:
            return Prepared(record=mapped, signals=signals, last_activity=last)
        return Prepared(
            record=mapped,
            signals=signals,
            fingerprint=fingerprint,
            last_activity=last,
            provenance=provenance,
        )

    def record(
        self,
        trace_id: str,
        prepared: Prepared,
        root_start: datetime,
        known: str | None,
        now: datetime,
        latest: datetime | None = None,
    ) -> Outcome:
        """Record one prepared trace; what became of it.

        `latest`: the latest start time among its observations (not after now), kept
        with the trace so a later observation below its root is known for a change."""
        if prepared.unsettled:
            self.metrics.traces.labels(outcome="unsettled").inc()
            return Outcome("unsettled")
        if prepared.skip is not None:
            return self._skip(trace_id, prepared, root_start, known, now, latest)
        mapped, signals = prepared.record, prepared.signals
        assert mapped is not None and signals is not None
        if self.on_signals is not None:
            self.on_signals(mapped, signals)
        if prepared.fingerprint is None:
            if latest is not None:
                self.state.note_latest(trace_id, latest)
            self.metrics.traces.labels(outcome="unchanged").inc()
            return Outcome("unchanged")
        scores = score_events(mapped, signals, self.params)
        values = signal_values(signals)
        if prepared.findings is not None:
            scores += resolver_score_events(mapped, prepared.findings)
            values.update(resolver_values(prepared.findings))
        history = trace_row(mapped, values, now, signals.concentration.top_doc)
        basis = answer_basis(mapped)
        reservation = self._reservation(mapped, signals, prepared.findings, basis)
        committed = False
        try:
            self.state.record_trace(
                trace_id,
                prepared.fingerprint,
                root_start,
                scores,
                now,
                history,
                basis=basis,
                during=None if reservation is None else reservation.write,
                latest=latest,
                activity=prepared.last_activity,
            )
            committed = True
        except OutboxFull as error:
            self.metrics.traces.labels(outcome="deferred").inc()
            log.warning("trace_deferred", trace_id=trace_id, reason="outbox_full", error=str(error))
            return Outcome("deferred")
        finally:
            if not committed and reservation is not None and self.judge is not None:
                # A fleet's claim taken for a sample that was never written: given back,
                # or the trace read again would find it and never be judged.
                self.judge.release(reservation)
        kind: OutcomeKind = "scored" if known is None or known.startswith("skip:") else "rescored"
        self.metrics.traces.labels(outcome=kind).inc()
        for score in scores:
            self.metrics.scores_enqueued.labels(name=score.name).inc()
        if kind == "scored":  # a changed trace was counted when first scored
            self.metrics.observe_answer(mapped, signals)
            self._count_provenance(prepared.provenance)
        cites = signals.citations
        log.info(
            "trace_scored" if kind == "scored" else "trace_rescored",
            trace_id=trace_id,
            observation_id=mapped.observation_id,
            environment=mapped.environment,
            coverage=None if cites.coverage is None else round(cites.coverage, 3),
            crag_grade=signals.crag_grade,
            band=signals.confidence_band,
            ungrounded=signals.ungrounded,
            ghost_refs=len(cites.invalid_refs),
            scores=len(scores),
        )
        if reservation is not None and self.judge is not None:
            self.judge.queued(reservation)
        if self.on_scored is not None:
            self.on_scored(mapped, signals, history)
        return Outcome(kind, scores=len(scores))

    def _reservation(
        self,
        record: RagRecord,
        signals: Signals,
        findings: ResolverFindings | None,
        basis: str,
    ) -> Reservation | None:
        """The judge's sample of a trace about to be recorded, if it takes one (a fleet's
        judge claims the answer here: the last step before the trace's transaction)."""
        if self.judge is None or basis in self.state.live_scores(record.trace_id).values():
            return None  # no judge, or judged on this very answer already
        return self.judge.reservation(record, signals, findings, basis)

    def _count_provenance(self, provenance: Provenance | None) -> None:
        """An answer trace's verdicts, counted once: when first scored or first skipped."""
        if provenance is not None:
            self.metrics.count_provenance(
                provenance.trace_name,
                provenance.sources_check,
                provenance.answer_check,
                provenance.scores,
            )

    def _skip(
        self,
        trace_id: str,
        prepared: Prepared,
        root_start: datetime,
        known: str | None,
        now: datetime,
        latest: datetime | None = None,
    ) -> Outcome:
        """A skip, recorded once: counted, logged, its scores (if it had any) deleted, and
        its history row (an answer-looking trace's) replacing the one it had."""
        skip = prepared.skip
        assert skip is not None
        fingerprint = f"skip:{skip.reason}:{hashlib.sha256(skip.detail.encode()).hexdigest()[:16]}"
        if fingerprint != known:  # else counted and logged when first seen
            self.metrics.traces.labels(outcome="skipped").inc()
            self.metrics.skips.labels(reason=skip.reason).inc()
            self._count_provenance(prepared.provenance)
            log.info("trace_skipped", trace_id=trace_id, reason=skip.reason, detail=skip.detail)
            row = skip_row(
                trace_id, skip.reason, root_start, prepared.environment, prepared.project_id
            )
            self.state.record_trace(trace_id, fingerprint, root_start, (), now, row, latest=latest)
        elif latest is not None:
            self.state.note_latest(trace_id, latest)
        return Outcome("skipped", reason=skip.reason)


def _root_labels(observations: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(environment, project id) of a trace's root, as the mapping reads them; a trace
    without a root has its first observation's."""
    root = find_root(observations) or (observations[0] if observations else {})
    environment, project_id = root.get("environment"), root.get("projectId")
    return (
        environment if isinstance(environment, str) and environment else None,
        project_id if isinstance(project_id, str) and project_id else None,
    )
