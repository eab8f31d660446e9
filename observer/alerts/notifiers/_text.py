"""Wording every notifier and every message shares (pure): true in its words.

- A value is told against its line with digits enough that the two differ:
  `0.02996, below the 0.03 line`, never `0.03 > 0.03`; a resolve says the value is
  below (or above) the line, never that it still crosses it.
- A number is finite or not told: never `inf`, `nan` or `None` in a message.
- A row without a value of a dimension reads as people say it: `uncited answers`,
  not `top_doc=none`.
- One moment is called "since" in a message: when the change began (the triage's
  onset), else when the alert fired; the firing time is said as "fired at".
- The layer is always named, or "layer unclear" with why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime

from observer.state.rows import GroupKey, Notification, Segment, Triage

# How a row without a value of a dimension reads (`release=none` is internal).
NO_VALUE: dict[str, str] = {
    "top_doc": "uncited answers",
    "release": "traces without a release",
    "version": "traces without a version",
    "model": "answers without a model name",
    "prompt": "answers without a Langfuse prompt",
    "query_type": "no query type",
    "trace_name": "unnamed traces",
    "environment": "no environment",
}
NONE = "none"

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
    "judge": "the LLM judge itself (its errors, its agreement with people): the eval "
    "owner's, not the RAG service's",
    "pipeline": "observer's own pipeline (its lag, the scores it could not deliver): "
    "look at observer and Langfuse, not at the answers",
}
# Why a bad sample could not be placed in a layer (`Triage.unclear`).
UNCLEAR_TEXT: dict[str, str] = {
    "no_retrieval_score": "their traces recorded no retrieval score, so their retrieval "
    "grade is unknown",
    "ambiguous": "their retrieval was AMBIGUOUS",
    "refused_without_evidence": "they refused with retrieval LOW (right to: no evidence)",
}


def iso(moment: datetime) -> str:
    """RFC 3339 in UTC with a `Z` (naive times are taken as UTC), as every receiver parses it."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def finite(value: float | None) -> float | None:
    """None for NaN and infinities: JSON has neither, and a receiver would refuse the body."""
    return value if value is not None and math.isfinite(value) else None


def number(value: float | None) -> str:
    """Four significant digits, no exponent for the values signals take (0.4213, 0.6, 1200);
    `n/a` for no value or one that is not finite."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.4g}"


def number_against(value: float, line: float) -> str:
    """`value` with digits enough to tell it from `line` (0.02996 against 0.03, not 0.03)."""
    if not math.isfinite(value):
        return "n/a"
    for digits in range(4, 16):
        shown = f"{value:.{digits}g}"
        if value == line or float(shown) != line:
            return shown
    return repr(value)


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


def line_words(op: str, line: float, value: float) -> str:
    """Where a value that no longer crosses `op line` stands, in true words:
    `0.02996, below the 0.03 line`."""
    shown = number_against(value, line)
    edge = f"{line:g}"
    if op in ("==", "!="):
        return f"{shown}, equal to {edge}" if value == line else f"{shown}, not {edge}"
    if value == line:
        return f"{shown}, at the {edge} line"
    side = "below" if value < line else "above"
    return f"{shown}, {side} the {edge} line"


def condition(notification: Notification) -> str | None:
    """Firing: `0.42 < 0.6` (value, op, line); resolved: `0.02996, below the 0.03 line`;
    None when the notification has no value."""
    n = notification
    if n.value is None or not math.isfinite(n.value):
        return None
    if n.op is None or n.threshold is None:
        return number(n.value)
    if n.state == "resolved":
        return line_words(n.op, n.threshold, n.value)
    return f"{number_against(n.value, n.threshold)} {n.op} {n.threshold:g}"


def pair_text(key: str, value: str) -> str:
    """`release=2026.12.03-rc2`; a row without a value as people say it (`uncited answers`)."""
    if value == NONE:
        return NO_VALUE.get(key, f"no {key.replace('_', ' ')}")
    return f"{key}={value}"


def where_text(pairs: Iterable[tuple[str, str]], empty: str = "all") -> str:
    """`environment=production, no query type`; `empty` for none."""
    return ", ".join(pair_text(k, v) for k, v in pairs) or empty


def group_text(notification: Notification) -> str:
    """`environment=production, query_type=billing`, or `all` for an ungrouped rule."""
    return where_text(notification.group)


def segment_where(segment: Segment) -> str:
    """`release=2026.12.03-rc2 and query_type=pricing`, `uncited answers`."""
    return " and ".join(pair_text(k, v) for k, v in segment.where)


def state_word(notification: Notification) -> str:
    """`FIRING`, `STILL FIRING` (a repeat), `RESOLVED`; inside an incident `JOINED` (a later
    symptom) and `INCIDENT RESOLVED` (its last symptom ended); `TEST` for the test."""
    n = notification
    if n.kind == "test":
        return "TEST" if n.state == "firing" else "TEST RESOLVED"
    several = n.incident is not None and len(n.incident.symptoms) > 1
    if n.role == "joined":
        return "JOINED"
    if n.state == "resolved":
        return "INCIDENT RESOLVED" if n.role == "resolved" and several else "RESOLVED"
    return "STILL FIRING" if n.transition == "renotified" else "FIRING"


def _percent(share: float) -> str:
    return f"{share * 100:.0f}%"


def segment_text(aggregate: str | None, segment: Segment) -> str:
    """`release=rc2 and query_type=pricing: 140 samples, 89% bad against 3% in the rest
    (mean 0.556 against 0.984), 93% of the bad samples`."""
    measured = ""
    if finite(segment.value) is not None and finite(segment.rest_value) is not None:
        measured = (
            f" ({aggregate or 'value'} {number(segment.value)} against "
            f"{number(segment.rest_value)})"
        )
    return (
        f"{segment_where(segment)}: {segment.samples} samples, {_percent(segment.bad_rate)} "
        f"bad against {_percent(segment.rest_bad_rate)} in the rest{measured}, "
        f"{_percent(segment.share)} of the bad samples"
    )


def brief(triage: Triage) -> str:
    """`release=rc2, query_type=pricing; generation; since 10:10Z` for a summary line."""
    parts: list[str] = []
    if triage.lead is not None:
        parts.append(", ".join(pair_text(k, v) for k, v in triage.lead.where))
    elif triage.whole_group:
        parts.append("the whole group")
    parts.append(triage.layer or "layer unclear")
    if triage.onset is not None:
        earlier = " or earlier" if triage.onset_open else ""
        moment = datetime.fromtimestamp(triage.onset, UTC)
        parts.append(f"since {moment.strftime('%H:%MZ')}{earlier}")
    return "; ".join(parts)


def triage_text(triage: Triage, aggregate: str | None) -> list[str]:
    """A triage as sentences: where, since when (whose is `layer_line`'s)."""
    bad = triage.bad_when or "bad"
    lines: list[str] = []
    lead = triage.lead
    if lead is not None:
        lines.append(f"Where: {segment_text(aggregate, lead)} (bad: {bad}).")
        others = [s for s in triage.segments[1:] if s.where[0] not in lead.where]
        lines.extend(f"Also: {segment_text(aggregate, s)}." for s in others[:2])
    elif triage.whole_group:
        lines.append(
            f"Where: the whole group: all {triage.samples} samples are bad ({bad}); no "
            "segment can stand out against the rest."
        )
    elif triage.bad == 0:
        lines.append(f"Where: none of the {triage.samples} samples is bad by itself ({bad}).")
    else:
        lines.append(
            f"Where: no segment stands out; the {triage.bad} bad samples ({bad}) of "
            f"{triage.samples} are spread over the group."
        )
    if triage.onset is not None:
        began = iso(datetime.fromtimestamp(triage.onset, UTC))
        lines.append(
            f"Since: {began} or earlier (the history read begins there)."
            if triage.onset_open
            else f"Since: {began} (when the change began)."
        )
    return lines


def layer_note(triage: Triage) -> str:
    """Why a triage names no layer, in words."""
    if triage.layer_shares and not triage.unclear:
        mixed = ", ".join(f"{name} {_percent(v)}" for name, v in triage.layer_shares)
        return f"no layer holds most of the bad samples ({mixed})"
    if triage.unclear:
        placed = sum(n for _, n in triage.unclear)
        reasons = "; ".join(
            f"{n} {UNCLEAR_TEXT.get(why, why.replace('_', ' '))}" for why, n in triage.unclear
        )
        mixed = ", ".join(f"{name} {_percent(v)}" for name, v in triage.layer_shares)
        told = f" (the others: {mixed})" if mixed else ""
        return f"{placed} of the bad samples cannot be placed: {reasons}{told}"
    return "there is no bad sample to place"


def layer_line(notification: Notification) -> str | None:
    """`Layer: generation (97% of the bad samples): ...` or `Layer unclear: why.`; None for
    a test."""
    n = notification
    if n.kind == "test":
        return None
    if n.layer is not None:
        share = ""
        if n.triage is not None and n.triage.layer == n.layer:
            told = dict(n.triage.layer_shares).get(n.layer)
            share = f" ({_percent(told)} of the bad samples)" if told is not None else ""
        meaning = LAYER_TEXT.get(n.layer, n.layer)
        return f"Layer: {n.layer}{share}: {meaning}."
    return f"Layer unclear: {n.layer_note or 'nothing the message carries places it'}."


def what_changed(n: Notification) -> list[str]:
    """A notification's triage (where, since when) and its layer, as sentences."""
    lines = [] if n.triage is None else triage_text(n.triage, n.aggregate)
    layer = layer_line(n)
    return [*lines, layer] if layer is not None else lines


def incident_lines(n: Notification) -> list[str]:
    """The incident a message belongs to, when it has other symptoms: its cause, when the
    change began, and each symptom's state."""
    incident = n.incident
    if incident is None or (len(incident.symptoms) < 2 and not incident.cause):
        return []
    cause = where_text(incident.cause, "no shared cause")
    began = datetime.fromtimestamp(incident.since, UTC).strftime("%H:%MZ")
    state = "open" if incident.open else "resolved"
    head = (
        f"Incident {incident.id[-8:]} ({state}): cause {cause} in "
        f"{incident.environment or 'every environment'}, began {began}; "
        f"{len(incident.firing)} of {len(incident.symptoms)} symptoms firing."
    )
    return [
        head,
        *(f"- {symptom_text(s.rule, s.group, s.firing, s.severity)}" for s in incident.symptoms),
    ]


def symptom_text(rule: str, group: GroupKey, firing: bool, severity: str) -> str:
    where = where_text([p for p in group if p[0] != "environment"], "")
    state = severity if firing else "resolved"
    return f"{rule}" + (f" ({where})" if where else "") + f": {state}"
