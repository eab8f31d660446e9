"""Rolling windows kept incrementally: each group's window slides over the rows once.

`slide(rule, rows, states, points)` is `engine.replay` (the reference, kept
for tests and `observer alerts backtest`): the same events, states, examples
and capped count, to the bit. `replay` evaluates every point over every row
of its window, a cost of points x window rows; `slide` walks the rows once,
in event time order, so a catch-up of 240 points costs about what one
evaluation does:

    rows, oldest first:  r1 r2 r3 r4 r5 r6 r7 r8 ...
    point p:                [ (p - window, p] ]          r2..r5 in the window
    point p + step:               [ (... , p + step] ]   r2, r3 leave; r6, r7 enter

Per rule and group the window holds its samples oldest first (the order
`evaluate` sees them in), and the aggregate is kept as samples enter and
leave, never recomputed over the window:

- mean, rate, count: an exact running sum (an integer over a power of two: a
  float is one, so adding and removing never rounds; its float is what
  `math.fsum` of the window gives), and the count; for a flag (every value
  0.0 or 1.0) just the count of ones;
- min, max, and the bounds a mean is clamped to: monotonic deques;
- p50, p95: a sorted list (bisect), read by rank as `quantile` reads one.

The examples and the top detail (`engine.top_detail`) are looked for only
where they are told: in an event, and for the groups firing after the last
point.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Protocol

from observer.alerts.engine import (
    AlertState,
    Evaluation,
    Example,
    GroupKey,
    Row,
    Top,
    decide,
    in_scope,
    make_event,
    quantile,
    ranked,
    top_detail,
    worst,
)
from observer.alerts.rules import WindowRule

# A sample of a rule: (event time, value, row, group), in the order of the rows.
Sample = tuple[float, float, Row, GroupKey]


class ExactSum:
    """A sum of floats without rounding: `numerator / 2 ** shift`, exactly.

    `value()` is the sum correctly rounded to a float, as `math.fsum` returns
    it, however many values were added and removed on the way.
    """

    __slots__ = ("numerator", "shift")

    def __init__(self) -> None:
        self.numerator = 0
        self.shift = 0

    def add(self, x: float, sign: int = 1) -> None:
        if x == 0.0:
            return
        if x == 1.0:
            self.numerator += sign << self.shift
            return
        top, bottom = x.as_integer_ratio()  # bottom is a power of two
        bits = bottom.bit_length() - 1
        if bits > self.shift:
            self.numerator <<= bits - self.shift
            self.shift = bits
        self.numerator += sign * (top << (self.shift - bits))

    def remove(self, x: float) -> None:
        self.add(x, -1)

    def absorb(self, other: ExactSum) -> None:
        """Add another sum, exactly."""
        if other.shift > self.shift:
            self.numerator <<= other.shift - self.shift
            self.shift = other.shift
        self.numerator += other.numerator << (self.shift - other.shift)

    def value(self) -> float:
        # int / int is correctly rounded in Python, as fsum's result is.
        return self.numerator / (1 << self.shift)


class _Extreme:
    """The minimum (or maximum) of a FIFO window: a monotonic deque of (seq, value)."""

    __slots__ = ("items", "lowest")

    def __init__(self, lowest: bool) -> None:
        self.items: deque[tuple[int, float]] = deque()
        self.lowest = lowest

    def add(self, seq: int, value: float) -> None:
        items = self.items
        # Strictly better values displace the back; an equal one stays before the new one,
        # so the front is the first of equals, as min() and max() return it.
        if self.lowest:
            while items and items[-1][1] > value:
                items.pop()
        else:
            while items and items[-1][1] < value:
                items.pop()
        items.append((seq, value))

    def remove(self, seq: int) -> None:
        if self.items and self.items[0][0] == seq:
            self.items.popleft()

    def value(self) -> float:
        return self.items[0][1]


class FlagWindow:
    """A group's window of a flag (values 0.0 and 1.0 only): the count of ones is all the
    mean, rate, count, min and max need."""

    __slots__ = ("aggregate", "found", "ones")

    def __init__(self, aggregate: str) -> None:
        if aggregate not in FLAG_AGGREGATES:
            raise ValueError(f"aggregate {aggregate!r} is not kept by counting")
        self.aggregate = aggregate
        self.found: deque[tuple[float, Row]] = deque()
        self.ones = 0

    def __len__(self) -> int:
        return len(self.found)

    def add(self, seq: int, value: float, row: Row) -> None:
        self.found.append((value, row))
        if value == 1.0:
            self.ones += 1

    def drop_oldest(self) -> None:
        value, _ = self.found.popleft()
        if value == 1.0:
            self.ones -= 1

    def told(self, rule: WindowRule) -> tuple[tuple[Example, ...], Top | None]:
        return told(rule, self.found)

    def value(self) -> float:
        """`engine.aggregate` of the window's values, as it computes it."""
        name, ones, n = self.aggregate, self.ones, len(self.found)
        if name == "count":
            return float(ones)  # fsum of ones and zeros
        low = 0.0 if ones < n else 1.0
        high = 1.0 if ones else 0.0
        if name == "min":
            return low
        if name == "max":
            return high
        return min(max(float(ones) / n, low), high)


FLAG_AGGREGATES = ("mean", "rate", "count", "min", "max")


class GroupWindow:
    """One group's samples in the window, oldest first, and its aggregate kept up to date."""

    __slots__ = ("aggregate", "found", "high", "low", "ordered", "seqs", "total")

    def __init__(self, aggregate: str) -> None:
        if aggregate not in ("mean", "rate", "count", "min", "max", "p50", "p95"):
            raise ValueError(f"unknown aggregate {aggregate!r}")
        self.aggregate = aggregate
        self.found: deque[tuple[float, Row]] = deque()
        self.seqs: deque[int] = deque()
        summed = aggregate in ("mean", "rate", "count")
        self.total = ExactSum() if summed else None
        self.low = _Extreme(True) if aggregate in ("mean", "rate", "min") else None
        self.high = _Extreme(False) if aggregate in ("mean", "rate", "max") else None
        self.ordered: list[float] | None = [] if aggregate in ("p50", "p95") else None

    def __len__(self) -> int:
        return len(self.found)

    def add(self, seq: int, value: float, row: Row) -> None:
        self.found.append((value, row))
        self.seqs.append(seq)
        if self.total is not None:
            self.total.add(value)
        if self.low is not None:
            self.low.add(seq, value)
        if self.high is not None:
            self.high.add(seq, value)
        if self.ordered is not None:
            bisect.insort(self.ordered, value)

    def drop_oldest(self) -> None:
        value, _ = self.found.popleft()
        seq = self.seqs.popleft()
        if self.total is not None:
            self.total.remove(value)
        if self.low is not None:
            self.low.remove(seq)
        if self.high is not None:
            self.high.remove(seq)
        if self.ordered is not None:
            del self.ordered[bisect.bisect_left(self.ordered, value)]

    def told(self, rule: WindowRule) -> tuple[tuple[Example, ...], Top | None]:
        return told(rule, self.found)

    def value(self) -> float:
        """`engine.aggregate` of the window's values (not empty), computed as it does."""
        name = self.aggregate
        if name in ("mean", "rate"):
            assert self.total is not None and self.low is not None and self.high is not None
            mean = self.total.value() / len(self.found)
            return min(max(mean, self.low.value()), self.high.value())
        if name == "count":
            assert self.total is not None
            return self.total.value()
        if name == "min":
            assert self.low is not None
            return self.low.value()
        if name == "max":
            assert self.high is not None
            return self.high.value()
        assert self.ordered is not None
        return quantile(self.ordered, 0.5 if name == "p50" else 0.95)


def samples_of(rule: WindowRule, rows: Sequence[Row]) -> list[Sample]:
    """The rule's samples among `rows` (sorted by event time), in their order: rows of its
    kind (trace or daemon sample), in its `where`, with a value for its expression."""
    groups: dict[tuple[str, ...], GroupKey] = {}
    out: list[Sample] = []
    expression = rule.expression
    labels = rule.groups
    # Grouped by environment and query type only (the defaults): a row's key is those two.
    plain = all(label in ("environment", "query_type") for label in labels)
    pipeline = rule.pipeline
    where = rule.where
    for row in rows:
        if (row.trace_id is None) != pipeline or (where and not in_scope(rule, row)):
            continue
        value = expression.value(row.values)
        if value is None:
            continue
        key = (
            (row.environment, row.query_type)
            if plain
            else tuple(row.label(label) for label in labels)
        )
        group = groups.get(key)
        if group is None:
            group = groups[key] = tuple((label, row.label(label)) for label in labels)
        out.append((row.at, value, row, group))
    return out


def slide(
    rule: WindowRule,
    rows: Sequence[Row],
    states: Mapping[GroupKey, AlertState],
    points: Sequence[float],
    max_groups: int = 50,
    *,
    ordered: bool = False,
) -> Evaluation:
    """`engine.replay(rule, rows, states, points, max_groups)`, each window kept as it slides:
    the events of all points, the states, examples and capped count of the last.
    `ordered`: the rows are sorted by event time already (as the history returns them)."""
    total = Evaluation(states=dict(states))
    if not points:
        return total
    samples = samples_of(rule, rows if ordered else sorted(rows, key=lambda r: r.at))
    count = len(samples)
    windows: dict[GroupKey, GroupWindow | FlagWindow] = {}
    counted = rule.expression.is_flag and rule.aggregate in FLAG_AGGREGATES
    kind = FlagWindow if counted else GroupWindow
    enter = leave = 0  # samples[leave:enter] have entered (some may have left: see below)
    previous = -math.inf
    last_index = len(points) - 1
    for index, at in enumerate(points):
        if at < previous:  # a point back in time: start the windows again
            windows.clear()
            enter = leave = 0
        previous = at
        start = at - rule.window_s
        # Leave: the oldest samples first, each group's window being a FIFO of its own.
        while leave < enter and samples[leave][0] <= start:
            group = samples[leave][3]
            window = windows[group]
            window.drop_oldest()
            if not window:
                del windows[group]
            leave += 1
        if leave == enter:  # a jump past whole windows: skip what would enter and leave
            while enter < count and samples[enter][0] <= start:
                enter += 1
            leave = enter
        while enter < count and samples[enter][0] <= at:
            _, value, row, group = samples[enter]
            entering = windows.get(group)
            if entering is None:
                entering = windows[group] = kind(rule.aggregate)
            entering.add(enter, value, row)
            enter += 1
        fold_point(rule, total, windows, at, max_groups, final=index == last_index)
    return total


class Window(Protocol):
    """A group's window as a point reads it: its aggregate, its size, and what an event or
    a group firing after the last point tells (its examples, its most frequent detail)."""

    def __len__(self) -> int: ...

    def value(self) -> float: ...

    def told(self, rule: WindowRule) -> tuple[tuple[Example, ...], Top | None]: ...


def told(
    rule: WindowRule, found: Sequence[tuple[float, Row]]
) -> tuple[tuple[Example, ...], Top | None]:
    """`engine.worst` and `engine.top_detail` of a window's samples."""
    return worst(rule, found), top_detail(rule, found)


def fold_point(
    rule: WindowRule,
    total: Evaluation,
    windows: Mapping[GroupKey, Window],
    at: float,
    max_groups: int,
    *,
    final: bool,
) -> None:
    """`engine.evaluate` at `at` over the windows as they stand, folded into `total`."""
    states = total.states
    groups = set(windows) | set(states)
    if not rule.groups:
        groups.add(())
    ordered = ranked(groups, states, {g: len(w) for g, w in windows.items()})
    fresh: dict[GroupKey, AlertState] = {}
    examples: dict[GroupKey, tuple[Example, ...]] = {}
    tops: dict[GroupKey, Top] = {}
    for group in ordered[:max_groups]:
        window = windows.get(group)
        if window is None:
            state, transition = decide(rule, states.get(group, AlertState()), None, 0, at)
        else:
            old = states.get(group, AlertState())
            state, transition = decide(rule, old, window.value(), len(window), at)
        fresh[group] = state
        # The worst traces are only looked for where they are told: in an event, and for
        # the groups firing after the last point.
        if transition is not None or (final and state.status == "firing"):
            found, top = window.told(rule) if window is not None else ((), None)
            if transition is not None:
                total.events.append(make_event(rule, group, state, transition, at, found, top))
            if final and state.status == "firing":
                examples[group] = found
                if top is not None:
                    tops[group] = top
    total.states = fresh
    if final:
        total.examples = examples
        total.tops = tops
        total.capped = max(0, len(ordered) - max_groups)
