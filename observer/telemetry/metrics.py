"""Every metric observer exposes, declared in one place (`observer_<noun>_<unit>`).

The registry is injected, so tests and the demo each get their own and read
values back with `value()`. `/metrics` serves it as Prometheus text, the one
exposition: an OpenTelemetry collector gets the same metrics by scraping it
(docs/decisions.md#telemetry).

Counters with a fixed set of label values exist at 0 from the start, so a
dashboard shows 0, not "no data". Quality metrics carry `environment` and
`query_type` (at most `max_query_types` query types; the rest are `other`);
the first trace of a new pair creates its whole set at 0. No question,
answer or trace id is ever a label, and a label value read from a trace
(environment, query type, trace name, release, model) is cut to
`MAX_LABEL_CHARS` characters, the last one `…`: a trace cannot make `/metrics`
large.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast, overload

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from observer import __version__
from observer.model import Band, Grade, RagRecord, Signals

RATIO_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0)
# From a trace's last activity to its scores in Langfuse: the settle delay (20 s) plus a
# poll interval (30 s) is the normal case; minutes mean a backlog, an hour an outage. The
# event path (docs/daemon.md#the-event-path) takes seconds: the buckets below 5.
TRACE_TO_SCORE_BUCKETS = (
    1, 2, 3, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 1800, 3600,
)  # fmt: skip
OTHER = "other"
NO_QUERY_TYPE = "none"
MAX_LABEL_CHARS = 64


def label_value(value: str) -> str:
    """A label value read from a trace, cut to MAX_LABEL_CHARS characters."""
    return value if len(value) <= MAX_LABEL_CHARS else value[: MAX_LABEL_CHARS - 1] + "…"


NOTIFICATION_RESULTS = ("sent", "failed", "dropped")


Q = ("environment", "query_type")  # the quality metrics' labels
BY_RELEASE = ("environment", "release", "model")
M = TypeVar("M", Counter, Gauge, Histogram)


class _Series:
    """`labels(*values)` of a series that exists already as one dict read: prometheus_client
    checks its arguments and takes a lock every call (~10 us), and a scored trace asks for
    dozens. Names, a new series or values not text go the long way."""

    def labels(self, *values: Any, **named: Any) -> Any:
        found = getattr(self, "_metrics", {}).get(values) if values and not named else None
        return found if found is not None else super().labels(*values, **named)  # type: ignore[misc]


# Counter, Gauge and Histogram, each with the fast `labels()` above.
_FAST: dict[type, type] = {
    k: type(f"_{k.__name__}", (_Series, k), {}) for k in (Counter, Gauge, Histogram)
}


class Declared(Generic[M]):
    """One metric declared on a class (its attribute, name, help, labels): made in the
    registry of each instance by `Declarations`, its `zero` label values at 0 from the
    start, so a dashboard shows 0, not "no data"."""

    def __init__(
        self, kind: type[M], name: str, doc: str, labels: Sequence[str], **options: Any
    ) -> None:
        self.kind: type[M] = kind
        self.name, self.labels = name, tuple(labels)
        zero = options.pop("zero", ())
        self.zero: tuple[str, ...] = tuple(zero.split() if isinstance(zero, str) else zero)
        self.doc = doc.replace("{zero}", ", ".join(self.zero))  # the values, said once
        self.options = options
        self.attribute = ""

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.attribute = attribute

    @overload
    def __get__(self, instance: None, owner: type) -> Declared[M]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> M: ...
    def __get__(self, instance: object | None, owner: type) -> Declared[M] | M:
        if instance is None:
            return self
        made: M = instance.__dict__[self.attribute]  # set by Declarations
        return made

    def make(self, registry: CollectorRegistry) -> M:
        kind = _FAST[self.kind]
        made: M = kind(self.name, self.doc, self.labels, registry=registry, **self.options)
        for value in self.zero if len(self.labels) == 1 else ():  # a quality one's: per pair
            made.labels(value)
        return made


class Declarations:
    """A class of declared metrics: each made in the registry, in the order declared (the
    order /metrics shows them in)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        for declared in vars(type(self)).values():
            if isinstance(declared, Declared):
                self.__dict__[declared.attribute] = declared.make(registry)


D = TypeVar("D", bound=Declarations)


def counter(
    name: str, doc: str, labels: Sequence[str] = (), *, zero: str | Iterable[str] = ()
) -> Declared[Counter]:
    """`zero`: the label values at 0 from the start (a string: split at spaces); the help
    text's `{zero}` says them."""
    return Declared(Counter, name, doc, labels, zero=zero)


def gauge(name: str, doc: str, labels: Sequence[str] = ()) -> Declared[Gauge]:
    return Declared(Gauge, name, doc, labels)


def histogram(
    name: str, doc: str, labels: Sequence[str] = (), *, buckets: Sequence[float]
) -> Declared[Histogram]:
    return Declared(Histogram, name, doc, labels, buckets=buckets)


def ratio(name: str, doc: str) -> Declared[Histogram]:
    """A quality ratio in [0, 1], per environment and query type."""
    return histogram(name, doc, Q, buckets=RATIO_BUCKETS)


# Releases (and models) with series of their own at once: the most recently seen.
MAX_RELEASES = 8
RELEASE_FLAGS = ("ungrounded", "unsupported_numbers", "abstained")


class Metrics(Declarations):
    """Every metric of the daemon, declared below as a table; the registry is injected.
    A quality counter (labels environment, query_type and at most one more, whose `zero`
    values it holds) has its series at 0 for each new pair (`quality_labels`)."""

    # fmt: off
    info = gauge("observer_build_info", "observer's version", ("version",))
    # -- answer quality, per environment and query type
    answers = counter("observer_answers_scored_total", "Answers scored (first time per trace)", Q)
    answers_by_band = counter("observer_answers_by_band_total",
        "Answers by confidence band", (*Q, "band"), zero=[band.value for band in Band])
    answers_by_grade = counter("observer_answers_by_crag_grade_total",
        "Answers by recomputed CRAG grade", (*Q, "crag_grade"), zero=[g.value for g in Grade])
    answers_ungrounded = counter("observer_answers_ungrounded_total", "Ungrounded answers", Q)
    answers_fallback = counter("observer_answers_fallback_total",
        "Fallback (no-evidence) answers", Q)
    answers_ghost = counter("observer_answers_ghost_citation_total",
        "Answers citing a source number that does not exist", Q)
    answers_unsupported_numbers = counter("observer_answers_unsupported_numbers_total",
        "Answers holding a number found in none of the sources it rests on", Q)
    answers_abstained = counter("observer_answers_abstained_total",
        "Answers that are refusals (I don't know, 知识库未匹配)", Q)
    answers_over_refusal = counter("observer_answers_over_refusal_total",
        "Refusals although retrieval was HIGH (top1 at or above crag.high)", Q)
    answers_over_cited = counter("observer_answers_over_cited_total",
        "Answers with a sentence citing more than signals.max_refs_per_sentence sources", Q)
    # What changed: the same answers per release and answering model (docs/alerts.md#triage).
    answers_by_release = counter("observer_answers_by_release_total",
        "Answers scored per release and answering model (the most recent ones)", BY_RELEASE)
    answers_flagged_by_release = counter("observer_answers_flagged_by_release_total",
        "Answers per release and model that were ungrounded, held an unsupported number, or "
        "refused", (*BY_RELEASE, "flag"))
    crag_mismatch = counter("observer_crag_grade_mismatches_total",
        "Answers whose app-logged CRAG grade differs from the recomputed one", Q)
    critical_unsupported = counter("observer_critical_unsupported_total",
        "Judged answers with an unsupported claim holding a number, date or amount", Q)
    confidence = ratio("observer_answer_confidence_ratio", "Confidence of answers")
    coverage = ratio("observer_answer_citation_coverage_ratio", "Citation coverage of answers")
    rerank_top1 = ratio("observer_answer_rerank_top1_ratio", "Top rerank score")
    numeric_grounding = ratio("observer_answer_numeric_grounding_ratio",
        "Share of an answer's numbers grounded")
    faithfulness = ratio("observer_answer_faithfulness_ratio",
        "Judge faithfulness of judged answers")
    citation_accuracy = ratio("observer_answer_citation_accuracy_ratio",
        "Judge citation accuracy of judged answers")
    # -- the pipeline
    traces = counter("observer_traces_total",
        "Traces handled by outcome ({zero})", ("outcome",),
        zero="scored rescored unchanged unsettled skipped deferred")
    skips = counter("observer_trace_skips_total",
        "Traces not scored, by reason", ("reason",), zero="no_root no_generation no_answer_text "
        "malformed_sources judge_environment own_trace filtered_environment filtered_name "
        "filtered_tags hook_error hook_skipped hook_invalid malformed_observation_id "
        "mapping_error too_large citations_without_sources sources_unverified too_costly "
        "internal_error")
    provenance = counter("observer_trace_provenance_total",
        "Answer traces read (first time), by trace name, the content checks' verdicts on their "
        "sources and answer, and whether they recorded retrieval scores",
        ("trace_name", "sources", "answer", "scores"))
    scores_enqueued = counter("observer_scores_enqueued_total",
        "Scores written to the outbox", ("name",))
    scores_pushed = counter("observer_scores_pushed_total", "Scores acknowledged by the sink")
    scores_retried = counter("observer_scores_retried_total",
        "Scores whose push failed and that wait in the outbox for another try")
    scores_dropped = counter("observer_scores_dropped_total",
        "Scores given up on, by reason", ("reason",), zero="rejected outbox_full")
    score_fast_path_fallbacks = counter("observer_score_fast_path_fallbacks_total",
        "Times the direct score upload failed outside HTTP and the SDK's public path took over")
    push_errors = counter("observer_score_push_errors_total",
        "Failed score pushes (retried later), by kind", ("kind",),
        zero="rate_limited auth misdirected server_error unreachable")
    outbox = gauge("observer_outbox_scores", "Scores waiting in the outbox")
    request_budget = gauge("observer_request_budget_per_minute",
        "The pace of requests to Langfuse (reads and score posts together) the request budget "
        "allows now: adaptive, settled below Langfuse's limit after a 429")
    source_requests = counter("observer_source_requests_total",
        "Requests to Langfuse's observations API, by result", ("result",),
        zero="ok rate_limited unreachable auth_rejected rejected too_large misdirected")
    observations = counter("observer_observations_read_total", "Observations read from the source")
    watermark_lag = gauge("observer_watermark_lag_seconds",
        "How far the point up to which every trace has been processed trails the clock")
    clock_skew = gauge("observer_clock_skew_seconds",
        "Langfuse's clock (the Date header of its answers) minus this host's")
    slow_ingestion_traces = counter("observer_slow_ingestion_traces_total",
        "Traces from SDKs or exporters whose data Langfuse may ingest up to 15 minutes late")
    scores_deleted = counter("observer_scores_deleted_total",
        "Scores deleted from Langfuse because they no longer apply to their trace")
    trace_to_score = histogram("observer_trace_to_score_seconds",
        "From a trace's last activity (its latest observation time) to Langfuse's "
        "acknowledgement of its scores", buckets=TRACE_TO_SCORE_BUCKETS)
    trace_work = histogram("observer_trace_work_seconds",
        "CPU seconds one trace's mapping and signals took (limits.max_trace_cpu_s bounds it)",
        buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10))
    pass_duration = histogram("observer_pass_duration_seconds",
        "Duration of one poll pass", buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
    passes_failed = counter("observer_passes_failed_total",
        "Poll passes that did not complete, by what stopped them ({zero})", ("kind",),
        zero="unreachable auth config state crashed")
    last_pass = gauge("observer_last_pass_timestamp_seconds",
        "When the last poll pass completed (its moment on Langfuse's clock, Unix time)")
    # -- the citation resolver
    resolver_lookups = counter("observer_resolver_lookups_total", "Queries sent to the chunk store")
    resolver_ids = counter("observer_resolver_chunk_ids_total",
        "Cited chunk ids to check, by where the answer came from (cache, store)", ("source",))
    resolver_errors = counter("observer_resolver_errors_total",
        "Failed chunk store queries, by reason (their traces keep their other scores)", ("reason",))
    resolver_findings = counter("observer_resolver_chunks_total",
        "Cited chunks checked, by finding (missing, stale, unverifiable, fresh)",
        ("environment", "query_type", "finding"))
    # -- the judge
    judge_decisions = counter("observer_judge_decisions_total",
        "Sampling decisions ({zero})", ("decision",),
        zero="sampled risk not_sampled over_budget disabled queue_full")
    judged = counter("observer_judged_traces_total",
        "Traces the judge finished, by result", ("result",),
        zero="judged abstained error abandoned")
    judge_errors = counter("observer_judge_errors_total",
        "Judge errors (no judge score written), by reason", ("reason",),
        zero="rate_limited timeout unreachable server_error bad_request protocol internal")
    judge_agreement = gauge("observer_judge_agreement",
        "The judge against people's labels (judge.human_score), the last hour's read over its "
        "window: kappa, precision, recall on unfaithful answers (NaN: nothing to compute it "
        "from)", ("measure",))
    judge_pairs = gauge("observer_judge_pairs",
        "Answers both judged and labelled by people in the agreement's window")
    judge_canary = gauge("observer_judge_canary",
        "The judge's last run over the canary (judge.canary_file): agreement with its labels, "
        "kappa, flip rate against the run before (NaN: nothing to compute it from)", ("measure",))
    judge_canary_cases = gauge("observer_judge_canary_cases",
        "Canary cases of the last run, with a verdict of the judge or without one", ("verdict",))
    judge_canary_runs = counter("observer_judge_canary_runs_total",
        "Canary runs by result: done, over_budget (waits for the next day), stopped (a "
        "shutdown), no_verdict (no case judged)", ("result",))
    judge_canary_last_run = gauge("observer_judge_canary_last_run_timestamp_seconds",
        "When the canary's last whole run ended (unix seconds)")
    judge_pending = gauge("observer_judge_pending_samples",
        "Samples queued for the judge (kept in the state file across restarts)")
    judge_calls = counter("observer_judge_calls_total", "LLM calls the judge made")
    judge_tokens = counter("observer_judge_tokens_total",
        "Tokens the judge used", ("kind",), zero="prompt completion")
    judge_funnel_claims = counter("observer_judge_funnel_claims_total",
        "Claims marked not cited-supported without an LLM call: every chunk they cite is missing "
        "from the store or changed since the answer")
    judge_cost = counter("observer_judge_cost_usd_total", "Judge cost at the configured prices")
    # -- alerts
    alert_notifications = counter("observer_alert_notifications_total",
        "Alert notifications by notifier and result (sent, failed, dropped)",
        ("notifier", "result"))
    alert_evaluations = counter("observer_alert_evaluations_total",
        "Alert rule evaluations by outcome (ok, pending, firing)", ("rule", "outcome"))
    alerts_active = gauge("observer_alerts_active",
        "Alert groups firing now, by rule, group and severity (query_type capped as the quality "
        "metrics'; a series exists only while its group fires)",
        ("rule", "environment", "query_type", "severity"))
    alert_incidents_open = gauge("observer_alert_incidents_open",
        "Incidents open now, by environment: alerts that share one cause count once "
        "(docs/alerts.md#incidents)", ("environment",))
    trace_alerts = counter("observer_trace_alerts_total",
        "Traces a trace rule raised, by rule and result (notified, digest: kept for the "
        "hourly digest, held: the judge is unhealthy)", ("rule", "result"))
    # fmt: on

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        max_query_types: int = 20,
        max_trace_names: int = 50,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.max_query_types = max_query_types
        self._query_types: set[str] = set()
        self.max_trace_names = max_trace_names
        self._trace_names: set[str] = set()
        self._pairs: set[tuple[str, str]] = set()
        self._labels_lock = threading.Lock()
        # The releases and models seen last, most recent last; a value pushed out takes its
        # series with it (a new release must never land in `other`).
        self._recent = {"release": OrderedDict[str, None](), "model": OrderedDict[str, None]()}
        self._release_series: set[tuple[str, str, str]] = set()
        self._shown: dict[tuple[Gauge, str], set[tuple[str, ...]]] = {}  # see `_show`
        self._parts: dict[type[Declarations], Declarations] = {}  # see `part`
        self._watermark: float | None = None
        self._clock: Callable[[], float] = time.time
        super().__init__(self.registry)
        self._quality = [
            d for d in vars(Metrics).values()
            if isinstance(d, Declared) and d.kind is Counter and d.labels[:2] == Q
            and (d.labels == Q or d.zero)
        ]  # fmt: skip
        self.info.labels(version=__version__).set(1)
        self.watermark_lag.set_function(self._lag)

    def part(self, kind: type[D]) -> D:
        """A room's own metrics, declared beside what they measure (the fleet's, the
        receiver's), registered here on first use: a daemon that never uses them shows none."""
        made = self._parts.get(kind)  # the fleet asks on every entry: no lock once made
        if made is None:
            with self._labels_lock:
                if kind not in self._parts:
                    self._parts[kind] = kind(self.registry)
                made = self._parts[kind]
        return cast(D, made)

    def notifiers_known(self, names: Iterable[str]) -> None:
        """Each configured notifier's notification counters, at 0 from the start."""
        for name in names:
            for result in NOTIFICATION_RESULTS:
                self.alert_notifications.labels(notifier=name, result=result)

    def alert_query_type(self, query_type: str) -> str:
        """An alert group's query_type label, capped as `quality_labels` caps it (the same
        query types keep their name; '' for a rule that does not group by it stays '')."""
        if not query_type:
            return query_type
        with self._labels_lock:
            return _capped(self._query_types, self.max_query_types, label_value(query_type))

    def set_alerts_active(self, rule: str, firing: Mapping[tuple[str, str, str], int]) -> None:
        """The rule's firing groups, by (environment, query_type, severity): how many fire in
        each (several, when capped query types share `other`)."""
        cut: dict[tuple[str, ...], int] = {}
        for (environment, query_type, severity), n in firing.items():
            key = (rule, label_value(environment), query_type, severity)
            cut[key] = cut.get(key, 0) + n
        self._show(self.alerts_active, rule, cut)

    def set_incidents_open(self, by_environment: Mapping[str, int]) -> None:
        """The incidents open now per environment."""
        self._show(self.alert_incidents_open, "", {(e,): n for e, n in by_environment.items()})

    def _show(self, gauge: Gauge, group: str, now: Mapping[tuple[str, ...], int]) -> None:
        """`gauge`'s series of `group` as `now` says; one at 0 or no longer there is removed,
        not left at 0 (a series exists only while what it counts does)."""
        shown = {labels for labels, n in now.items() if n > 0}
        with self._labels_lock:
            before = self._shown.get((gauge, group), set())
            self._shown[(gauge, group)] = shown
        for labels in shown:
            gauge.labels(*labels).set(now[labels])
        for labels in before - shown:
            gauge.remove(*labels)

    # -- the lag ------------------------------------------------------------------

    def _lag(self) -> float:
        mark = self._watermark
        return 0.0 if mark is None else max(0.0, self._clock() - mark)

    def set_watermark(self, unix_s: float | None, clock: Callable[[], float] | None = None) -> None:
        """The lag is computed when read (against `clock`): it grows while observer stalls."""
        if unix_s is not None:
            self._watermark = unix_s
        if clock is not None:
            self._clock = clock

    # -- quality ------------------------------------------------------------------

    def count_provenance(self, trace_name: str, sources: str, answer: str, scores: str) -> None:
        """One answer trace's verdicts; at most `max_trace_names` names, the rest `other`."""
        with self._labels_lock:
            name = label_value(trace_name or "unnamed")
            name = _capped(self._trace_names, self.max_trace_names, name)
        self.provenance.labels(name, sources, answer, scores).inc()  # in declared order

    def quality_labels(self, environment: str | None, query_type: str | None) -> tuple[str, str]:
        """(environment, query_type), the query type capped; new pairs start at 0."""
        env = label_value(environment or "default")
        kind = label_value(query_type or NO_QUERY_TYPE)
        with self._labels_lock:
            kind = _capped(self._query_types, self.max_query_types, kind)
            if (env, kind) not in self._pairs:
                self._pairs.add((env, kind))
                self._zero_quality(env, kind)
        return env, kind

    def _zero_quality(self, env: str, kind: str) -> None:
        for declared in self._quality:
            counter: Counter = getattr(self, declared.attribute)
            for value in declared.zero or [None]:
                counter.labels(env, kind, *([] if value is None else [value]))

    def _release_labels(self, record: RagRecord) -> tuple[str, str, str]:
        """(environment, release, model) of an answer; past `MAX_RELEASES` releases (models),
        the least recently seen one's series are removed."""
        series = (
            label_value(record.environment or "default"),
            label_value(record.release or "none"),
            label_value(record.model or "none"),
        )
        with self._labels_lock:
            for index, recent in ((1, self._recent["release"]), (2, self._recent["model"])):
                recent[series[index]] = None
                recent.move_to_end(series[index])
                while len(recent) > MAX_RELEASES:
                    gone, _ = recent.popitem(last=False)
                    for old in [s for s in self._release_series if s[index] == gone]:
                        self._release_series.discard(old)
                        self.answers_by_release.remove(*old)
                        for flag in RELEASE_FLAGS:
                            self.answers_flagged_by_release.remove(*old, flag)
            if series not in self._release_series:
                self._release_series.add(series)
                self.answers_by_release.labels(*series)
                for flag in RELEASE_FLAGS:
                    self.answers_flagged_by_release.labels(*series, flag)
        return series

    def observe_answer(self, record: RagRecord, signals: Signals) -> None:
        """One newly scored answer into the quality metrics."""
        series = self._release_labels(record)
        self.answers_by_release.labels(*series).inc()
        unsupported = signals.numeric.grounded < signals.numeric.numbers
        flags = zip(
            RELEASE_FLAGS, (signals.ungrounded, unsupported, signals.abstained), strict=True
        )
        for flag, raised in flags:
            if raised:
                self.answers_flagged_by_release.labels(*series, flag).inc()
        env, kind = self.quality_labels(record.environment, record.query_type)
        labels = (env, kind)  # positional: the fast path of `_Series`
        self.answers.labels(*labels).inc()
        if signals.band is not None:
            self.answers_by_band.labels(*labels, signals.band.value).inc()
        if signals.crag is not None:
            self.answers_by_grade.labels(*labels, signals.crag.grade.value).inc()
        counted: tuple[tuple[Counter, Any], ...] = (
            (self.answers_ungrounded, signals.ungrounded),
            (self.answers_fallback, signals.needs_fallback),
            (self.answers_ghost, signals.citations.invalid_refs),
            (self.answers_unsupported_numbers, unsupported),
            (self.crag_mismatch, signals.crag_mismatch),
            (self.answers_abstained, signals.abstained),
            (self.answers_over_refusal, signals.over_refusal),
            (self.answers_over_cited, signals.over_citation),
        )
        for counter, raised in counted:
            if raised:
                counter.labels(*labels).inc()
        # Unknown values (docs/signals.md#unknown-is-not-zero) are no observation.
        observed = (
            (self.confidence, signals.confidence),
            (self.rerank_top1, signals.rerank_top1),
            (self.coverage, signals.citations.coverage),
            (self.numeric_grounding, signals.numeric.ratio),
        )
        for histogram, value in observed:
            if value is not None:
                histogram.labels(*labels).observe(value)

    # -- reading back ---------------------------------------------------------------

    def value(self, name: str, **labels: str) -> float:
        """Current value of a sample (0 when never set), for summaries and tests."""
        found = self.registry.get_sample_value(name, labels or None)
        return float(found) if found is not None else 0.0

    def total(self, name: str) -> float:
        """A sample summed over all its labels (0 when absent)."""
        return sum(
            sample.value
            for family in self.registry.collect()
            for sample in family.samples
            if sample.name == name
        )


def _capped(seen: set[str], limit: int, value: str) -> str:
    """A label value kept to `limit` distinct ones: the first `limit` seen, then `other`."""
    if value not in seen:
        if len(seen) >= limit:
            return OTHER
        seen.add(value)
    return value
