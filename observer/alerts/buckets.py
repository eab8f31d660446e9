"""Window rules over the history in buckets: a window is the merge of its stretches' sums.

At a busy service a window rule watches hundreds of thousands of rows (30 minutes at 200
answers a second: 360,000). Reading them into memory at every evaluation costs seconds
of CPU and their memory, every minute. So the history is cut in buckets of the
evaluation step (bucket k holds the rows with k*step < at <= (k+1)*step); a bucket's
samples are aggregated once per rule and group (`Agg`: count, exact sum, minimum,
maximum, and for a quantile the sorted values), and a window is the merge of the
buckets it covers, plus the rows of its edges when it does not start or end on a
bucket's (the watermark rarely falls on a minute). Its value is `windows.slide`'s to the
bit: the sums are exact (`ExactSum`), and the minimum and maximum are the first of equals.

    buckets:   | k0 | k0+1 | ... | k1 |
    window:  (start ........................... at]
             head (rows)                     tail (rows)

A stretch keeps its few worst samples (`engine.worst`'s order) and, for a flag with a
detail, the count of each detail among its true samples: a window's examples and most
frequent detail merge from them, so no evaluation reads a window's rows.

Pure: no clock, no I/O; the rows come from the caller (observer.alerts.families.window).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from observer.alerts.engine import (
    MAX_EXAMPLES,
    AlertState,
    Evaluation,
    Example,
    GroupKey,
    Row,
    Top,
    quantile,
)
from observer.alerts.rules import WindowRule
from observer.alerts.windows import ExactSum, fold_point, samples_of

Aggs = dict[GroupKey, "Agg"]
# A candidate example's place in `engine.worst`'s order: (value, for a number,) -time, and
# its position in its stretch (the history's order among rows of equal time).
Rank = tuple[float, ...]


class Agg:
    """The samples of one group in a stretch of time, as its window's aggregate, examples
    and most frequent detail need them."""

    __slots__ = ("details", "high", "low", "n", "ones", "ordered", "total", "worst")

    def __init__(self, quantiles: bool, detailed: bool) -> None:
        self.n = 0
        self.ones = 0
        self.total = ExactSum()
        self.low = math.nan  # while empty: every first value takes the place
        self.high = math.nan
        self.ordered: list[float] | None = [] if quantiles else None
        self.worst: list[tuple[Rank, Example]] = []  # the few worst, in `worst`'s order
        self.details: Counter[str] | None = Counter() if detailed else None

    def add(self, value: float) -> None:
        """A sample, later than those added (only a strictly lower or higher one displaces
        the minimum or maximum: the first of equals stays)."""
        if self.n == 0 or value < self.low:
            self.low = value
        if self.n == 0 or value > self.high:
            self.high = value
        self.n += 1
        self.total.add(value)
        if value == 1.0:
            self.ones += 1
        if self.ordered is not None:
            self.ordered.append(value)

    def offer(self, rank: Rank, value: float, row: Row) -> None:
        worst = self.worst
        if len(worst) == MAX_EXAMPLES:
            if rank >= worst[-1][0]:
                return
            worst.pop()
        bisect.insort(worst, (rank, Example(row.trace_id, row.project_id, value)))  # type: ignore[arg-type]

    def absorb(self, later: Agg) -> None:
        """The samples of a later stretch added to these."""
        if later.n == 0:
            return
        if self.n == 0 or later.low < self.low:
            self.low = later.low
        if self.n == 0 or later.high > self.high:
            self.high = later.high
        self.n += later.n
        self.ones += later.ones
        self.total.absorb(later.total)
        if self.ordered is not None and later.ordered is not None:
            self.ordered.extend(later.ordered)
        if later.worst:  # ranks differ: two stretches share no time
            self.worst = sorted(self.worst + later.worst)[:MAX_EXAMPLES]
        if self.details is not None and later.details:
            self.details.update(later.details)

    def value(self, aggregate: str) -> float:
        """`engine.aggregate` of the samples, as `windows.GroupWindow` computes it."""
        if aggregate in ("mean", "rate"):
            return min(max(self.total.value() / self.n, self.low), self.high)
        if aggregate == "count":
            return self.total.value()
        if aggregate == "min":
            return self.low
        if aggregate == "max":
            return self.high
        assert self.ordered is not None
        self.ordered.sort()
        return quantile(self.ordered, 0.5 if aggregate == "p50" else 0.95)

    def told(self) -> tuple[tuple[Example, ...], Top | None]:
        """`engine.worst` and `engine.top_detail` of the samples."""
        examples = tuple(e for _, e in self.worst if e.trace_id is not None)
        if not self.details:
            return examples, None
        named, count = min(self.details.items(), key=lambda item: (-item[1], item[0]))
        return examples, Top(named, count, self.ones)


def _fresh(rule: WindowRule) -> Agg:
    detailed = rule.expression.is_flag and rule.expression.info.detail is not None
    return Agg(rule.aggregate in ("p50", "p95"), detailed)


def aggregated(rule: WindowRule, rows: Sequence[Row]) -> Aggs:
    """The rule's samples among `rows` (oldest first), per group."""
    out: Aggs = {}
    flag = rule.expression.is_flag
    detail = rule.expression.info.detail if flag else None
    sign = -1.0 if rule.op in (">", ">=") else 1.0
    for position, (at, value, row, group) in enumerate(samples_of(rule, rows)):
        agg = out.get(group)
        if agg is None:
            agg = out[group] = _fresh(rule)
        agg.add(value)
        if not flag:
            agg.offer((sign * value, -at, position), value, row)
        elif value == 1.0:
            agg.offer((-at, position), value, row)
            told = row.values.get(detail) if detail is not None else None
            if agg.details is not None and isinstance(told, str):
                agg.details[told] += 1
    return out


def bucket_of(at: float, step: float) -> int:
    """The k with k*step < at <= (k+1)*step (float products, as the bounds are read)."""
    k = math.ceil(at / step) - 1
    while k * step >= at:
        k -= 1
    while (k + 1) * step < at:
        k += 1
    return k


@dataclass(frozen=True, slots=True)
class Cover:
    """What a window (start, at] is made of: whole buckets first..last (none when last <
    first) and the stretches of rows before and after them."""

    first: int
    last: int
    head: tuple[float, float] | None
    tail: tuple[float, float] | None


def cover(rule: WindowRule, at: float, step: float) -> Cover:
    """The buckets and edges of `rule`'s window at `at`."""
    start = at - rule.window_s
    first = bucket_of(start, step) + 1
    end = bucket_of(at, step)
    last = end if (end + 1) * step == at else end - 1
    if last < first:  # narrower than a bucket, or within two: all of it read as rows
        return Cover(first, first - 1, (start, at), None)
    head = (start, first * step) if first * step > start else None
    tail = ((last + 1) * step, at) if (last + 1) * step < at else None
    return Cover(first, last, head, tail)


def merged(rule: WindowRule, parts: Iterable[Mapping[GroupKey, Agg]]) -> Aggs:
    """The stretches' aggregates (oldest first) merged per group."""
    out: Aggs = {}
    for part in parts:
        for group, agg in part.items():
            into = out.get(group)
            if into is None:
                into = out[group] = _fresh(rule)
            into.absorb(agg)
    return out


class _View:
    """A group's merged window as `fold_point` reads it."""

    __slots__ = ("agg", "aggregate")

    def __init__(self, agg: Agg, aggregate: str) -> None:
        self.agg = agg
        self.aggregate = aggregate

    def __len__(self) -> int:
        return self.agg.n

    def value(self) -> float:
        return self.agg.value(self.aggregate)

    def told(self, rule: WindowRule) -> tuple[tuple[Example, ...], Top | None]:
        return self.agg.told()


def slide_merged(
    rule: WindowRule,
    window_at: Callable[[float], Mapping[GroupKey, Agg]],
    states: Mapping[GroupKey, AlertState],
    points: Sequence[float],
    max_groups: int = 50,
) -> Evaluation:
    """`windows.slide(rule, rows, states, points, max_groups)` with each point's window from
    `window_at(at)`: its groups' merged aggregates."""
    total = Evaluation(states=dict(states))
    last = len(points) - 1
    for index, at in enumerate(points):
        views = {g: _View(agg, rule.aggregate) for g, agg in window_at(at).items() if agg.n}
        fold_point(rule, total, views, at, max_groups, final=index == last)
    return total
