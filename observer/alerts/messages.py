"""What a person reads: engine events and trace hits turned into notifications (pure)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime

from observer.alerts.engine import AlertEvent, Example, GroupKey, Row, Top
from observer.alerts.regression import Finding, RegressionRule
from observer.alerts.rules import TraceRule, WindowRule
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


def triage_brief(triage: Triage) -> str:
    """`release=rc2, query_type=pricing; generation; since 10:10Z` for a summary line."""
    parts: list[str] = []
    if triage.lead is not None:
        parts.append(", ".join(f"{k}={v}" for k, v in triage.lead.where))
    if triage.layer is not None:
        parts.append(triage.layer)
    if triage.onset is not None:
        earlier = " or earlier" if triage.onset_open else ""
        parts.append(f"since {_moment(triage.onset).strftime('%H:%MZ')}{earlier}")
    return "; ".join(parts)


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
    return ", ".join(f"{k}={v}" for k, v in group) or "all traces"


def _moment(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _detail(rule: WindowRule) -> str:
    return (rule.expression.info.detail or "").replace("_", " ")


def top_text(rule: WindowRule, top: Top) -> str:
    """`top skip reason no_answer_text (41 of 52)`: the window's most frequent detail."""
    return f"top {_detail(rule)} {top.value} ({top.count} of {top.of})"


def window_notification(
    rule: WindowRule,
    event: AlertEvent,
    base_url: str,
    sent_at: datetime,
    *,
    state: NotificationState | None = None,
    severity: str | None = None,
    triage: Triage | None = None,
    layer: str | None = None,
) -> Notification:
    """A window rule's transition (or, with `state`/`severity`, a refresh or a close);
    a firing one carries its `triage`, when the caller made one."""
    resolved = (state or ("resolved" if event.transition == "resolved" else "firing")) == "resolved"
    level: Severity = "page" if (severity or event.severity) == "page" else "warn"
    measured = f"{rule.aggregate}({rule.expression})"
    where = group_text(event.group)
    threshold = rule.threshold if level == "page" else (rule.warn_threshold or rule.threshold)
    window = format_duration(rule.window_s)
    if event.transition == "no_data":
        summary = f"{rule.name}: no data for {format_duration(rule.no_data_for_s)} ({where})"
        description = (
            f"No sample of {rule.expression} in {where} for {format_duration(rule.no_data_for_s)}:"
            " the service may be down, or observer may not be reading its traces."
        )
    elif resolved:
        summary = f"resolved: {rule.name} ({where})"
        description = (
            f"{measured} is {_number(event.value)} over the last {window} "
            f"({event.samples} samples), back within {rule.op} {threshold:g}. "
            f"It had fired since {iso(_moment(event.since))}."
        )
    else:
        summary = (
            f"{rule.name}: {measured} {_number(event.value)} {rule.op} {threshold:g} ({where})"
        )
        warn = (
            f", warning {rule.op} {rule.warn_threshold:g}"
            if rule.warn_threshold is not None
            else ""
        )
        description = (
            f"{measured} is {_number(event.value)} over the last {window} in event time "
            f"({event.samples} samples); page {rule.op} {rule.threshold:g}{warn}. "
            f"Severity {level} since {iso(_moment(event.since))}."
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
        if triage is not None:
            brief = triage_brief(triage)
            if brief:
                summary += f" [{brief}]"
    if resolved or event.transition == "no_data":
        triage = None
    examples = triage.examples if triage is not None and triage.examples else event.examples
    key = dedup_key(rule.name, event.group)
    transition = state or event.transition
    return Notification(
        id=message_id(key, f"{transition}:{level}", event.at),
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
    )


def trace_notification(rule: TraceRule, row: Row, base_url: str, sent_at: datetime) -> Notification:
    """One trace that meets a trace rule, notified at once."""
    assert row.trace_id is not None
    group: GroupKey = (("environment", row.environment), ("query_type", row.query_type))
    example = Example(row.trace_id, row.project_id, 1.0)
    key = dedup_key(rule.name, (*group, ("trace_id", row.trace_id)))
    return Notification(
        id=message_id(key, "trace", row.at),
        dedup_key=key,
        rule=rule.name,
        kind="trace",
        state="firing",
        severity="page",
        group=group,
        summary=f"{rule.name}: trace {row.trace_id} ({group_text(group)})",
        description=f"Trace {row.trace_id} meets {rule.expression}.",
        started_at=_moment(row.at),
        sent_at=sent_at,
        signal=str(rule.expression),
        value=rule.expression.value(row.values),
        trace_urls=trace_urls(base_url, [example]),
        runbook_url=rule.runbook_url,
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
    )


def regression_notification(
    rule: RegressionRule,
    group: GroupKey,
    finding: Finding | None,
    at: float,
    since: float,
    base_url: str,
    sent_at: datetime,
) -> Notification:
    """A new release worse than the one before it (`finding`), or that finding resolved
    (None: the comparison no longer holds)."""
    key = dedup_key(rule.name, group)
    labels = dict(group)
    where = group_text(tuple((k, v) for k, v in group if k != "signal"))
    signal = labels.get("signal")
    if finding is None:
        summary = f"resolved: {rule.name} ({where}, {signal})"
        description = (
            f"{rule.dimension} {labels.get(rule.dimension)} is no longer worse than the one "
            f"before it on {signal} (fixed, or replaced). It had fired since "
            f"{iso(_moment(since))}."
        )
    else:
        summary = f"{rule.name}: {finding.text(rule.dimension)} ({where})"
        description = (
            f"{finding.aggregate}({finding.signal}) is {finding.value:.4g} on "
            f"{rule.dimension} {finding.new} against {finding.before_value:.4g} on "
            f"{finding.before} ({finding.samples} and {finding.before_samples} samples, "
            f"z = {finding.z:.3g}); a {rule.dimension} pages when it is worse by at least "
            f"{rule.min_effect:g} with z >= {rule.z_floor:g}, whatever the absolute thresholds."
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
    )
