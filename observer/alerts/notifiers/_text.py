"""Wording and timestamps every notifier formats the same way (pure)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from observer.state.rows import Notification, Segment, Triage


def iso(moment: datetime) -> str:
    """RFC 3339 in UTC with a `Z` (naive times are taken as UTC), as every receiver parses it."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def finite(value: float | None) -> float | None:
    """None for NaN and infinities: JSON has neither, and a receiver would refuse the body."""
    return value if value is not None and math.isfinite(value) else None


def number(value: float) -> str:
    """Four significant digits, no exponent for the values signals take (0.4213, 0.6, 1200)."""
    return f"{value:.4g}"


def duration(seconds: float) -> str:
    """`90s`, `15m`, `1h`, `1h30m`, `2d`: how a rule's window reads in a message."""
    total = round(seconds)
    if total < 120 and total % 60:
        return f"{total}s"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if n
    ]
    return "".join(parts) or "0s"


def condition(notification: Notification) -> str | None:
    """`0.42 < 0.6` (value, op, threshold), or None when the notification has no value."""
    n = notification
    if n.value is None:
        return None
    if n.op is None or n.threshold is None:
        return number(n.value)
    return f"{number(n.value)} {n.op} {number(n.threshold)}"


def group_text(notification: Notification) -> str:
    """`environment=production, query_type=billing`, or `all` for an ungrouped rule."""
    return ", ".join(f"{key}={value}" for key, value in notification.group) or "all"


def state_word(notification: Notification) -> str:
    """`FIRING` or `RESOLVED`; `TEST` (`TEST RESOLVED`) for `observer alerts test`'s alert."""
    word = "RESOLVED" if notification.state == "resolved" else "FIRING"
    if notification.kind == "test":
        return "TEST" if notification.state == "firing" else "TEST RESOLVED"
    return word


# Whose it is: what each layer means for the person paged (docs/alerts.md#triage).
LAYER_TEXT: dict[str, str] = {
    "retrieval": "retrieval did not find the right chunks (CRAG LOW): look at the index, "
    "the embedder and the query rewrite before the prompt",
    "generation": "retrieval was HIGH, yet the answers fail: the model did not stay on its "
    "evidence; look at the prompt, the model and the release before the index",
    "index": "cited chunks are missing or changed in the vector store: the store changed "
    "under the answers (a re-index, a deletion)",
    "abstention": "the answers refused while retrieval was HIGH: over-refusal; look at the "
    "prompt's refusal instructions and the model",
}


def _percent(share: float) -> str:
    return f"{share * 100:.0f}%"


def segment_text(aggregate: str | None, segment: Segment) -> str:
    """`release=rc2 and query_type=pricing: 140 samples, 89% bad against 3% in the rest
    (mean 0.556 against 0.984), 93% of the bad samples`."""
    measured = ""
    if segment.value is not None and segment.rest_value is not None:
        measured = (
            f" ({aggregate or 'value'} {number(segment.value)} against "
            f"{number(segment.rest_value)})"
        )
    return (
        f"{segment.text()}: {segment.samples} samples, {_percent(segment.bad_rate)} bad against "
        f"{_percent(segment.rest_bad_rate)} in the rest{measured}, "
        f"{_percent(segment.share)} of the bad samples"
    )


def triage_lines(n: Notification) -> list[str]:
    """A notification's triage as sentences (where, since when, whose); none without one."""
    return [] if n.triage is None else triage_text(n.triage, n.aggregate)


def triage_text(triage: Triage, aggregate: str | None) -> list[str]:
    """A triage as sentences: where, since when, whose."""
    bad = triage.bad_when or "bad"
    lines: list[str] = []
    lead = triage.lead
    if lead is None:
        lines.append(
            f"Where: no segment stands out; the {triage.bad} bad samples ({bad}) of "
            f"{triage.samples} are spread over the group."
        )
    else:
        lines.append(f"Where: {segment_text(aggregate, lead)} (bad: {bad}).")
        others = [s for s in triage.segments[1:] if s.where[0] not in lead.where]
        lines.extend(f"Also: {segment_text(aggregate, s)}." for s in others[:2])
    if triage.onset is not None:
        began = iso(datetime.fromtimestamp(triage.onset, UTC))
        lines.append(
            f"Since: {began} or earlier (the history read begins there)."
            if triage.onset_open
            else f"Since: {began} (when the change began)."
        )
    if triage.layer is not None:
        share = dict(triage.layer_shares).get(triage.layer, 0.0)
        lines.append(
            f"Layer: {triage.layer} ({_percent(share)} of the bad samples): "
            f"{LAYER_TEXT[triage.layer]}."
        )
    elif triage.layer_shares:
        mixed = ", ".join(f"{name} {_percent(v)}" for name, v in triage.layer_shares)
        lines.append(f"Layer: none holds most of the bad samples ({mixed}).")
    return lines
