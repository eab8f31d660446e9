"""The window-rule engine: history rows and rule state in, new state and transitions out.

Pure and deterministic: no clock, no I/O. `evaluate` is called with the
evaluation point `at` (unix seconds): for signals of traces the watermark (the
point up to which every trace has been processed, so a lagging daemon never
judges a half-empty window), for the daemon's own samples (`lag_s`,
`scores_dropped`) the clock. The daemon, `observer alerts status` and
`observer alerts backtest` all run this same function.

Per rule and group, a state machine::

    ok --breach--> pending --held `for`--> firing(warn|page) --clear--> ok (resolved)
                     |                      |  repeat: renotified; warn->page after `for`:
                     +--clear--> ok         |  escalated; page->warn: deescalated
    no samples for `no_data_for`: keep (hold) | ok (resolve) | alert (fire, severity page;
    resolved when samples return, a breach among them then pending on its own)

Fewer than `min_samples` samples in the window is no verdict: the state is
held as it is and never pages.

A signal with a detail (`skipped`, whose rows name their `skip_reason`) has
its most frequent detail among the window's true samples told with every
event and firing group (`Top`): what a person must look at first.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from observer.alerts.rules import WindowRule
from observer.state.rows import AlertState as AlertState
from observer.state.rows import Example as Example
from observer.state.rows import GroupKey as GroupKey
from observer.state.rows import Row as Row
from observer.state.rows import Status as Status

Transition = Literal[
    "pending", "cleared", "firing", "renotified", "escalated", "deescalated", "resolved", "no_data"
]
# Transitions a person is told about; `pending` and `cleared` only change the state.
NOTIFYING: frozenset[str] = frozenset(
    {"firing", "renotified", "escalated", "deescalated", "resolved", "no_data"}
)
MAX_EXAMPLES = 5
# Under alerts.max_groups, a firing group is never displaced: dropped, it would never resolve.
_KEEP_FIRST: Mapping[str, int] = {"firing": 0, "pending": 1, "ok": 2}


@dataclass(frozen=True, slots=True)
class Top:
    """The most frequent detail among a window's true samples: `count` of `of` of them."""

    value: str
    count: int
    of: int


@dataclass(frozen=True, slots=True)
class AlertEvent:
    rule: str
    group: GroupKey
    transition: Transition
    at: float
    severity: str
    previous_severity: str | None
    value: float | None
    samples: int
    since: float  # when the alert started (for a resolve: when it had started firing)
    examples: tuple[Example, ...] = ()
    top: Top | None = None  # the window's most frequent detail (the top skip reason)

    @property
    def notify(self) -> bool:
        return self.transition in NOTIFYING


@dataclass
class Evaluation:
    states: dict[GroupKey, AlertState] = field(default_factory=dict)
    events: list[AlertEvent] = field(default_factory=list)
    capped: int = 0  # groups left out by max_groups
    # The worst traces of every firing group (alerts re-posted while firing link them too).
    examples: dict[GroupKey, tuple[Example, ...]] = field(default_factory=dict)
    # The most frequent detail of every firing group, for a signal with one.
    tops: dict[GroupKey, Top] = field(default_factory=dict)


def aggregate(name: str, values: Sequence[float]) -> float:
    """mean | rate | count | p50 | p95 | min | max of a non-empty list."""
    if name in ("mean", "rate"):
        # The division rounds once more: 43 samples of 0.8 give 0.7999999999999999, which
        # crosses `< 0.8`. A mean never lies outside its samples.
        return min(max(math.fsum(values) / len(values), min(values)), max(values))
    if name == "count":
        return math.fsum(values)
    if name == "min":
        return min(values)
    if name == "max":
        return max(values)
    if name in ("p50", "p95"):
        return quantile(sorted(values), 0.5 if name == "p50" else 0.95)
    raise ValueError(f"unknown aggregate {name!r}")


def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (what numpy and Prometheus do)."""
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def group_of(rule: WindowRule, row: Row) -> GroupKey:
    return tuple((label, row.label(label)) for label in rule.groups)


def in_scope(rule: WindowRule, row: Row) -> bool:
    return all(row.label(key) == wanted for key, wanted in rule.where)


def window_rows(rows: Sequence[Row], rule: WindowRule, at: float) -> Iterable[Row]:
    """Rows in (at - window, at], of the rule's kind (trace or daemon sample)."""
    start = at - rule.window_s
    for row in rows:
        if start < row.at <= at and (row.trace_id is None) == rule.pipeline:
            yield row


def evaluate(
    rule: WindowRule,
    rows: Sequence[Row],
    states: Mapping[GroupKey, AlertState],
    at: float,
    max_groups: int = 50,
) -> Evaluation:
    """One evaluation of one rule at `at` over `rows` (any superset of its window)."""
    samples: dict[GroupKey, list[tuple[float, Row]]] = {}
    for row in window_rows(rows, rule, at):
        if not in_scope(rule, row):
            continue
        value = rule.expression.value(row.values)
        if value is not None:
            samples.setdefault(group_of(rule, row), []).append((value, row))
    groups = set(samples) | set(states)
    if not rule.groups:
        groups.add(())
    ordered = ranked(groups, states, {g: len(found) for g, found in samples.items()})
    result = Evaluation(capped=max(0, len(ordered) - max_groups))
    for group in ordered[:max_groups]:
        found = samples.get(group, [])
        state, transition = step(rule, states.get(group, AlertState()), found, at)
        result.states[group] = state
        top = (
            top_detail(rule, found) if transition is not None or state.status == "firing" else None
        )
        if state.status == "firing":
            result.examples[group] = worst(rule, found)
            if top is not None:
                result.tops[group] = top
        if transition is not None:
            examples = result.examples.get(group) or worst(rule, found)
            result.events.append(make_event(rule, group, state, transition, at, examples, top))
    return result


def ranked(
    groups: Iterable[GroupKey], states: Mapping[GroupKey, AlertState], sizes: Mapping[GroupKey, int]
) -> list[GroupKey]:
    """Groups in the order `max_groups` keeps them: those that already fire keep their
    place, then those pending; then the busiest (`sizes`: samples in the window)."""
    return sorted(
        groups,
        key=lambda g: (_KEEP_FIRST[states.get(g, AlertState()).status], -sizes.get(g, 0), g),
    )


def make_event(
    rule: WindowRule,
    group: GroupKey,
    state: AlertState,
    transition: tuple[Transition, str, str | None, float],
    at: float,
    examples: tuple[Example, ...],
    top: Top | None = None,
) -> AlertEvent:
    """The event of a transition `step` (or `decide`) returned, in the state it left."""
    kind, severity, previous, since = transition
    return AlertEvent(
        rule=rule.name,
        group=group,
        transition=kind,
        at=at,
        severity=severity,
        previous_severity=previous,
        value=state.value,
        samples=state.samples,
        since=since,
        examples=examples,
        top=top,
    )


def top_detail(rule: WindowRule, found: Sequence[tuple[float, Row]]) -> Top | None:
    """The most frequent detail (`SignalInfo.detail`) among the true samples, ties by name;
    None for a signal without one, or when no true sample names one."""
    detail = rule.expression.info.detail
    if detail is None or not rule.expression.is_flag:
        return None
    counts: Counter[str] = Counter()
    flagged = 0
    for value, row in found:
        if value != 1.0:
            continue
        flagged += 1
        told = row.values.get(detail)
        if isinstance(told, str):
            counts[told] += 1
    if not counts:
        return None
    named, count = min(counts.items(), key=lambda item: (-item[1], item[0]))
    return Top(named, count, flagged)


def worst(rule: WindowRule, found: Sequence[tuple[float, Row]]) -> tuple[Example, ...]:
    """Up to five traces that pull the value over the threshold, worst first."""
    if rule.expression.is_flag:
        bad = [(v, r) for v, r in found if v == 1.0]
        bad.sort(key=lambda item: -item[1].at)  # the most recent first
    else:
        upward = rule.op in (">", ">=")
        bad = sorted(found, key=lambda item: (-item[0] if upward else item[0], -item[1].at))
    return tuple(
        Example(row.trace_id, row.project_id, value)
        for value, row in bad[:MAX_EXAMPLES]
        if row.trace_id is not None
    )


Step = tuple[Transition, str, str | None, float] | None


def step(
    rule: WindowRule, state: AlertState, found: Sequence[tuple[float, Row]], at: float
) -> tuple[AlertState, Step]:
    """The state machine for one group: the new state and what happened, if anything."""
    if not found:
        return decide(rule, state, None, 0, at)
    return decide(rule, state, aggregate(rule.aggregate, [v for v, _ in found]), len(found), at)


def decide(
    rule: WindowRule, state: AlertState, value: float | None, samples: int, at: float
) -> tuple[AlertState, Step]:
    """`step` on the window's aggregate `value` of `samples` samples (0: an empty window)."""
    if samples == 0 or value is None:
        return _no_data(rule, state, at)
    state = replace(state, no_data_since=None, value=value, samples=samples, evaluated_at=at)
    if samples < rule.min_samples:
        return state, None  # no verdict: hold whatever the state was
    breach = _breach(rule, value)
    if state.status == "firing" and state.no_data_firing:
        # Data is back: the no-data alert ends, and says so; a breach now starts its
        # own alert, pending from here (one transition per evaluation).
        resolved = _ok(state)
        ended: Step = ("resolved", state.severity or "page", None, state.since or at)
        if breach is None:
            return resolved, ended
        return replace(resolved, status="pending", severity=breach, since=at), ended
    if breach is None:
        if state.status == "firing":
            return _ok(state), ("resolved", state.severity or "page", None, state.since or at)
        if state.status == "pending":
            return _ok(state), ("cleared", state.severity or "warn", None, state.since or at)
        return state, None
    if state.status == "ok":
        state = replace(state, status="pending", severity=breach, since=at)
        if rule.for_s > 0:
            return state, ("pending", breach, None, at)
    if state.status == "pending":
        state = replace(state, severity=breach)
        pending_since = state.since if state.since is not None else at
        if at - pending_since >= rule.for_s:
            fired = replace(state, status="firing", since=at, last_notified=at)
            return fired, ("firing", breach, None, at)
        return state, None
    return _firing(rule, state, breach, at)


def _firing(rule: WindowRule, state: AlertState, breach: str, at: float) -> tuple[AlertState, Step]:
    """`decide` for a firing alert still breached: renotified, escalated or lowered."""
    since = state.since if state.since is not None else at
    current = state.severity or "page"
    if breach == current:
        state = replace(state, escalate_since=None)
        last = state.last_notified if state.last_notified is not None else since
        if rule.repeat_s > 0 and at - last >= rule.repeat_s:
            return replace(state, last_notified=at), ("renotified", current, None, since)
        return state, None
    if breach == "page":
        started = state.escalate_since if state.escalate_since is not None else at
        if at - started >= rule.for_s:
            escalated = replace(state, severity="page", escalate_since=None, last_notified=at)
            return escalated, ("escalated", "page", current, since)
        return replace(state, escalate_since=started), None
    lowered = replace(state, severity="warn", escalate_since=None, last_notified=at)
    return lowered, ("deescalated", "warn", current, since)


def _breach(rule: WindowRule, value: float) -> str | None:
    if rule.breaches(value, rule.threshold):
        return "page"
    if rule.warn_threshold is not None and rule.breaches(value, rule.warn_threshold):
        return "warn"
    return None


def _ok(state: AlertState) -> AlertState:
    return replace(
        state,
        status="ok",
        severity=None,
        since=None,
        last_notified=None,
        escalate_since=None,
        no_data_firing=False,
        layer=None,
        layer_note=None,
        held=False,
    )


def _no_data(rule: WindowRule, state: AlertState, at: float) -> tuple[AlertState, Step]:
    quiet_since = state.no_data_since if state.no_data_since is not None else at
    state = replace(state, no_data_since=quiet_since, value=None, samples=0, evaluated_at=at)
    if rule.no_data == "keep" or at - quiet_since < rule.no_data_for_s:
        return state, None
    if rule.no_data == "ok":
        if state.status == "firing":
            return _ok(state), ("resolved", state.severity or "page", None, state.since or at)
        if state.status == "pending":
            return _ok(state), ("cleared", state.severity or "warn", None, state.since or at)
        return state, None
    # no_data = "alert"
    if state.status == "firing" and state.no_data_firing:
        since = state.since if state.since is not None else at
        last = state.last_notified if state.last_notified is not None else since
        if rule.repeat_s > 0 and at - last >= rule.repeat_s:
            return replace(state, last_notified=at), ("renotified", "page", None, since)
        return state, None
    fired = replace(
        state,
        status="firing",
        severity="page",
        since=at,
        last_notified=at,
        escalate_since=None,
        no_data_firing=True,
    )
    return fired, ("no_data", "page", state.severity, at)


# A daemon that was down longer than this does not replay every step it missed.
MAX_CATCH_UP_S = 24 * 3600.0


def evaluation_points(
    last: float | None,
    target: float,
    step_s: float,
    lead_s: float,
    max_catch_up_s: float | None = MAX_CATCH_UP_S,
) -> list[float]:
    """When to evaluate a rule to bring it from `last` up to `target`, `step_s` apart.

    Points are aligned to multiples of `step_s` (replicas and backtests agree)
    and end at `target` itself. A first evaluation (or one after a gap longer
    than `max_catch_up_s`; None: no gap is too long, a backtest's window) starts
    `lead_s` before the target, so that a `for` can elapse in event time.
    """
    if last is not None and target <= last:
        return []
    too_long = max_catch_up_s is not None and last is not None and target - last > max_catch_up_s
    start = target - lead_s if last is None or too_long else last
    points: list[float] = []
    moment = (math.floor(start / step_s) + 1) * step_s
    while moment < target:
        points.append(moment)
        moment += step_s
    points.append(target)
    return points


def replay(
    rule: WindowRule,
    rows: Sequence[Row],
    states: Mapping[GroupKey, AlertState],
    points: Sequence[float],
    max_groups: int = 50,
) -> Evaluation:
    """`evaluate` at each point in turn; the events of all, the state and examples of the last."""
    total = Evaluation(states=dict(states))
    ordered = sorted(rows, key=lambda r: r.at)
    times = [r.at for r in ordered]
    for at in points:
        # Only the rows that can fall in this point's window.
        low = bisect.bisect_right(times, at - rule.window_s)
        high = bisect.bisect_right(times, at)
        step_result = evaluate(rule, ordered[low:high], total.states, at, max_groups)
        total.states = step_result.states
        total.events.extend(step_result.events)
        total.examples = step_result.examples
        total.tops = step_result.tops
        total.capped = step_result.capped
    return total
