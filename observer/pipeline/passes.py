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

Every page is cleaned as it arrives (observer.sources.clean: lone surrogates and
integers past 64 bits made writable), and one trace is isolated from the rest: any
unexpected error while preparing or recording it skips it as `internal_error`
naming the exception's type (counted, logged with its traceback once, fingerprinted
so it is not retried until it changes), and the pass goes on.

What happens to one trace is `observer.pipeline.traces`. The watermark moves only
at the end of a complete pass, to the oldest root still unsettled (or `now -
settle_s`); the next pass starts there, and a sweep (a process's first pass,
then one per `sweep_interval_s`) `overlap_s` before it, to catch late data.
A crash mid-pass re-reads the same window: fingerprints make that idempotent.

In a fleet (docs/operating.md#running-a-fleet) the reader's pipeline is given a
`Publisher` and its `Marks` (the watermark and what is known of traces, kept in
Redis): a complete, settled trace is published for the workers instead of scored
here, and the watermark also stays below the oldest published trace not yet
acknowledged (`next_watermark`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

import structlog
from opentelemetry import trace

from observer.mapping.rules import MappingRules
from observer.pipeline.traces import (
    JudgeGate,
    Lookup,
    Outcome,
    Prepared,
    ScoredHook,
    SignalsHook,
    TraceRecorder,
    failed,
    look_up,
)
from observer.signals import SignalParams
from observer.sources import ObservationSource, Stopped
from observer.sources.clean import clean_page
from observer.sources.ingestion import SLOW_INGESTION_BOUND_S, slow_ingestion
from observer.state import State, StateError
from observer.telemetry.metrics import Metrics
from observer.times import iso, parse_time

log = structlog.get_logger("observer.pipeline")
NO_SPANS = trace.NoOpTracer()  # without telemetry

# Spans of one trace can come from hosts whose clocks differ a little: a child
# may "start" just before its root. A trace counts as complete only once the
# pages are this far below its root.
CLOCK_SKEW = timedelta(seconds=2)
# How far past Langfuse's now a daemon pass reads, for traces of apps whose clock is ahead.
FUTURE_READ = timedelta(days=1)

# A stop that ended the source's wait (for the budget, a backoff): a page like no other,
# handled as a stop between pages (the pass counts what it did and hands back the rest).
_STOPPED: list[dict[str, Any]] = []


def _next_page(pages: Iterator[list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
    """The next page; None at the listing's end, `_STOPPED` when a stop ended it."""
    try:
        return next(pages, None)
    except Stopped:
        return _STOPPED


class Marks(Protocol):
    """Where the watermark and what is known of traces live: the state file (one daemon),
    or the fleet's Redis (its reader)."""

    def watermark(self) -> datetime | None: ...

    def set_watermark(self, moment: datetime) -> None: ...

    def trace_marks(
        self, trace_ids: Sequence[str]
    ) -> dict[str, tuple[datetime, datetime | None]]: ...


PublishKind = Literal["published", "unchanged", "unsettled"]


@dataclass(frozen=True, slots=True)
class Publication:
    """A complete trace for the fleet's workers, as the reader read it."""

    trace_id: str
    observations: list[dict[str, Any]]
    root: datetime
    now: datetime
    latest: datetime | None
    too_large: int | None


class Publisher(Protocol):
    """A fleet's reader: complete traces go to the workers instead of being scored."""

    def publish(self, traces: Sequence[Publication]) -> list[PublishKind]:
        """Each trace published, left out as unchanged, or held back as unsettled (one
        answer per trace, in order); a page's traces go together, in one round trip."""
        ...

    def oldest_unacked(self) -> datetime | None:
        """The earliest root of a published trace no worker has acknowledged yet."""
        ...


def next_watermark(
    current: datetime | None,
    settled_until: datetime,
    hold: datetime | None,
    oldest_unacked: datetime | None = None,
) -> datetime | None:
    """Where the watermark moves after a complete pass, or None when it stays.

    Up to `settled_until` (now less the settle time), but not past a trace this
    pass left undone (`hold`) nor one published and not yet acknowledged; never back.
    """
    proposed = settled_until
    for bound in (hold, oldest_unacked):
        if bound is not None:
            proposed = min(proposed, bound)
    if current is None or proposed > current:
        return proposed
    return None


@dataclass
class PassResult:
    start: datetime
    end: datetime
    pages: int = 0
    observations: int = 0
    scored: int = 0
    rescored: int = 0
    unchanged: int = 0
    unsettled: int = 0
    skipped: int = 0
    deferred: int = 0
    partial: int = 0
    published: int = 0  # a fleet reader's: complete traces handed to the workers
    scores: int = 0
    hold: datetime | None = None  # oldest root the watermark must not pass
    sweep: bool = False  # a daemon pass that re-read the overlap before the watermark
    cut_short: bool = False  # stopped before the end of its window: counts what it did
    skip_reasons: dict[str, int] = field(default_factory=dict)

    def add(self, other: PassResult) -> None:
        """Add another window's counts to these (backfill totals its chunks)."""
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, item.name, value + getattr(other, item.name))
        for reason, count in other.skip_reasons.items():
            self.skip_reasons[reason] = self.skip_reasons.get(reason, 0) + count

    def count(self, outcome: Outcome, at: datetime) -> None:
        """One trace's outcome; a trace that is not done holds the watermark `at` what
        this pass read of it (its root in the window, or a late observation's start)."""
        setattr(self, outcome.kind, getattr(self, outcome.kind) + 1)
        self.scores += outcome.scores
        if outcome.reason:
            self.skip_reasons[outcome.reason] = self.skip_reasons.get(outcome.reason, 0) + 1
        if outcome.holds:
            self.hold = at if self.hold is None else min(self.hold, at)

    @property
    def traces(self) -> int:
        return (
            self.scored
            + self.rescored
            + self.unchanged
            + self.unsettled
            + self.skipped
            + self.deferred
            + self.published
        )


def _trace_attributes(
    trace_id: str, outcome: Outcome, observations: list[dict[str, Any]]
) -> dict[str, str]:
    """What a `observer.trace_scored` span says: never the question or the answer."""
    attributes = {"observer.trace_id": trace_id, "observer.outcome": outcome.kind}
    if outcome.reason:
        attributes["observer.skip_reason"] = outcome.reason
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
        judge: JudgeGate | None = None,
        tracer: trace.Tracer = NO_SPANS,
        marks: Marks | None = None,
        publisher: Publisher | None = None,
        max_trace_cpu_s: float = 10.0,
    ) -> None:
        self.tracer = tracer  # Telemetry.tracer, from the composition root
        self.source = source
        self.state = state
        self.marks: Marks = marks if marks is not None else state
        self.publisher = publisher
        # With a publisher: where the passes have read up to (the watermark trails it
        # while published traces wait to be acknowledged). In memory only: a new reader
        # starts from the watermark, and what it publishes again is unchanged.
        self.cursor: datetime | None = None
        self.counting: PassResult | None = None  # the pass in hand, counted as it goes
        self.metrics = metrics
        self.notify = notify
        self.traces = TraceRecorder(
            state,
            metrics,
            params,
            rules,
            settle_s=settle_s,
            on_scored=on_scored,
            on_signals=on_signals,
            judge=judge,
            max_cpu_s=max_trace_cpu_s,
        )
        self.overlap = timedelta(seconds=overlap_s)
        self.sweep_interval = timedelta(seconds=sweep_interval_s)
        self._swept_at: datetime | None = None  # when the last sweep ended
        self.lookback = timedelta(seconds=lookback_s)
        self.lookup = lookup
        self.should_stop = should_stop
        # An SDK seen whose data may land 15 minutes late: kept in the state file, so the
        # sweeps of a restarted daemon still re-read the documented delay.
        self.slow_sdk = state.noted("slow_sdk")
        if self.slow_sdk is not None:
            self.overlap = max(self.overlap, self._slow_overlap())

    # -- passes ---------------------------------------------------------------

    def poll(self, now: datetime) -> PassResult:
        """One daemon pass from the watermark to `now`; advances it.

        A sweep re-reads the overlap before the watermark too, for observations
        that landed late: the first pass of a process, then the first pass a sweep
        interval after the last sweep ended. The passes between start at the
        watermark, which already trails `now` by the settle time: re-reading the
        whole overlap on every pass would read the same traces `overlap / poll
        interval` times over.
        """
        watermark = self.marks.watermark()
        if watermark is not None and watermark > now - self.traces.settle + CLOCK_SKEW:
            # Written under a clock that ran ahead (this host's before NTP, an older
            # version that trusted it): the watermark never stands past Langfuse's now.
            log.warning(
                "watermark_in_future",
                watermark=iso(watermark),
                langfuse_now=iso(now),
                action="moved back to Langfuse's now less the settle time",
            )
            watermark = now - self.traces.settle
            self.marks.set_watermark(watermark)
        sweep = self._swept_at is None or now - self._swept_at >= self.sweep_interval
        # A fleet's reader goes on from where its last pass got to, not from the watermark
        # held below the entries the workers have not acknowledged yet: re-reading those
        # on every pass would cost pages and publish nothing (they are unchanged).
        base = watermark
        if self.cursor is not None and (base is None or self.cursor > base):
            base = self.cursor
        start = now - self.lookback if base is None else base
        if base is not None and sweep:
            start = base - self.overlap
        began = time.monotonic()
        # Read past now: a trace from an app whose clock runs ahead is stamped in the
        # future, and counts as rooted now instead of waiting for its time (docs/daemon.md).
        result = self.process_window(start, now, now, now + FUTURE_READ)
        result.sweep = sweep
        if sweep:
            # Counted from the sweep's end: when passes last longer than the interval (the
            # daemon is behind), sweeps alternate with passes that only read what is new.
            self._swept_at = now + timedelta(seconds=time.monotonic() - began)
        oldest = None
        if self.publisher is not None:
            oldest = self.publisher.oldest_unacked()
            reached = next_watermark(base, now - self.traces.settle, result.hold)
            self.cursor = reached if reached is not None else base
        moved = next_watermark(watermark, now - self.traces.settle, result.hold, oldest)
        if moved is not None:
            self.marks.set_watermark(moved)
            watermark = moved
        assert watermark is not None  # None only moves
        self.metrics.set_watermark(watermark.timestamp())
        return result

    def process_window(
        self,
        start: datetime,
        end: datetime,
        now: datetime,
        read_until: datetime | None = None,
        *,
        result: PassResult | None = None,
    ) -> PassResult:
        """Handle every trace whose root starts in [start, end), with all its observations.

        Observations are read up to `read_until` (default `end`): a window that ends
        before now (a backfill chunk) reads on past its end, so a trace rooted just
        before it keeps the children that started just after. Traces rooted at or
        after `end` are left to the next window.

        Counted into `result` when given (a new PassResult otherwise), as it goes: when
        the pass raises (a stop while the source waits, Langfuse unreachable), what it
        did before is still counted there. A stop between pages returns the result
        `cut_short`.
        """
        with self.tracer.start_as_current_span("observer.poll_pass") as span:
            if result is None:
                result = PassResult(start, end)
            self.counting = result  # what the pass in hand did so far (a progress line's)
            self._window(start, end, now, max(end, read_until or end), result)
            if span.is_recording():
                span.set_attributes(
                    {
                        "observer.window.start": start.isoformat(),
                        "observer.window.end": end.isoformat(),
                        "observer.observations": result.observations,
                        "observer.pipeline.traces.scored": result.scored,
                        "observer.pipeline.traces.rescored": result.rescored,
                        "observer.pipeline.traces.unchanged": result.unchanged,
                        "observer.pipeline.traces.unsettled": result.unsettled,
                        "observer.pipeline.traces.skipped": result.skipped,
                        "observer.pipeline.traces.deferred": result.deferred,
                        "observer.scores": result.scores,
                    }
                )
            return result

    def _window(
        self,
        start: datetime,
        end: datetime,
        now: datetime,
        read_until: datetime,
        result: PassResult,
    ) -> PassResult:
        limit = self.traces.rules.max_observations
        with self.metrics.pass_duration.time():
            flight: dict[str, _InFlight] = {}
            handled: set[str] = set()  # handled in this pass: seen again, it had an earlier root
            # From a little before the start: a child may "start" before its root (skew).
            pages = self.source.pages(start - CLOCK_SKEW, read_until)
            while (page := _next_page(pages)) is not None:
                if page is not _STOPPED:
                    page = clean_page(page)  # text and numbers safe to keep, at the edge
                    result.pages += 1
                result.observations += len(page)
                fresh = {
                    t for o in page if isinstance(t := o.get("traceId"), str) and t not in flight
                }
                known = self.marks.trace_marks(sorted(fresh)) if fresh else {}
                for observation in page:
                    trace_id = observation.get("traceId")
                    if not isinstance(trace_id, str):
                        continue
                    trace = flight.get(trace_id)
                    if trace is None:
                        root, latest = known.get(trace_id, (None, None))
                        trace = flight[trace_id] = _InFlight(
                            known=root, known_latest=latest, refetch=trace_id in handled
                        )
                    trace.add(observation, limit, now)
                # An empty page says nothing of how far the listing has come: read on.
                oldest = min(
                    (t for o in page if (t := parse_time(o.get("startTime"))) is not None),
                    default=None,
                )
                if oldest is not None:
                    # Pages go newest first: a trace whose earliest root lies above the
                    # oldest start seen has all its observations in hand.
                    complete = [t for t, f in flight.items() if f.complete_above(oldest, start)]
                    self._handle(complete, flight, handled, start, end, now, result)
                if page is _STOPPED or self.should_stop():
                    # Hand back the rest: the watermark stays, the next run re-reads it.
                    result.hold = start if result.hold is None else min(result.hold, start)
                    result.cut_short = True
                    self.notify()
                    return result
            rooted = [t for t, f in flight.items() if f.root is not None]
            self._handle(rooted, flight, handled, start, end, now, result)
            # Rooted before the window: a known trace that shows a newer observation than
            # when it was last handled changed (a late generation): read whole, handled.
            changed = [t for t, f in flight.items() if f.newer_than_known]
            self._handle(changed, flight, handled, start, end, now, result, revisit=True)
            result.partial += len(flight)
        self.notify()
        return result

    # -- traces ---------------------------------------------------------------

    def _handle(
        self,
        trace_ids: list[str],
        flight: dict[str, _InFlight],
        handled_ids: set[str],
        start: datetime,
        end: datetime,
        now: datetime,
        result: PassResult,
        *,
        revisit: bool = False,
    ) -> None:
        if not trace_ids:
            return
        known = self.state.fingerprints(trace_ids) if self.publisher is None else {}
        handled: list[
            tuple[str, list[dict[str, Any]], datetime, datetime, Prepared, datetime | None]
        ] = []
        publications: list[Publication] = []
        holds: list[datetime] = []
        for trace_id in trace_ids:
            trace = flight.pop(trace_id)
            handled_ids.add(trace_id)
            root_start = trace.earliest
            hold = trace.hold(revisit)
            if not revisit:
                assert root_start is not None and trace.root is not None
                if trace.root < start:
                    result.partial += 1  # rooted before the window: an earlier pass's
                    continue
                # Read past the end for its neighbours: the next window's own, unless it
                # is stamped after now (an app clock ahead), which counts as now.
                if trace.root >= end and not (trace.root > now and end >= now):
                    continue
            if (trace.refetch or revisit) and not trace.too_large:
                # Another root lies below what this pass reads, or was read before this
                # part: the trace is read whole, so it stays one record whatever its roots.
                trace = self._whole(trace_id, trace, now)
                root_start = trace.earliest or root_start
            if root_start is None:
                continue  # seen again without its root: nothing to score it from
            self._note_ingestion(trace_id, trace.observations)
            if self.publisher is not None:
                publications.append(
                    Publication(
                        trace_id,
                        trace.observations,
                        root_start,
                        now,
                        trace.news,
                        trace.count if trace.too_large else None,
                    )
                )
                holds.append(min(hold or root_start, now))
                continue
            try:
                prepared = self.traces.prepare(
                    trace_id,
                    trace.observations,
                    known.get(trace_id),
                    now,
                    root_start,
                    too_large=trace.count if trace.too_large else None,
                )
            except Exception as error:  # one strange trace never stops the pass
                prepared = failed(trace_id, "preparing", error, known.get(trace_id))
            handled.append(
                (trace_id, trace.observations, root_start, hold or root_start, prepared, trace.news)
            )
        if self.publisher is not None:
            self._publish(publications, holds, result)
            return
        self._record_page(handled, known, now, result)

    def _record_page(
        self,
        handled: list[
            tuple[str, list[dict[str, Any]], datetime, datetime, Prepared, datetime | None]
        ],
        known: dict[str, str],
        now: datetime,
        result: PassResult,
    ) -> None:
        """The prepared traces of a page: their cited chunks looked up, then recorded."""
        look_up(self.lookup, [p for *_, p, _news in handled])
        # One transaction for the page's traces, each still all or nothing: a commit per
        # trace was most of a pass's own cost (bench/pipeline.py).
        outcomes = self.traces.record_many(
            [(t, p, root, known.get(t), news) for t, _o, root, _h, p, news in handled], now
        )
        for (trace_id, observations, root_start, hold, _p, news), outcome in zip(
            handled, outcomes, strict=True
        ):
            with self.tracer.start_as_current_span("observer.trace_scored") as span:
                if isinstance(outcome, Exception):
                    outcome = self._record_failed(
                        trace_id, outcome, root_start, known.get(trace_id), now, news
                    )
                result.count(outcome, min(hold, now))
                if span.is_recording():
                    span.set_attributes(_trace_attributes(trace_id, outcome, observations))
        self.notify()

    def _record_failed(
        self,
        trace_id: str,
        error: Exception,
        root_start: datetime,
        known: str | None,
        now: datetime,
        news: datetime | None,
    ) -> Outcome:
        """A trace whose recording raised what nothing expected, recorded as skipped
        (`internal_error`); a state file that cannot be written stops the pass."""
        skipped = failed(trace_id, "recording", error, known)
        try:
            return self.traces.record(trace_id, skipped, root_start, known, now, news)
        except StateError:
            raise
        except Exception:  # not even the skip could be written: counted, passed over
            log.exception("trace_unrecordable", trace_id=trace_id)
            self.metrics.skips.labels(reason="internal_error").inc()
            return Outcome("skipped", reason="internal_error")

    def _publish(
        self, publications: list[Publication], holds: list[datetime], result: PassResult
    ) -> None:
        assert self.publisher is not None
        kinds = self.publisher.publish(publications)
        for kind, hold in zip(kinds, holds, strict=True):
            if kind == "published":
                result.published += 1
            else:
                result.count(Outcome(kind), hold)

    def _slow_overlap(self) -> timedelta:
        """What sweeps re-read once an SDK on the slow path is known: the documented
        delay, plus a sweep interval and two minutes, so a trace that lands at the
        bound is still inside the next sweep's window."""
        return (
            timedelta(seconds=SLOW_INGESTION_BOUND_S) + self.sweep_interval + timedelta(minutes=2)
        )

    def _note_ingestion(self, trace_id: str, observations: list[dict[str, Any]]) -> None:
        """A trace from an SDK whose data Langfuse may ingest late: counted, said once,
        and from then on every sweep re-reads at least the documented delay."""
        for observation in observations:
            if not observation.get("isRootObservation"):
                continue
            sdk = slow_ingestion(observation.get("metadata"))
            if sdk is None:
                return
            self.metrics.slow_ingestion_traces.inc()
            if self.slow_sdk is None:
                self.slow_sdk = sdk
                self.state.note("slow_sdk", sdk)
                widened = max(self.overlap, self._slow_overlap())
                log.info(
                    "slow_ingestion_detected",
                    trace_id=trace_id,
                    sdk=sdk,
                    meaning="Langfuse may show this SDK's traces up to 15 minutes late",
                    action=f"sweeps re-read {widened.total_seconds():g} s; upgrade to SDK 5",
                )
                self.overlap = widened
            return

    def _whole(self, trace_id: str, part: _InFlight, now: datetime) -> _InFlight:
        """The whole trace, read by its id from a little before its earliest known root."""
        earliest = part.earliest or now
        whole = _InFlight(known=part.known, known_latest=part.known_latest)
        for page in self.source.pages(earliest - CLOCK_SKEW - self.overlap, now, trace_id):
            for observation in clean_page(page):
                if observation.get("traceId") == trace_id:
                    whole.add(observation, self.traces.rules.max_observations, now)
        return whole if whole.root is not None else part


@dataclass
class _InFlight:
    """A trace being read: its observations (until too many), its roots, what it needs.

    `known` is the earliest root the state file holds for it (an earlier pass saw a
    root this pass may not reach); `refetch` marks a trace to be read whole by its
    id before it is handled.
    """

    known: datetime | None = None
    known_latest: datetime | None = None  # the latest start it showed when last handled
    refetch: bool = False
    observations: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0
    root: datetime | None = None  # the earliest root read in this pass (as stamped)
    last_root: datetime | None = None  # the latest root read in this pass
    latest: datetime | None = None  # the latest start read, not after now
    too_large: bool = False

    @property
    def news(self) -> datetime | None:
        """The latest start read, when it is later than what the state file remembers."""
        if self.latest is None or (self.known_latest and self.latest <= self.known_latest):
            return None
        return self.latest

    @property
    def newer_than_known(self) -> bool:
        """A known trace, read without its root, showing an observation it did not have."""
        return self.root is None and self.known is not None and self.news is not None

    @property
    def earliest(self) -> datetime | None:
        """The earliest root of the trace that is known: read now or remembered."""
        if self.root is None:
            return self.known
        return self.root if self.known is None else min(self.root, self.known)

    def hold(self, revisit: bool) -> datetime | None:
        """Where the watermark waits if the trace is not done.

        A trace the state file knows is read whole from its remembered root whenever
        the next pass meets one of its roots, so it waits at the last root read, the
        settling turn's; waiting at the first turn's would stop it while later turns
        come and settle. A new trace waits at its first root, or the next pass would
        miss that turn. A trace read again for a late observation waits at its latest.
        """
        if revisit:
            return self.latest
        return self.root if self.known is None else self.last_root

    def add(self, observation: dict[str, Any], limit: int, now: datetime) -> None:
        self.count += 1
        if self.count > limit:
            # Counted, no longer buffered: a huge trace costs a counter, not its size.
            self.too_large = True
            self.observations.clear()
        else:
            self.observations.append(observation)
        moment = parse_time(observation.get("startTime"))
        if moment is None:
            return
        if moment <= now and (self.latest is None or moment > self.latest):
            self.latest = moment
        if observation.get("isRootObservation"):
            self.root = moment if self.root is None else min(self.root, moment)
            self.last_root = moment if self.last_root is None else max(self.last_root, moment)

    def complete_above(self, oldest: datetime, start: datetime) -> bool:
        """All its observations are read once the pages are below its earliest root.

        A remembered root below the window's start is never reached: the trace is
        read whole instead, once the pages are below the roots this pass has read.
        """
        if self.root is None:
            return False
        earliest = self.earliest
        assert earliest is not None
        if earliest < start - CLOCK_SKEW:
            self.refetch = True
            return self.root - CLOCK_SKEW > oldest
        return earliest - CLOCK_SKEW > oldest
