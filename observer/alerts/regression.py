"""Release regression: a new release compared with the one before it (pure).

A `release` (or `version`) seen for the first time is compared, once it has
`min_samples` on a query type, with the release before it on the same query
type: the mean of a number or the rate of a flag, a difference in the worse
direction of at least `min_effect`, and a z of at least `z_floor` (Welch's for
means, the pooled two-proportion z for rates). It pages even when no absolute
threshold is crossed: "release 2026.12.03-rc2 is worse than 2026.12.01 on
numeric_grounding for query_type pricing (0.62 vs 0.97, n = 140/410)".
(docs/alerts.md#release-regression)

Which samples of the release before: those at the same time as the new one's
(traffic split between the two, a canary) when there are `min_samples` of
them, else its last `baseline_s` before the new one was first seen.

The state of a finding is a group of the rule's alert state: firing while the
comparison holds, resolved when it no longer does (the release fixed, or
replaced by a newer one). No clock, no I/O.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from observer.alerts.engine import MAX_EXAMPLES
from observer.alerts.rules import Expression, parse_expression
from observer.state.rows import AlertState, Example, GroupKey, Row


@dataclass(frozen=True, slots=True)
class Check:
    """One signal compared: `mean` of a number or `rate` of a flag; `worse` is `<` (lower
    is worse) or `>`."""

    expression: Expression
    aggregate: str
    worse: str

    @property
    def name(self) -> str:
        return str(self.expression)


@dataclass(frozen=True, slots=True)
class RegressionRule:
    name: str
    checks: tuple[Check, ...]
    dimension: str = "release"
    group_by: tuple[str, ...] = ("environment", "query_type")
    min_samples: int = 50
    min_effect: float = 0.05
    z_floor: float = 3.0
    # Reading history is what a comparison costs (bench/triage.py): 12 hours by default.
    baseline_s: float = 6 * 3600.0
    horizon_s: float = 6 * 3600.0  # a release first seen longer ago is not new
    every_s: float = 900.0  # compared this often (event time)
    notify: tuple[str, ...] = ()
    runbook_url: str | None = None

    def keys(self) -> set[str]:
        return {c.expression.signal for c in self.checks}

    @property
    def read_s(self) -> float:
        """The span of history one comparison reads, ending at its point."""
        return self.horizon_s + self.baseline_s


def default_regression_rules() -> tuple[RegressionRule, ...]:
    def check(text: str, aggregate: str, worse: str) -> Check:
        return Check(parse_expression(text, "default rule release_regression"), aggregate, worse)

    return (
        RegressionRule(
            "release_regression",
            (
                check("numeric_grounding", "mean", "<"),
                check("citation_coverage", "mean", "<"),
                check("faithfulness", "mean", "<"),
                check("ungrounded", "rate", ">"),
            ),
        ),
    )


@dataclass(frozen=True, slots=True)
class Finding:
    """A new release worse than the one before it on one signal, in one group."""

    group: GroupKey  # the rule's groups, then (dimension, new), ("signal", name)
    new: str
    before: str
    signal: str
    aggregate: str
    value: float
    before_value: float
    samples: int
    before_samples: int
    z: float
    examples: tuple[Example, ...] = ()

    def text(self, dimension: str) -> str:
        where = ", ".join(
            f"{k} {v}" for k, v in self.group if k not in (dimension, "signal", "environment")
        )
        return (
            f"{dimension} {self.new} is worse than {self.before} on {self.signal}"
            + (f" for {where}" if where else "")
            + f" ({self.value:.3g} vs {self.before_value:.3g}, "
            f"n = {self.samples}/{self.before_samples})"
        )


@dataclass(frozen=True, slots=True)
class Stats:
    """What a comparison needs of a set of samples: their count, sum and sum of squares
    (computed from rows here, or by SQLite over the stored history)."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0

    @classmethod
    def of(cls, values: Iterable[float]) -> Stats:
        listed = list(values)
        return cls(len(listed), math.fsum(listed), math.fsum(v * v for v in listed))

    @property
    def mean(self) -> float:
        return self.total / self.n

    @property
    def variance(self) -> float:
        if self.n < 2:
            return 0.0
        return max(0.0, (self.squares - self.total * self.total / self.n) / (self.n - 1))


def z_of(check: Check, new: Stats, before: Stats) -> float:
    """How many standard errors `new` is worse than `before` (positive: worse): Welch's for
    a mean, the pooled two-proportion z for a rate."""
    sign = 1.0 if check.worse == ">" else -1.0
    if check.aggregate == "rate":
        pooled = (new.total + before.total) / (new.n + before.n)
        spread = pooled * (1 - pooled) * (1 / new.n + 1 / before.n)
    else:
        spread = new.variance / new.n + before.variance / before.n
    difference = sign * (new.mean - before.mean)
    if spread <= 1e-12:
        return math.inf if difference > 0 else 0.0
    return difference / math.sqrt(spread)


# One cell of a comparison: the values of the rule's groups (environment apart) and which
# samples: "new" (the new release), "during" (the one before, since the new one was first
# seen), "earlier" (the one before, in its baseline before that).
Cell = tuple[tuple[str, ...], str]


def releases(rows: Iterable[Row], dimension: str) -> dict[str, dict[str, float]]:
    """Per environment, each value of `dimension` and when it was first seen."""
    first: dict[str, dict[str, float]] = defaultdict(dict)
    for row in rows:
        value = row.label(dimension)
        if value == "none":
            continue
        seen = first[row.environment]
        if value not in seen or row.at < seen[value]:
            seen[value] = row.at
    return first


def contenders(
    rule: RegressionRule, seen: Mapping[str, float], at: float
) -> tuple[str, str, float] | None:
    """The newest release and the one first seen before it, and when the newest was first
    seen; None with fewer than two, or when the newest is no longer new."""
    ordered = sorted(seen.items(), key=lambda item: (item[1], item[0]))
    if len(ordered) < 2:
        return None
    (before, _), (new, since) = ordered[-2], ordered[-1]
    if since <= at - rule.horizon_s:
        return None
    return new, before, since


def other_groups(rule: RegressionRule) -> list[str]:
    return [g for g in rule.group_by if g not in ("environment", rule.dimension)]


def period(rule: RegressionRule, release: str, at: float, new: str, since: float) -> str | None:
    """Which samples a row of `release` at `at` belongs to, or None (out of the baseline)."""
    if release == new:
        return "new"
    if at >= since:
        return "during"
    return "earlier" if at > since - rule.baseline_s else None


def decide(
    rule: RegressionRule,
    environment: str,
    new: str,
    before: str,
    cells: Mapping[Cell, Mapping[str, Stats]],
) -> list[Finding]:
    """The findings of one environment from its cells' statistics (examples left out)."""
    groups = other_groups(rule)
    keys = sorted({key for key, _ in cells})
    findings: list[Finding] = []
    for key in keys:
        for check in rule.checks:
            stats = {p: cells.get((key, p), {}).get(check.name, Stats()) for p in PERIODS}
            fresh = stats["new"]
            base = stats["during"] if stats["during"].n >= rule.min_samples else stats["earlier"]
            if fresh.n < rule.min_samples or base.n < rule.min_samples:
                continue
            worse_by = fresh.mean - base.mean if check.worse == ">" else base.mean - fresh.mean
            z = z_of(check, fresh, base)
            if worse_by < rule.min_effect or z < rule.z_floor:
                continue
            group: GroupKey = (
                (("environment", environment),) if "environment" in rule.group_by else ()
            )
            group += tuple(zip(groups, key, strict=True))
            group += ((rule.dimension, new), ("signal", check.name))
            finding = Finding(
                group=group,
                new=new,
                before=before,
                signal=check.name,
                aggregate=check.aggregate,
                value=fresh.mean,
                before_value=base.mean,
                samples=fresh.n,
                before_samples=base.n,
                z=z,
            )
            findings.append(finding)
    return findings


PERIODS: Final = ("new", "during", "earlier")


def compare(rule: RegressionRule, rows: Sequence[Row], at: float) -> list[Finding]:
    """Every finding of `rule` at `at`, over trace `rows` of at least `rule.read_s` before
    (the daemon asks SQLite for the same statistics: observer.state.history)."""
    rows = [r for r in rows if r.trace_id is not None and at - rule.read_s < r.at <= at]
    findings: list[Finding] = []
    groups = other_groups(rule)
    for environment, seen in releases(rows, rule.dimension).items():
        found = contenders(rule, seen, at)
        if found is None:
            continue
        new, before, since = found
        values: dict[Cell, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        samples: dict[tuple[str, ...], list[Row]] = defaultdict(list)
        for row in rows:
            release = row.label(rule.dimension)
            if row.environment != environment or release not in (new, before):
                continue
            which = period(rule, release, row.at, new, since)
            if which is None:
                continue
            key = tuple(row.label(g) for g in groups)
            if which == "new":
                samples[key].append(row)
            for check in rule.checks:
                value = check.expression.value(row.values)
                if value is not None:
                    values[(key, which)][check.name].append(value)
        cells = {
            cell: {name: Stats.of(listed) for name, listed in by_signal.items()}
            for cell, by_signal in values.items()
        }
        for finding in decide(rule, environment, new, before, cells):
            key = tuple(v for k, v in finding.group if k in groups)
            check = next(c for c in rule.checks if c.name == finding.signal)
            findings.append(with_examples(finding, worst_of(check, samples[key])))
    return findings


def worst_of(check: Check, rows: Iterable[Row]) -> tuple[Example, ...]:
    """The new release's worst samples of a check, most recent first among equals."""
    found = [(v, r) for r in rows if (v := check.expression.value(r.values)) is not None]
    upward = check.worse == ">"
    found.sort(key=lambda item: (-item[0] if upward else item[0], -item[1].at))
    return tuple(
        Example(r.trace_id, r.project_id, v) for v, r in found[:MAX_EXAMPLES] if r.trace_id
    )


def with_examples(finding: Finding, examples: tuple[Example, ...]) -> Finding:
    return replace(finding, examples=examples)


Transition = tuple[str, GroupKey, Finding | None]  # ("firing" | "resolved", group, finding)


def step(
    findings: Sequence[Finding], states: Mapping[GroupKey, AlertState], at: float
) -> tuple[dict[GroupKey, AlertState], list[Transition]]:
    """The rule's state after a comparison at `at`: a finding fires once and stays firing
    while it holds; a firing group without its finding any more resolves (and is
    forgotten)."""
    out: dict[GroupKey, AlertState] = {}
    happened: list[Transition] = []
    for finding in findings:
        before = states.get(finding.group)
        firing = before is not None and before.status == "firing"
        out[finding.group] = AlertState(
            status="firing",
            severity="page",
            since=before.since if firing and before is not None else at,
            last_notified=before.last_notified if firing and before is not None else at,
            value=finding.value,
            samples=finding.samples,
            evaluated_at=at,
        )
        if not firing:
            happened.append(("firing", finding.group, finding))
    for group, state in sorted(states.items()):
        if state.status == "firing" and group not in out:
            happened.append(("resolved", group, None))
    return out, happened


def replay(
    rule: RegressionRule, rows: Sequence[Row], points: Sequence[float]
) -> list[tuple[float, Transition]]:
    """`compare` and `step` at every `every_s` among `points` from a clean state, as the
    daemon would (`observer alerts backtest`)."""
    ordered = sorted(rows, key=lambda r: r.at)
    states: dict[GroupKey, AlertState] = {}
    out: list[tuple[float, Transition]] = []
    last: float | None = None
    for at in points:
        if last is not None and at - last < rule.every_s and at != points[-1]:
            continue
        last = at
        states, happened = step(compare(rule, ordered, at), states, at)
        out.extend((at, t) for t in happened)
    return out
