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
from dataclasses import dataclass

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


def z_of(check: Check, new: Sequence[float], before: Sequence[float]) -> float:
    """How many standard errors `new` is worse than `before` (positive: worse)."""
    n1, n2 = len(new), len(before)
    m1, m2 = math.fsum(new) / n1, math.fsum(before) / n2
    sign = 1.0 if check.worse == ">" else -1.0
    if check.aggregate == "rate":
        pooled = (math.fsum(new) + math.fsum(before)) / (n1 + n2)
        spread = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    else:
        v1 = math.fsum((x - m1) ** 2 for x in new) / max(1, n1 - 1)
        v2 = math.fsum((x - m2) ** 2 for x in before) / max(1, n2 - 1)
        spread = v1 / n1 + v2 / n2
    difference = sign * (m1 - m2)
    if spread <= 0:
        return math.inf if difference > 0 else 0.0
    return difference / math.sqrt(spread)


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


def compare(rule: RegressionRule, rows: Sequence[Row], at: float) -> list[Finding]:
    """Every finding of `rule` at `at`, over trace `rows` of at least `rule.read_s` before."""
    rows = [r for r in rows if r.trace_id is not None and at - rule.read_s < r.at <= at]
    findings: list[Finding] = []
    for environment, seen in releases(rows, rule.dimension).items():
        ordered = sorted(seen.items(), key=lambda item: (item[1], item[0]))
        if len(ordered) < 2:
            continue
        (before, _), (new, since) = ordered[-2], ordered[-1]
        if since <= at - rule.horizon_s:
            continue
        mine = [r for r in rows if r.environment == environment]
        findings.extend(_compare_release(rule, mine, environment, new, before, since))
    return findings


def _compare_release(
    rule: RegressionRule, rows: Sequence[Row], environment: str, new: str, before: str, since: float
) -> Iterable[Finding]:
    groups = [g for g in rule.group_by if g not in ("environment", rule.dimension)]
    cells: dict[tuple[str, ...], dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        release = row.label(rule.dimension)
        key = tuple(row.label(g) for g in groups)
        if release == new:
            cells[key]["new"].append(row)
        elif release == before:
            cells[key]["during" if row.at >= since else "earlier"].append(row)
    for key, found in sorted(cells.items()):
        for check in rule.checks:
            result = _check(rule, check, found, since)
            if result is None:
                continue
            value, before_value, n_new, n_before, z, examples = result
            group: GroupKey = (
                (("environment", environment),) if "environment" in rule.group_by else ()
            )
            group += tuple(zip(groups, key, strict=True))
            group += ((rule.dimension, new), ("signal", check.name))
            yield Finding(
                group, new, before, check.name, check.aggregate,
                value, before_value, n_new, n_before, z, examples,
            )  # fmt: skip


def _values(check: Check, rows: Sequence[Row]) -> list[tuple[float, Row]]:
    return [(v, r) for r in rows if (v := check.expression.value(r.values)) is not None]


def _check(
    rule: RegressionRule, check: Check, found: Mapping[str, list[Row]], since: float
) -> tuple[float, float, int, int, float, tuple[Example, ...]] | None:
    new = _values(check, found.get("new", []))
    during = _values(check, found.get("during", []))
    earlier = [
        (v, r)
        for v, r in _values(check, found.get("earlier", []))
        if r.at > since - rule.baseline_s
    ]
    before = during if len(during) >= rule.min_samples else earlier
    if len(new) < rule.min_samples or len(before) < rule.min_samples:
        return None
    values = [v for v, _ in new]
    base = [v for v, _ in before]
    value, before_value = math.fsum(values) / len(values), math.fsum(base) / len(base)
    worse_by = value - before_value if check.worse == ">" else before_value - value
    z = z_of(check, values, base)
    if worse_by < rule.min_effect or z < rule.z_floor:
        return None
    upward = check.worse == ">"
    ordered = sorted(new, key=lambda item: (-item[0] if upward else item[0], -item[1].at))
    examples = tuple(
        Example(r.trace_id, r.project_id, v) for v, r in ordered[:MAX_EXAMPLES] if r.trace_id
    )
    return value, before_value, len(new), len(before), z, examples


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
