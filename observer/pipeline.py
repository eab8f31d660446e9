"""One pass of the daemon: observations in a time window -> scores in the outbox.

Streaming, newest first: the source pages observations by descending
startTime, and every observation of a trace starts at or after its root, so
a trace is complete as soon as the pages have gone below its root's start
time. It is handled then and forgotten, which bounds memory by the traces
in flight across one page, not by the window.

For each complete trace whose root lies in the window:
- still changing (activity within `settle_s`): left for a later pass, and
  the watermark is held at its root;
- mapped to a RagRecord (or skipped with a counted reason, logged once);
- fingerprinted (the record plus the signal parameters): unchanged since
  the last pass -> nothing is pushed; new or changed -> signals, scores and
  fingerprint (and the trace's row of the signal history) go into the state
  in one transaction, and the dispatcher is nudged. Score ids and timestamps
  are deterministic, so a re-score updates.

The watermark moves only at the end of a complete pass, to the oldest
root still unsettled (or `now - settle_s`); the next pass starts `overlap_s`
before it to catch late data. A crash mid-pass re-reads the same window:
fingerprints make that idempotent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

import orjson
import structlog
from opentelemetry import trace

from observer.alerts.history import resolver_values, signal_values, trace_row
from observer.mapping.convention import MappingRules, Skip, map_trace
from observer.model import RagRecord, Signals
from observer.resolver.core import ResolverFindings
from observer.resolver.scores import resolver_score_events
from observer.scores import score_events
from observer.signals import SignalParams, compute
from observer.sources import ObservationSource
from observer.state import OutboxFull, State
from observer.telemetry.metrics import Metrics
from observer.times import parse_time

log = structlog.get_logger("observer.pipeline")
tracer = trace.get_tracer("observer")  # a no-op unless telemetry is set up

# on_scored: a trace's scores are safely in the outbox (new or changed traces), with
# what the resolver found of its cited chunks (None: no resolver, or it could not say);
# on_signals: every answer trace read, changed or not (summaries).
ScoredHook = Callable[[RagRecord, Signals, "ResolverFindings | None"], None]
SignalsHook = Callable[[RagRecord, Signals], None]
# Spans of one trace can come from hosts whose clocks differ a little: a child
# may "start" just before its root. A trace counts as complete only once the
# pages are this far below its root.
CLOCK_SKEW = timedelta(seconds=2)


def params_digest(params: SignalParams) -> str:
    """Changing a threshold changes every fingerprint, so seen traces are re-scored."""
    described = orjson.dumps(
        {
            "min_chars": params.min_chars,
            "pleasantry_prefixes": list(params.pleasantry_prefixes),
            "abbreviations": sorted(params.abbreviations),
            "crag": params.crag,
            "band": [params.band_high, params.band_medium],
        }
    )
    return hashlib.sha256(described).hexdigest()[:16]


@dataclass
class _Prepared:
    """A trace mapped and fingerprinted, before anything is recorded."""

    unsettled: bool = False
    skip: Skip | None = None
    record: RagRecord | None = None
    signals: Signals | None = None
    fingerprint: str | None = None  # None: unchanged since the last pass
    findings: ResolverFindings | None = None


# The citation resolver for a page's new and changed traces: findings per trace, in order
# (None where the store could not say).
Lookup = Callable[[list[tuple[RagRecord, Signals]]], list["ResolverFindings | None"]]


@dataclass
class PassResult:
    start: datetime
    end: datetime
    observations: int = 0
    scored: int = 0
    rescored: int = 0
    unchanged: int = 0
    unsettled: int = 0
    skipped: int = 0
    deferred: int = 0
    partial: int = 0
    scores: int = 0
    hold: datetime | None = None  # oldest root the watermark must not pass
    sweep: bool = False  # a daemon pass that re-read the overlap before the watermark
    skip_reasons: dict[str, int] = field(default_factory=dict)

    def add(self, other: PassResult) -> None:
        """Add another window's counts to these (backfill totals its chunks)."""
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, item.name, value + getattr(other, item.name))
        for reason, count in other.skip_reasons.items():
            self.skip_reasons[reason] = self.skip_reasons.get(reason, 0) + count

    @property
    def traces(self) -> int:
        return (
            self.scored
            + self.rescored
            + self.unchanged
            + self.unsettled
            + self.skipped
            + self.deferred
        )


def _last_activity(observations: list[dict[str, Any]]) -> datetime | None:
    latest: datetime | None = None
    for observation in observations:
        for key in ("updatedAt", "endTime", "startTime"):
            moment = parse_time(observation.get(key))
            if moment is not None and (latest is None or moment > latest):
                latest = moment
    return latest


def _trace_attributes(
    trace_id: str, outcome: str, observations: list[dict[str, Any]]
) -> dict[str, str]:
    """What a `observer.trace_scored` span says: never the question or the answer."""
    outcome, _, reason = outcome.partition(":")
    attributes = {"observer.trace_id": trace_id, "observer.outcome": outcome}
    if reason:
        attributes["observer.skip_reason"] = reason
    for observation in observations:
        environment = observation.get("environment")
        if observation.get("isRootObservation") and isinstance(environment, str):
            attributes["observer.environment"] = environment
    return attributes


class Pipeline:
    def __init__(
        self,
        source: ObservationSource,
        state: State,
        metrics: Metrics,
        params: SignalParams,
        rules: MappingRules,
        *,
        notify: Callable[[], None] = lambda: None,
        settle_s: float = 20.0,
        overlap_s: float = 300.0,
        sweep_interval_s: float = 0.0,
        lookback_s: float = 3600.0,
        on_scored: ScoredHook | None = None,
        on_signals: SignalsHook | None = None,
        lookup: Lookup | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self.source = source
        self.state = state
        self.metrics = metrics
        self.params = params
        self.rules = rules
        self.notify = notify
        self.settle = timedelta(seconds=settle_s)
        self.overlap = timedelta(seconds=overlap_s)
        self.sweep_interval = timedelta(seconds=sweep_interval_s)
        self._swept_at: datetime | None = None  # the last complete pass that read the overlap
        self.lookback = timedelta(seconds=lookback_s)
        self.on_scored = on_scored
        self.on_signals = on_signals
        self.lookup = lookup
        self.should_stop = should_stop
        self._params_digest = params_digest(params)

    # -- passes ---------------------------------------------------------------

    def poll(self, now: datetime) -> PassResult:
        """One daemon pass from the watermark to `now`; advances it.

        A sweep re-reads the overlap before the watermark too, for observations
        that landed late: the first pass of a process, then one pass per sweep
        interval. The passes between start at the watermark, which already trails
        `now` by the settle time: re-reading the whole overlap on every pass
        would read the same traces `overlap / poll interval` times over.
        """
        watermark = self.state.watermark()
        sweep = self._swept_at is None or now - self._swept_at >= self.sweep_interval
        if watermark is None:
            start = now - self.lookback
        else:
            start = watermark - self.overlap if sweep else watermark
        result = self.process_window(start, now, now)
        result.sweep = sweep
        if sweep:
            self._swept_at = now
        proposed = now - self.settle
        if result.hold is not None:
            proposed = min(proposed, result.hold)
        if watermark is None or proposed > watermark:
            self.state.set_watermark(proposed)
            watermark = proposed
        self.metrics.set_watermark(watermark.timestamp())
        return result

    def process_window(
        self, start: datetime, end: datetime, now: datetime, read_until: datetime | None = None
    ) -> PassResult:
        """Handle every trace whose root starts in [start, end), with all its observations.

        Observations are read up to `read_until` (default `end`): a window that ends
        before now (a backfill chunk) reads on past its end, so a trace rooted just
        before it keeps the children that started just after. Traces rooted at or
        after `end` are left to the next window.
        """
        with tracer.start_as_current_span("observer.poll_pass") as span:
            result = self._window(start, end, now, max(end, read_until or end))
            if span.is_recording():
                span.set_attributes(
                    {
                        "observer.window.start": start.isoformat(),
                        "observer.window.end": end.isoformat(),
                        "observer.observations": result.observations,
                        "observer.traces.scored": result.scored,
                        "observer.traces.rescored": result.rescored,
                        "observer.traces.unchanged": result.unchanged,
                        "observer.traces.unsettled": result.unsettled,
                        "observer.traces.skipped": result.skipped,
                        "observer.traces.deferred": result.deferred,
                        "observer.scores": result.scores,
                    }
                )
            return result

    def _window(
        self, start: datetime, end: datetime, now: datetime, read_until: datetime
    ) -> PassResult:
        result = PassResult(start, end)
        with self.metrics.pass_duration.time():
            buffered: dict[str, list[dict[str, Any]]] = {}
            roots: dict[str, datetime] = {}
            # From a little before the start: a child may "start" before its root (skew).
            for page in self.source.pages(start - CLOCK_SKEW, read_until):
                result.observations += len(page)
                for observation in page:
                    trace_id = observation.get("traceId")
                    if not isinstance(trace_id, str):
                        continue
                    buffered.setdefault(trace_id, []).append(observation)
                    if observation.get("isRootObservation"):
                        root_start = parse_time(observation.get("startTime"))
                        if root_start is not None:
                            roots[trace_id] = root_start
                if not page:
                    break
                # Pages go newest first: traces rooted after the oldest start seen are complete.
                oldest = min(
                    (t for o in page if (t := parse_time(o.get("startTime"))) is not None),
                    default=None,
                )
                if oldest is not None:
                    complete = [t for t, r in roots.items() if r - CLOCK_SKEW > oldest]
                    self._handle(complete, buffered, roots, start, end, now, result)
                if self.should_stop():
                    # Hand back the rest: the watermark stays, the next run re-reads it.
                    result.hold = start if result.hold is None else min(result.hold, start)
                    self.notify()
                    return result
            self._handle(list(roots), buffered, roots, start, end, now, result)
            result.partial += len(buffered)
        self.notify()
        return result

    # -- traces ---------------------------------------------------------------

    def _handle(
        self,
        trace_ids: list[str],
        buffered: dict[str, list[dict[str, Any]]],
        roots: dict[str, datetime],
        start: datetime,
        end: datetime,
        now: datetime,
        result: PassResult,
    ) -> None:
        if not trace_ids:
            return
        known = self.state.fingerprints(trace_ids)
        handled: list[tuple[str, list[dict[str, Any]], datetime, _Prepared]] = []
        for trace_id in trace_ids:
            observations = buffered.pop(trace_id)
            root_start = roots.pop(trace_id)
            if root_start < start:
                result.partial += 1  # rooted before the window: handled by an earlier pass
                continue
            if root_start >= end:
                continue  # read past the end for its neighbours; the next window's own
            prepared = self._prepare(trace_id, observations, known.get(trace_id), now)
            handled.append((trace_id, observations, root_start, prepared))
        # The new and changed traces of this page: their cited chunks in one lookup.
        changed = [p for *_, p in handled if p.fingerprint is not None and p.signals is not None]
        if self.lookup is not None and changed:
            found = self.lookup([(p.record, p.signals) for p in changed if p.record and p.signals])
            for item, findings in zip(changed, found, strict=True):
                item.findings = findings
        for trace_id, observations, root_start, prepared in handled:
            with tracer.start_as_current_span("observer.trace_scored") as span:
                outcome = self._finish(
                    trace_id, prepared, root_start, known.get(trace_id), now, result
                )
                if span.is_recording():
                    span.set_attributes(_trace_attributes(trace_id, outcome, observations))
        self.notify()

    def _hold(self, result: PassResult, root_start: datetime) -> None:
        result.hold = root_start if result.hold is None else min(result.hold, root_start)

    def _prepare(
        self,
        trace_id: str,
        observations: list[dict[str, Any]],
        known: str | None,
        now: datetime,
    ) -> _Prepared:
        """Map, compute and fingerprint one complete trace: no I/O, no counting."""
        last = _last_activity(observations)
        if last is not None and now - last < self.settle:
            return _Prepared(unsettled=True)
        mapped = map_trace(trace_id, observations, self.rules)
        if isinstance(mapped, Skip):
            return _Prepared(skip=mapped)
        signals = compute(mapped, self.params)
        fingerprint = hashlib.sha256(
            orjson.dumps(mapped) + self._params_digest.encode()
        ).hexdigest()
        if fingerprint == known:
            return _Prepared(record=mapped, signals=signals)
        return _Prepared(record=mapped, signals=signals, fingerprint=fingerprint)

    def _finish(
        self,
        trace_id: str,
        prepared: _Prepared,
        root_start: datetime,
        known: str | None,
        now: datetime,
        result: PassResult,
    ) -> str:
        """Record one prepared trace; its outcome (`skipped:<reason>` for a skip)."""
        if prepared.unsettled:
            result.unsettled += 1
            self.metrics.traces.labels(outcome="unsettled").inc()
            self._hold(result, root_start)
            return "unsettled"
        if prepared.skip is not None:
            self._skip(trace_id, prepared.skip, root_start, known, now, result)
            return f"skipped:{prepared.skip.reason}"
        mapped, signals = prepared.record, prepared.signals
        assert mapped is not None and signals is not None
        if self.on_signals is not None:
            self.on_signals(mapped, signals)
        if prepared.fingerprint is None:
            result.unchanged += 1
            self.metrics.traces.labels(outcome="unchanged").inc()
            return "unchanged"
        scores = score_events(mapped, signals, self.params)
        values = signal_values(signals)
        if prepared.findings is not None:
            scores += resolver_score_events(mapped, prepared.findings)
            values.update(resolver_values(prepared.findings))
        history = trace_row(mapped, values, now)
        try:
            self.state.record_trace(
                trace_id, prepared.fingerprint, root_start, scores, now, history
            )
        except OutboxFull as error:
            result.deferred += 1
            self.metrics.traces.labels(outcome="deferred").inc()
            self._hold(result, root_start)
            log.warning("trace_deferred", trace_id=trace_id, reason="outbox_full", error=str(error))
            return "deferred"
        outcome = "scored" if known is None or known.startswith("skip:") else "rescored"
        setattr(result, outcome, getattr(result, outcome) + 1)
        result.scores += len(scores)
        self.metrics.traces.labels(outcome=outcome).inc()
        for score in scores:
            self.metrics.scores_enqueued.labels(name=score.name).inc()
        if outcome == "scored":  # a changed trace was counted when first scored
            self.metrics.observe_answer(mapped, signals)
        cites = signals.citations
        log.info(
            "trace_scored" if outcome == "scored" else "trace_rescored",
            trace_id=trace_id,
            observation_id=mapped.observation_id,
            environment=mapped.environment,
            coverage=None if cites.coverage is None else round(cites.coverage, 3),
            crag_grade=signals.crag.grade.value,
            band=signals.band.value,
            ungrounded=signals.ungrounded,
            ghost_refs=len(cites.invalid_refs),
            scores=len(scores),
        )
        if self.on_scored is not None:
            self.on_scored(mapped, signals, prepared.findings)
        return outcome

    def _skip(
        self,
        trace_id: str,
        skip: Skip,
        root_start: datetime,
        known: str | None,
        now: datetime,
        result: PassResult,
    ) -> None:
        result.skipped += 1
        result.skip_reasons[skip.reason] = result.skip_reasons.get(skip.reason, 0) + 1
        fingerprint = f"skip:{skip.reason}:{hashlib.sha256(skip.detail.encode()).hexdigest()[:16]}"
        if fingerprint == known:
            return  # counted and logged when first seen
        self.metrics.traces.labels(outcome="skipped").inc()
        self.metrics.skips.labels(reason=skip.reason).inc()
        log.info("trace_skipped", trace_id=trace_id, reason=skip.reason, detail=skip.detail)
        self.state.record_trace(trace_id, fingerprint, root_start, (), now)
