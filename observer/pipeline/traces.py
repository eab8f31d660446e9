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
counts. `record_many` records many with one commit (the event path's settling
step), each trace still all or nothing and nothing counted before its commit.

A trace's mapping and signals have a work budget (`limits.max_trace_cpu_s` of
this thread's CPU): past it, the trace is skipped as `too_costly`. The skip's
fingerprint names the trace's observations (ids and update times) and the
budget, so the same trace under the same budget is never worked on again;
one that changes, or a raised budget, is tried anew.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, replace
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
from observer.state import OutboxFull, State, TraceWrite
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


# The skip of a trace past its work budget (limits.max_trace_cpu_s).
TOO_COSTLY = "too_costly"


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
    work_s: float | None = None  # this thread's CPU for its mapping and signals

    @property
    def changed(self) -> bool:
        """New or changed since the last pass: worth a resolver lookup."""
        return self.fingerprint is not None and self.signals is not None


# The citation resolver for a page's new and changed traces: findings per trace, in order
# (None where the store could not say).
Lookup = Callable[[list[tuple[RagRecord, Signals]]], list["ResolverFindings | None"]]


def look_up(lookup: Lookup | None, prepared: Sequence[Prepared]) -> None:
    """The new and changed traces' cited chunks in one lookup, kept on each (what the
    lookup raises goes up: each caller has its own policy for it)."""
    changed = [p for p in prepared if p.changed and p.record is not None]
    pairs = [(p.record, p.signals) for p in changed if p.record and p.signals]
    if lookup is None or not pairs:
        return
    for item, findings in zip(changed, lookup(pairs), strict=True):
        item.findings = findings


# One prepared trace to record: (trace id, prepared, root start, known fingerprint, latest).
Recording = tuple[str, Prepared, datetime, str | None, datetime | None]


@dataclass(frozen=True, slots=True)
class _Composed:
    """A trace's write, composed: what goes in the transaction, what follows its commit."""

    write: TraceWrite
    done: Callable[[], Outcome]
    reservation: Reservation | None = None


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


@dataclass(eq=False, repr=False)
class TraceRecorder:
    state: State
    metrics: Metrics
    params: SignalParams
    rules: MappingRules
    _: KW_ONLY
    settle_s: float = 20.0
    on_scored: ScoredHook | None = None
    on_signals: SignalsHook | None = None
    judge: JudgeGate | None = None
    max_cpu_s: float = 10.0

    def __post_init__(self) -> None:
        self.settle = timedelta(seconds=self.settle_s)
        self._params_digest = params_digest(self.params)

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
        # The skip's detail digests every observation: made only when it can be used.
        if known is not None and known.startswith(f"skip:{TOO_COSTLY}:"):
            costly = self._too_costly(observations)
            if known == skip_fingerprint(costly):
                return self._skipped(costly, observations, last)  # not worked on again
        began = time.thread_time()
        read = read_trace(trace_id, observations, self.rules)
        mapped, provenance = read.result, read.provenance
        if isinstance(mapped, Skip):
            return replace(
                self._skipped(mapped, observations, last, provenance),
                work_s=time.thread_time() - began,
            )
        if root_start is not None:
            mapped = replace(mapped, timestamp=iso(root_start))
        mapped = _bounded(mapped)
        work_s = time.thread_time() - began
        if work_s <= self.max_cpu_s:  # the mapping within the budget: the signals too
            signals = compute(mapped, self.params)
            work_s = time.thread_time() - began
        if work_s > self.max_cpu_s:
            skipped = self._skipped(self._too_costly(observations), observations, last)
            return replace(skipped, work_s=work_s)
        fingerprint = hashlib.sha256(
            orjson.dumps(mapped) + self._params_digest.encode()
        ).hexdigest()
        if fingerprint == known:
            return Prepared(record=mapped, signals=signals, last_activity=last, work_s=work_s)
        return Prepared(
            record=mapped,
            signals=signals,
            fingerprint=fingerprint,
            last_activity=last,
            provenance=provenance,
            work_s=work_s,
        )

    def _observe_work(self, prepared: Prepared) -> None:
        if prepared.work_s is not None:  # None: not worked on (unsettled, known too costly)
            self.metrics.trace_work.observe(prepared.work_s)

    def _too_costly(self, observations: list[dict[str, Any]]) -> Skip:
        """The skip a trace gets past its work budget: its detail names these observations
        (ids and update times) and the budget, so its fingerprint says both."""
        keys = sorted(
            f"{o.get('id')}|{o.get('updatedAt') or o.get('endTime') or o.get('startTime')}"
            for o in observations
        )
        digest = hashlib.sha256("\n".join(keys).encode("utf-8", "replace")).hexdigest()[:16]
        return Skip(
            TOO_COSTLY,
            f"its mapping and signals took more than limits.max_trace_cpu_s "
            f"({self.max_cpu_s:g} s of CPU); observations {digest}",
        )

    @staticmethod
    def _skipped(
        skip: Skip,
        observations: list[dict[str, Any]],
        last: datetime | None,
        provenance: Provenance | None = None,
    ) -> Prepared:
        environment, project_id = _root_labels(observations)
        return Prepared(
            skip=skip,
            last_activity=last,
            environment=environment,
            project_id=project_id,
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
        """Record one prepared trace, in a transaction of its own; what became of it.

        `latest`: the latest start time among its observations (not after now), kept
        with the trace so a later observation below its root is known for a change."""
        (outcome,) = self.record_many([(trace_id, prepared, root_start, known, latest)], now)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def record_many(self, items: Sequence[Recording], now: datetime) -> list[Outcome | Exception]:
        """Record prepared traces as `record` records one, their writes in one transaction
        (the event path's settling step: one commit, not one a trace). A trace the judge
        samples is written first, alone, so each sample is decided on the budget the
        samples before it took. Each trace is all or nothing; what follows a commit (the
        counts, the log line, the judge's queue, the hooks) follows it, never before.

        What became of each, or the exception that stopped it alone (the others are
        recorded). A StateError writes none of the batch, gives back every judge sample
        taken for it, and is raised."""
        outcomes: list[Outcome | Exception] = []
        batch: list[tuple[int, _Composed]] = []
        for trace_id, prepared, root_start, known, latest in items:
            try:
                composed = self._compose(trace_id, prepared, root_start, known, now, latest)
            except Exception as error:  # a strange trace fails alone
                outcomes.append(error)
                continue
            if isinstance(composed, Outcome):
                outcomes.append(composed)
            elif composed.reservation is not None:
                outcomes.append(self._write([composed])[0])
            else:
                batch.append((len(outcomes), composed))
                outcomes.append(Outcome("deferred"))  # the batch's, set below
        for (index, _), outcome in zip(batch, self._write([c for _, c in batch]), strict=True):
            outcomes[index] = outcome
        return outcomes

    def _compose(
        self,
        trace_id: str,
        prepared: Prepared,
        root_start: datetime,
        known: str | None,
        now: datetime,
        latest: datetime | None,
    ) -> Outcome | _Composed:
        """What a trace writes and what follows the commit; or its outcome, when it writes
        nothing with the others (unsettled, unchanged, a skip recorded before)."""
        if prepared.unsettled:
            self.metrics.traces.labels("unsettled").inc()
            return Outcome("unsettled")
        self._observe_work(prepared)
        if prepared.skip is not None:
            return self._skip(trace_id, prepared, root_start, known, now, latest)
        mapped, signals = prepared.record, prepared.signals
        assert mapped is not None and signals is not None
        if self.on_signals is not None:
            self.on_signals(mapped, signals)
        if prepared.fingerprint is None:
            if latest is not None:
                self.state.note_latest(trace_id, latest)
            self.metrics.traces.labels("unchanged").inc()
            return Outcome("unchanged")
        scores = score_events(mapped, signals, self.params)
        values = signal_values(signals)
        if prepared.findings is not None:
            scores += resolver_score_events(mapped, prepared.findings)
            values.update(resolver_values(prepared.findings))
        history = trace_row(mapped, values, now, signals.concentration.top_doc)
        basis = answer_basis(mapped)
        reservation = self._reservation(mapped, signals, prepared.findings, basis)
        write = TraceWrite(
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
        return _Composed(
            write,
            functools.partial(self._scored, write, known, mapped, signals, prepared, reservation),
            reservation,
        )

    def _write(self, composed: list[_Composed]) -> list[Outcome | Exception]:
        """The traces' writes in one transaction, then what follows each commit."""
        if not composed:
            return []
        try:
            results = self.state.record_traces([c.write for c in composed])
        except BaseException:
            for item in composed:
                self._release(item.reservation)
            raise
        outcomes: list[Outcome | Exception] = []
        for item, result in zip(composed, results, strict=True):
            if isinstance(result, Exception):
                self._release(item.reservation)
                if not isinstance(result, OutboxFull):
                    outcomes.append(result)
                    continue
                trace_id = item.write.trace_id
                self.metrics.traces.labels("deferred").inc()
                log.warning(
                    "trace_deferred", trace_id=trace_id, reason="outbox_full", error=str(result)
                )
                outcomes.append(Outcome("deferred"))
                continue
            try:
                outcomes.append(item.done())
            except Exception as error:  # a hook's: the trace is recorded
                outcomes.append(error)
        return outcomes

    def _release(self, reservation: Reservation | None) -> None:
        if reservation is not None and self.judge is not None:
            # A fleet's claim taken for a sample that was never written: given back,
            # or the trace read again would find it and never be judged.
            self.judge.release(reservation)

    def _scored(
        self,
        write: TraceWrite,
        known: str | None,
        mapped: RagRecord,
        signals: Signals,
        prepared: Prepared,
        reservation: Reservation | None,
    ) -> Outcome:
        """A new or changed trace's scores are committed: counted, logged, judged, told."""
        trace_id, scores = write.trace_id, write.scores
        kind: OutcomeKind = "scored" if known is None or known.startswith("skip:") else "rescored"
        self.metrics.traces.labels(kind).inc()
        for score in scores:
            self.metrics.scores_enqueued.labels(score.name).inc()
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
        if self.on_scored is not None and write.history is not None:
            self.on_scored(mapped, signals, write.history)
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
    ) -> Outcome | _Composed:
        """A skip, recorded once: counted, logged, its scores (if it had any) deleted, and
        its history row (an answer-looking trace's) replacing the one it had."""
        skip = prepared.skip
        assert skip is not None
        fingerprint = skip_fingerprint(skip)
        if fingerprint == known:  # counted and logged when first seen
            if latest is not None:
                self.state.note_latest(trace_id, latest)
            return Outcome("skipped", reason=skip.reason)
        row = skip_row(trace_id, skip.reason, root_start, prepared.environment, prepared.project_id)
        write = TraceWrite(trace_id, fingerprint, root_start, (), now, row, latest=latest)
        return _Composed(write, functools.partial(self._count_skip, trace_id, skip, prepared))

    def _count_skip(self, trace_id: str, skip: Skip, prepared: Prepared) -> Outcome:
        self.metrics.traces.labels("skipped").inc()
        self.metrics.skips.labels(reason=skip.reason).inc()
        self._count_provenance(prepared.provenance)
        log.info("trace_skipped", trace_id=trace_id, reason=skip.reason, detail=skip.detail)
        return Outcome("skipped", reason=skip.reason)


def _bounded(record: RagRecord) -> RagRecord:
    """A record whose numbers the state file and orjson hold: a prompt version past 64
    bits (the edge writes one as text, which the mapping reads back) is no version."""
    version = record.prompt_version
    if version is not None and not -(2**63) <= version < 2**63:
        return replace(record, prompt_version=None)
    return record


def skip_fingerprint(skip: Skip) -> str:
    """What the state file keeps for a skipped trace: its reason and detail, digested."""
    digest = hashlib.sha256(skip.detail.encode("utf-8", "replace")).hexdigest()[:16]
    return f"skip:{skip.reason}:{digest}"


def failed(trace_id: str, stage: str, error: Exception, known: str | None) -> Prepared:
    """A trace whose handling raised what nothing expected: skipped as `internal_error`,
    naming the stage and the exception's type (its traceback logged the first time)."""
    skip = Skip("internal_error", f"{stage}: {type(error).__name__}")
    if known != skip_fingerprint(skip):
        log.error(
            "trace_failed",
            trace_id=trace_id,
            stage=stage,
            error=f"{type(error).__name__}: {error}"[:300],
            action="skipped as internal_error; the pass goes on",
            exc_info=error,
        )
    return Prepared(skip=skip)


def _root_labels(observations: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(environment, project id) of a trace's root, as the mapping reads them; a trace
    without a root has its first observation's."""
    root = find_root(observations) or (observations[0] if observations else {})
    environment, project_id = root.get("environment"), root.get("projectId")
    return (
        environment if isinstance(environment, str) and environment else None,
        project_id if isinstance(project_id, str) and project_id else None,
    )
