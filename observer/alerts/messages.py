"""What a person reads: engine events, trace hits and release findings turned into
notifications (pure). Every sentence is true in its words (observer.alerts.notifiers._text):
a resolve says the value is below (or above) its line, a number is finite or not told, a
row without a dimension reads as people say it, one moment is "since", and the layer is
named or said to be unclear, with why."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from datetime import UTC, datetime

from observer.alerts.engine import AlertEvent, Example, GroupKey, Row, Top
from observer.alerts.notifiers._text import (
    brief,
    layer_note,
    line_words,
    number,
    number_against,
    where_text,
)
from observer.alerts.regression import Finding, RegressionRule
from observer.alerts.rules import JUDGE_HEALTH_RULES, TraceRule, WindowRule
from observer.alerts.triage import UNPLACED, place
from observer.state.rows import (
    Notification,
    NotificationKind,
    NotificationState,
    Severity,
    Triage,
)
from observer.times import format_duration, iso

# What to do first, by the signal a firing rule watches.
ADVICE: dict[str, str] = {
    "skipped": (
        "The traces may have changed shape (an instrumentation upgrade?): run "
        "`observer discover` to see what observer finds in them and the [mapping] "
        "that reads them; `observer explain TRACE_ID` shows one trace."
    ),
}
# Why an alert without a triage names no layer.
NO_DATA_NOTE = (
    "no samples arrive, so none can be placed (the service may be down, or observer may "
    "not be reading its traces)"
)
NO_TRIAGE_NOTE = "its triage could not read the history (logged as alert_triage_failed)"
DIGEST_NOTE = "a digest only counts the traces; each one notified on its own named its layer"


def dedup_key(rule: str, group: GroupKey) -> str:
    """Stable for a rule and group, across messages, replicas and restarts."""
    described = rule + "|" + "|".join(f"{k}={v}" for k, v in group)
    return "observer-" + hashlib.sha256(described.encode()).hexdigest()[:32]


def message_id(key: str, transition: str, at: float) -> str:
    """Unique per message, and the same when the same message is rebuilt."""
    return "msg_" + hashlib.sha256(f"{key}|{transition}|{at:.3f}".encode()).hexdigest()[:24]


def trace_url(base_url: str, example: Example) -> str | None:
    if not example.project_id:
        return None
    return f"{base_url.rstrip('/')}/project/{example.project_id}/traces/{example.trace_id}"


def trace_urls(base_url: str, examples: Sequence[Example]) -> tuple[str, ...]:
    return tuple(u for e in examples if (u := trace_url(base_url, e)) is not None)


def group_text(group: GroupKey) -> str:
    return where_text(group, "all traces")


def _moment(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)


def _detail(rule: WindowRule) -> str:
    return (rule.expression.info.detail or "").replace("_", " ")


def top_text(rule: WindowRule, top: Top) -> str:
    """`top skip reason no_answer_text (41 of 52)`: the window's most frequent detail."""
    return f"top {_detail(rule)} {top.value} ({top.count} of {top.of})"


def layer_of_window(
    rule: WindowRule, transition: str, triage: Triage | None
) -> tuple[str | None, str | None]:
    """The layer a firing window alert names, or None and why (`Notification.layer_note`):
    `judge` for the judge's health rules (the eval owner's route), `pipeline` for the
    daemon's own samples, else its triage's."""
    if rule.name in JUDGE_HEALTH_RULES:
        return "judge", None
    if rule.pipeline:
        return "pipeline", None
    if transition == "no_data":
        return None, NO_DATA_NOTE
    if triage is None:
        return None, NO_TRIAGE_NOTE
    if triage.layer is not None:
        return triage.layer, None
    return None, layer_note(triage)


def _measured(rule: WindowRule) -> str:
    return f"{rule.aggregate}({rule.expression})"


def _resolved_text(rule: WindowRule, event: AlertEvent, where: str) -> tuple[str, str, float]:
    """A resolve's summary and description, and the line it is back within (its warning
    line when it has one: the first it crosses)."""
    line = rule.warn_threshold if rule.warn_threshold is not None else rule.threshold
    window = format_duration(rule.window_s)
    if event.value is None or not math.isfinite(event.value):
        state = f"no sample of {rule.expression} in the last {window}"
        summary = f"resolved: {rule.name} ({where}): no samples"
    else:
        state = (
            f"{_measured(rule)} is {line_words(rule.op, line, event.value)}, over the last "
            f"{window} ({event.samples} samples)"
        )
        summary = f"resolved: {rule.name} ({where}): {line_words(rule.op, line, event.value)}"
    return summary, f"{state}. It fired at {iso(_moment(event.since))}.", line


def _firing_text(
    rule: WindowRule, event: AlertEvent, where: str, threshold: float, level: str
) -> tuple[str, str]:
    measured = _measured(rule)
    value = "n/a" if event.value is None else number_against(event.value, threshold)
    summary = f"{rule.name}: {measured} {value} {rule.op} {threshold:g} ({where})"
    warn = f", warning {rule.op} {rule.warn_threshold:g}" if rule.warn_threshold is not None else ""
    description = (
        f"{measured} is {number(event.value)} over the last {format_duration(rule.window_s)} "
        f"in event time ({event.samples} samples); page {rule.op} {rule.threshold:g}{warn}. "
        f"Severity {level}, fired at {iso(_moment(event.since))}."
    )
    if event.top is not None:
        top = event.top
        summary += f", {top_text(rule, top)}"
        description += (
            f" Top {_detail(rule)}: {top.value}, {top.count} of the {top.of} "
            f"{rule.expression.signal} traces in the window."
        )
    advice = ADVICE.get(rule.expression.signal)
    if advice is not None:
        description += f" {advice}"
    return summary, description


def window_notification(
    rule: WindowRule,
    event: AlertEvent,
    base_url: str,
    sent_at: datetime,
    *,
    transition: str | None = None,
    severity: str | None = None,
    triage: Triage | None = None,
    layer: str | None = None,
    layer_note: str | None = None,
) -> Notification:
    """A window rule's transition, or (`transition`) an Alertmanager re-post (`refresh`),
    the close of its old severity (`closing`, with that `severity`) or a held alert told
    (`released`); a firing one carries its `triage`, when the caller made one."""
    told = transition or event.transition
    resolved = told in ("resolved", "closing")
    level: Severity = "page" if (severity or event.severity) == "page" else "warn"
    where = group_text(event.group)
    threshold = rule.threshold if level == "page" else (rule.warn_threshold or rule.threshold)
    if told == "no_data":
        summary = f"{rule.name}: no data for {format_duration(rule.no_data_for_s)} ({where})"
        description = (
            f"No sample of {rule.expression} in {where} for {format_duration(rule.no_data_for_s)}:"
            " the service may be down, or observer may not be reading its traces."
        )
    elif told == "resolved":
        summary, description, threshold = _resolved_text(rule, event, where)
    elif told == "closing":
        summary = f"{rule.name}: now {event.severity}, no longer {level} ({where})"
        description = (
            f"{_measured(rule)} is {number(event.value)}: the alert is {event.severity} now; "
            f"this closes its {level} alert."
        )
    else:
        summary, description = _firing_text(rule, event, where, threshold, level)
        if triage is not None:
            summary += f" [{brief(triage)}]"
        if told == "released":
            description += " It was held while the judge was unhealthy; the judge is healthy again."
    if resolved or told == "no_data":
        triage = None
    examples = triage.examples if triage is not None and triage.examples else event.examples
    key = dedup_key(rule.name, event.group)
    return Notification(
        id=message_id(key, f"{told}:{level}", event.at),
        dedup_key=key,
        rule=rule.name,
        kind="window",
        state="resolved" if resolved else "firing",
        severity=level,
        group=event.group,
        summary=summary,
        description=description,
        started_at=_moment(event.since),
        sent_at=sent_at,
        ended_at=_moment(event.at) if resolved else None,
        signal=str(rule.expression),
        aggregate=rule.aggregate,
        value=event.value,
        op=rule.op,
        threshold=threshold,
        window_s=rule.window_s,
        samples=event.samples,
        trace_urls=trace_urls(base_url, examples),
        runbook_url=rule.runbook_url,
        triage=triage,
        layer=layer,
        layer_note=None if layer is not None else layer_note,
        transition=told,
    )


def trace_notification(rule: TraceRule, row: Row, base_url: str, sent_at: datetime) -> Notification:
    """One trace that meets a trace rule, notified at once; its layer by the same rules a
    triage places a bad sample by."""
    assert row.trace_id is not None
    group: GroupKey = (("environment", row.environment), ("query_type", row.query_type))
    example = Example(row.trace_id, row.project_id, 1.0)
    key = dedup_key(rule.name, (*group, ("trace_id", row.trace_id)))
    placed = place(row.values)
    layer = None if placed in UNPLACED else placed
    value = rule.expression.value(row.values)
    return Notification(
        id=message_id(key, "trace", row.at),
        dedup_key=key,
        rule=rule.name,
        kind="trace",
        state="firing",
        severity="page",
        group=group,
        summary=f"{rule.name}: trace {row.trace_id} ({group_text(group)})",
        description=(
            f"Trace {row.trace_id} meets {rule.expression} (answered at {iso(_moment(row.at))})."
        ),
        started_at=_moment(row.at),
        sent_at=sent_at,
        signal=str(rule.expression),
        value=value,
        trace_urls=trace_urls(base_url, [example]),
        runbook_url=rule.runbook_url,
        layer=layer,
        layer_note=None if layer is not None else UNPLACED[placed],
    )


def digest_notification(
    rule: TraceRule,
    hour: str,
    suppressed: int,
    examples: Sequence[Example],
    base_url: str,
    sent_at: datetime,
) -> Notification:
    """The traces of one hour past `max_per_hour`, summed up in one message."""
    key = dedup_key(rule.name, (("digest", hour),))
    kind: NotificationKind = "digest"
    return Notification(
        id=message_id(key, "digest", 0.0),
        dedup_key=key,
        rule=rule.name,
        kind=kind,
        state="firing",
        severity="page",
        group=(),
        summary=f"{rule.name}: {suppressed} more traces in the hour from {hour}:00Z",
        description=(
            f"{suppressed} traces met {rule.expression} in the hour from {hour}:00Z after the "
            f"first {rule.max_per_hour} were notified one by one (max_per_hour)."
        ),
        started_at=datetime.fromisoformat(f"{hour}:00:00+00:00"),
        sent_at=sent_at,
        signal=str(rule.expression),
        value=float(suppressed),
        samples=suppressed,
        trace_urls=trace_urls(base_url, examples),
        runbook_url=rule.runbook_url,
        layer_note=DIGEST_NOTE,
    )


def _spread(finding: Finding) -> str:
    """How sure the comparison is, in words: the z when it is finite."""
    samples = f"{finding.samples} and {finding.before_samples} samples"
    if math.isfinite(finding.z):
        return f"{samples}, z = {finding.z:.3g}"
    return f"{samples}; every sample within each release alike, so the difference is certain"


def regression_notification(
    rule: RegressionRule,
    group: GroupKey,
    finding: Finding | None,
    at: float,
    since: float,
    base_url: str,
    sent_at: datetime,
    *,
    layer: str | None = None,
    layer_note: str | None = None,
) -> Notification:
    """A new release worse than the one before it (`finding`), or that finding resolved
    (None: the comparison no longer holds)."""
    key = dedup_key(rule.name, group)
    labels = dict(group)
    where = group_text(tuple((k, v) for k, v in group if k != "signal"))
    signal = labels.get("signal", "its signals")
    release = labels.get(rule.dimension, f"the new {rule.dimension}")
    if finding is None:
        summary = f"resolved: {rule.name} ({where}, {signal})"
        description = (
            f"{rule.dimension} {release} is no longer worse than the one before it on "
            f"{signal} (fixed, or replaced). It fired at {iso(_moment(since))}."
        )
    else:
        summary = f"{rule.name}: {finding.text(rule.dimension)} ({where})"
        description = (
            f"{finding.aggregate}({finding.signal}) is {number(finding.value)} on "
            f"{rule.dimension} {finding.new} against {number(finding.before_value)} on "
            f"{finding.before} ({_spread(finding)}); a {rule.dimension} pages when it is "
            f"worse by at least {rule.min_effect:g} with z >= {rule.z_floor:g}, whatever "
            "the absolute thresholds."
        )
    state: NotificationState = "resolved" if finding is None else "firing"
    return Notification(
        id=message_id(key, state, at),
        dedup_key=key,
        rule=rule.name,
        kind="window",
        state=state,
        severity="page",
        group=group,
        summary=summary,
        description=description,
        started_at=_moment(since),
        sent_at=sent_at,
        ended_at=_moment(at) if finding is None else None,
        signal=signal,
        aggregate=finding.aggregate if finding is not None else None,
        value=finding.value if finding is not None else None,
        samples=finding.samples if finding is not None else None,
        trace_urls=trace_urls(base_url, finding.examples) if finding is not None else (),
        runbook_url=rule.runbook_url,
        layer=layer,
        layer_note=None if layer is not None else layer_note,
        transition=state,
    )
