"""What changed, where, since when and whose: the triage of a firing window rule (pure).

A page that only says "mean(numeric_grounding) 0.83 < 0.9 (environment=production)"
sends on-call to Langfuse for the next ten minutes. From the history observer
already keeps, at no LLM cost, every firing notification also says
(docs/alerts.md#triage):

- **where**: the segments that carry the change. Each sample of the rule's
  group is *bad* when it is on the wrong side of the rule's threshold by itself
  (a flag that is true; a number past the threshold). For every dimension of
  the history (release, model, query type, ...) and every value of it, the
  samples inside the value are set against the rest of the window: the bad
  share inside and outside, the signal's aggregate inside and outside, its
  share of all bad samples, and the bad samples it holds in excess of the
  outside rate (`excess`), by which segments are ranked. A segment needs
  `floor` samples and a bad share higher than outside's by a two-proportion
  z of at least `Z_FLOOR`, so noise never leads. Within the leading segment a
  second dimension that concentrates the bad samples further is named with it
  (release=rc2 and query_type=pricing). When every sample is bad, the whole
  group is: no segment can stand out.
- **since when**: the onset. Scanning back from the alert in steps, the run of
  windows that had already crossed (warn or page) ends at the first such
  window; inside it, the moment that best splits the bad share into a before
  and an after (the largest likelihood ratio of two Bernoulli rates, over the
  samples from half a window before that one) is the onset: the start of the
  change, not the moment the rule fired. Time is cut into buckets of `size`
  seconds (a divisor of the step and the window, about a thirtieth of the
  step), so the onset is told to within a bucket.
- **whose**: the layer to blame, over the bad samples of the leading segment
  (`place`, the zero-cost rules of docs/alerts.md#triage): `index` when cited
  chunks are missing or stale, `abstention` when the answer refused while
  retrieval was HIGH, `retrieval` when the CRAG grade is LOW, `generation`
  when retrieval was HIGH yet the answer failed. The layer that holds more than
  half of the placed bad samples is named; none when no layer does, and the
  samples no rule could place are counted by why (`Triage.unclear`: no
  retrieval score recorded, retrieval AMBIGUOUS, a refusal without evidence).
- **examples**: the worst traces of the leading segment in the window.

The triage reads counts, not rows (`Slices`): SQLite computes them over the stored
history for the daemon and `alerts status` (observer.state.slices), `RowSlices`
from rows in memory for `alerts backtest` and the tests; both give the same triage.
No clock, no I/O here.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, Protocol

from observer.alerts.engine import MAX_EXAMPLES, group_of, in_scope, quantile, worst
from observer.alerts.rules import DIMENSIONS, LAYERS, WindowRule
from observer.state.rows import Example, GroupKey, Row, Segment, Triage, Value
from observer.state.slices import Bucket, Cell, Query, StoredSlices
from observer.state.values import place

__all__ = ["place"]  # where one bad sample points: kept beside the history's values

if TYPE_CHECKING:  # the connection is the caller's: this module makes no I/O
    import sqlite3

# A segment leads only when its bad share is this many standard errors above the rest's.
Z_FLOOR: Final = 3.0
# A segment needs at least this many samples (or half the rule's min_samples, if more).
MIN_SEGMENT: Final = 10
SEGMENTS_TOLD: Final = 5
# The row values a triage reads beside the rule's own signal.
LAYER_KEYS: Final = frozenset(
    {"crag_grade", "missing_chunks", "stale_citations", "abstained", "over_refusal"}
)
# How far back the onset is looked for: this many windows, at least two hours, at most a day.
LOOKBACK_WINDOWS: Final = 8
QUANTILES: Final = frozenset({"p50", "p95"})
# A bad sample no layer rule places, and why, in words (`Triage.unclear`).
UNPLACED: Final[Mapping[str, str]] = {
    "no_retrieval_score": "its trace recorded no retrieval score, so its retrieval grade is "
    "unknown",
    "ambiguous": "its retrieval was AMBIGUOUS",
    "refused_without_evidence": "it refused with retrieval LOW (right to: no evidence)",
}


def lookback_s(rule: WindowRule) -> float:
    """The span of history a triage may read, ending at the alert."""
    return min(24 * 3600.0, max(2 * 3600.0, LOOKBACK_WINDOWS * rule.window_s))


def keys(rule: WindowRule) -> set[str]:
    """The row values a triage of `rule` needs."""
    return {rule.expression.signal, *LAYER_KEYS}


def first_line(rule: WindowRule) -> float:
    """The first line the rule's value crosses: warn's, else the page's."""
    return rule.warn_threshold if rule.warn_threshold is not None else rule.threshold


def is_bad(rule: WindowRule, value: float) -> bool:
    """One sample on the wrong side of the rule by itself: a true flag, a number past the
    threshold (warn's, when the rule has one: the first line it crosses)."""
    if rule.expression.is_flag:
        return value == 1.0
    return rule.breaches(value, first_line(rule))


def bad_when(rule: WindowRule) -> str:
    """What `is_bad` tests, as a person reads it: `ungrounded`, `numeric_grounding < 0.95`."""
    if rule.expression.is_flag:
        return str(rule.expression)
    return f"{rule.expression.signal} {rule.op} {first_line(rule):g}"


def query(rule: WindowRule, group: GroupKey) -> Query:
    """The rule's samples of `group` as observer.state.slices asks SQLite for them."""
    expression = rule.expression
    operand = expression.operand
    return Query(
        signal=expression.signal,
        op=expression.op,
        operand=operand,
        bad_op=None if expression.is_flag else rule.op,
        line=first_line(rule),
        scope=tuple(sorted({*group, *rule.where})),
        highest=rule.op in (">", ">="),
    )


def layer_of(values: Mapping[str, Value]) -> str | None:
    """The layer one bad sample points at, or None when it cannot tell."""
    found = place(values)
    return found if found in LAYERS else None


class Slices(Protocol):
    """A rule's samples of one group, aggregated (observer.state.slices, `RowSlices`)."""

    def cells(self, start: float, end: float) -> list[Cell]: ...

    def buckets(self, size: float, anchor: float, start: float, end: float) -> list[Bucket]: ...

    def worst(
        self, where: Sequence[tuple[str, str]], start: float, end: float
    ) -> tuple[Example, ...]: ...


Sample = tuple[float, Row]  # the expression's value on a row, and the row


def samples_of(rule: WindowRule, group: GroupKey, rows: Iterable[Row]) -> list[Sample]:
    """The rule's samples of one group among trace rows, oldest first."""
    found: list[Sample] = []
    for row in rows:
        if row.trace_id is None or not in_scope(rule, row) or group_of(rule, row) != group:
            continue
        value = rule.expression.value(row.values)
        if value is not None:
            found.append((value, row))
    found.sort(key=lambda item: item[1].at)
    return found


class RowSlices:
    """`Slices` from rows in memory (`alerts backtest`, the tests): what SQLite computes."""

    def __init__(self, rule: WindowRule, group: GroupKey, rows: Iterable[Row]) -> None:
        self.rule = rule
        self.history = samples_of(rule, group, rows)
        self.times = [r.at for _, r in self.history]
        self.keep_values = rule.aggregate in QUANTILES

    def _between(self, start: float, end: float) -> list[Sample]:
        low = bisect.bisect_right(self.times, start)
        return self.history[low : bisect.bisect_right(self.times, end)]

    def cells(self, start: float, end: float) -> list[Cell]:
        found: dict[tuple[object, ...], list[float]] = {}
        labels: dict[tuple[object, ...], dict[str, str]] = {}
        for value, row in self._between(start, end):
            bad = is_bad(self.rule, value)
            named = tuple(row.label(d) for d in DIMENSIONS)
            key = (named, bad, place(row.values) if bad else "")
            found.setdefault(key, []).append(value)
            labels.setdefault(key, dict(zip(DIMENSIONS, named, strict=True)))
        return [
            Cell(
                labels[key],
                bool(key[1]),
                str(key[2]),
                len(values),
                math.fsum(values),
                min(values),
                max(values),
                tuple(values) if self.keep_values else (),
            )
            for key, values in found.items()
        ]

    def buckets(self, size: float, anchor: float, start: float, end: float) -> list[Bucket]:
        found: dict[int, list[Sample]] = {}
        for value, row in self._between(start, end):
            found.setdefault(int((anchor - row.at) / size), []).append((value, row))
        out: list[Bucket] = []
        for index, items in found.items():
            values = [v for v, _ in items]
            out.append(
                Bucket(
                    index,
                    len(values),
                    sum(is_bad(self.rule, v) for v in values),
                    math.fsum(values),
                    min(values),
                    max(values),
                    min(r.at for _, r in items),
                    tuple(values) if self.keep_values else (),
                )
            )
        return out

    def worst(
        self, where: Sequence[tuple[str, str]], start: float, end: float
    ) -> tuple[Example, ...]:
        inside = [
            (v, r) for v, r in self._between(start, end) if all(r.label(k) == x for k, x in where)
        ]
        return worst(self.rule, inside)[:MAX_EXAMPLES]


def triage(
    rule: WindowRule,
    group: GroupKey,
    rows: Sequence[Row],
    at: float,
    dimensions: Sequence[str] = DIMENSIONS,
) -> Triage:
    """The triage of `rule`'s `group` firing at `at`, from the history `rows` (trace rows of
    at least `lookback_s(rule)` before `at`, with `keys(rule)` and the rows' dimensions)."""
    return triage_of(rule, group, RowSlices(rule, group, rows), at, dimensions)


def triage_of(
    rule: WindowRule,
    group: GroupKey,
    slices: Slices,
    at: float,
    dimensions: Sequence[str] = DIMENSIONS,
) -> Triage:
    """The triage of `rule`'s `group` firing at `at`, from its samples' `slices`."""
    window = slices.cells(at - rule.window_s, at)
    fixed = {k for k, _ in group} | {k for k, _ in rule.where}
    segments = rank(rule, window, [d for d in dimensions if d not in fixed])
    where = segments[0].where if segments else ()
    lead = [c for c in window if _inside(c, where)]
    placed: Counter[str] = Counter()
    for cell in lead:
        if cell.bad:
            placed[cell.place] += cell.n
    layer, shares, unclear = blame(placed)
    began, open_start = onset(rule, slices, at)
    return Triage(
        samples=sum(c.n for c in window),
        bad=sum(c.n for c in window if c.bad),
        bad_when=bad_when(rule),
        segments=segments,
        onset=began,
        onset_open=open_start,
        layer=layer,
        layer_shares=shares,
        examples=slices.worst(where, at - rule.window_s, at),
        unclear=unclear,
    )


def _inside(cell: Cell, where: Sequence[tuple[str, str]]) -> bool:
    return all(cell.label(k) == value for k, value in where)


def measure(rule: WindowRule, parts: Sequence[Cell] | Sequence[Bucket]) -> float | None:
    """The rule's aggregate over cells or buckets (`engine.aggregate` of their samples)."""
    n = sum(p.n for p in parts)
    if n == 0:
        return None
    name = rule.aggregate
    if name in QUANTILES:
        return quantile(sorted(v for p in parts for v in p.values), 0.5 if name == "p50" else 0.95)
    low, high = min(p.low for p in parts), max(p.high for p in parts)
    total = math.fsum(p.total for p in parts)
    if name in ("mean", "rate"):
        return min(max(total / n, low), high)
    if name == "count":
        return total
    return low if name == "min" else high


def z_score(bad_in: int, n_in: int, bad_out: int, n_out: int) -> float:
    """Two-proportion z of the inside's bad share over the outside's (pooled); 0 when
    either side is empty or nothing varies."""
    if n_in == 0 or n_out == 0:
        return 0.0
    pooled = (bad_in + bad_out) / (n_in + n_out)
    spread = pooled * (1 - pooled) * (1 / n_in + 1 / n_out)
    if spread <= 0:
        return 0.0
    return (bad_in / n_in - bad_out / n_out) / math.sqrt(spread)


def floor_of(rule: WindowRule) -> int:
    return max(MIN_SEGMENT, rule.min_samples // 2)


def rank(
    rule: WindowRule, window: Sequence[Cell], dimensions: Sequence[str]
) -> tuple[Segment, ...]:
    """The best segment of each dimension, ranked by excess; the leader refined by a second
    dimension when that concentrates the bad samples further."""
    total_bad = sum(c.n for c in window if c.bad)
    if total_bad == 0:
        return ()
    best = [s for d in dimensions if (s := _best_of(rule, window, (), d, total_bad)) is not None]
    best.sort(key=lambda s: (-s.excess, s.where))
    if not best:
        return ()
    lead = best[0]
    inside = [c for c in window if _inside(c, lead.where)]
    refined: Segment | None = None
    for dimension in dimensions:
        if dimension == lead.where[0][0]:
            continue
        narrower = _best_of(rule, inside, lead.where, dimension, total_bad)
        if narrower is not None and (refined is None or narrower.excess > refined.excess):
            refined = narrower
    if refined is not None:
        # Counted against the whole window, as every segment is.
        refined = _segment(rule, window, refined.where, total_bad)
    ordered = ([refined] if refined is not None else []) + best
    return tuple(ordered[:SEGMENTS_TOLD])


def _best_of(
    rule: WindowRule,
    window: Sequence[Cell],
    prefix: tuple[tuple[str, str], ...],
    dimension: str,
    total_bad: int,
) -> Segment | None:
    """The value of `dimension` (within `window`) with the largest significant excess."""
    counts: Counter[str] = Counter()
    bads: Counter[str] = Counter()
    for cell in window:
        label = cell.label(dimension)
        counts[label] += cell.n
        bads[label] += cell.n if cell.bad else 0
    n, b = sum(counts.values()), sum(bads.values())
    chosen: tuple[float, str] | None = None
    for label, n_in in counts.items():
        b_in = bads[label]
        n_out, b_out = n - n_in, b - b_in
        if n_in < floor_of(rule) or n_out == 0:
            continue  # too few to lead, or the value is everywhere: nothing to set it against
        if z_score(b_in, n_in, b_out, n_out) < Z_FLOOR:
            continue
        excess = b_in - n_in * (b_out / n_out)
        if chosen is None or (excess, label) > chosen:
            chosen = (excess, label)
    if chosen is None:
        return None
    return _segment(rule, window, (*prefix, (dimension, chosen[1])), total_bad)


def _segment(
    rule: WindowRule,
    window: Sequence[Cell],
    where: tuple[tuple[str, str], ...],
    total_bad: int,
) -> Segment:
    inside = [c for c in window if _inside(c, where)]
    outside = [c for c in window if not _inside(c, where)]
    n_in, n_out = sum(c.n for c in inside), sum(c.n for c in outside)
    b_in = sum(c.n for c in inside if c.bad)
    b_out = sum(c.n for c in outside if c.bad)
    rest_rate = b_out / n_out if n_out else 0.0
    return Segment(
        where=where,
        samples=n_in,
        bad=b_in,
        bad_rate=b_in / n_in if n_in else 0.0,
        rest_bad_rate=rest_rate,
        value=measure(rule, inside),
        rest_value=measure(rule, outside),
        share=b_in / total_bad if total_bad else 0.0,
        excess=b_in - n_in * rest_rate,
    )


def blame(
    places: Mapping[str, int],
) -> tuple[str | None, tuple[tuple[str, float], ...], tuple[tuple[str, int], ...]]:
    """From the bad samples' places: the layer holding more than half of the placed ones,
    every layer's share of them (largest first), and the unplaced ones by why."""
    layers = {k: n for k, n in places.items() if k in LAYERS and n > 0}
    unclear = tuple(
        sorted(((k, n) for k, n in places.items() if k not in LAYERS and k and n > 0),
               key=lambda item: (-item[1], item[0]))
    )  # fmt: skip
    told = sum(layers.values())
    if told == 0:
        return None, (), unclear
    shares = tuple(
        (name, layers[name] / told)
        for name in sorted(layers, key=lambda n: (-layers[n], LAYERS.index(n)))
    )
    leader, share = shares[0]
    return (leader if share > 0.5 else None), shares, unclear


def crossed(rule: WindowRule, parts: Sequence[Bucket]) -> bool:
    """A window's samples cross the rule's first line (warn, else page), with enough of them."""
    if sum(p.n for p in parts) < rule.min_samples:
        return False
    value = measure(rule, parts)
    return value is not None and rule.breaches(value, first_line(rule))


def step_of(rule: WindowRule) -> float:
    """How far apart the windows of the onset's scan back are."""
    return max(60.0, rule.window_s / 10)


def stored_slices(rule: WindowRule, group: GroupKey, db: sqlite3.Connection) -> StoredSlices:
    """`Slices` of `rule`'s `group` counted by SQLite on `db`: the window's cells and its
    onset buckets in one read."""
    size = bucket_size(rule.window_s, step_of(rule))
    return StoredSlices(db, query(rule, group), size)


def bucket_size(window_s: float, step_s: float) -> float:
    """Seconds a bucket spans: divides both the step and the window (in whole milliseconds),
    about a thirtieth of the step, at least a millisecond."""
    window_ms, step_ms = max(1, round(window_s * 1000)), max(1, round(step_s * 1000))
    common = math.gcd(window_ms, step_ms)
    target = max(1, step_ms // 30)
    best = 1
    for d in range(1, math.isqrt(common) + 1):
        if common % d == 0:
            for divisor in (d, common // d):
                if divisor <= target:
                    best = max(best, divisor)
    return best / 1000


class _Timeline:
    """The buckets read so far, newest first by index, read further back on demand."""

    def __init__(self, slices: Slices, size: float, anchor: float, earliest: float) -> None:
        self.slices = slices
        self.size = size
        self.anchor = anchor
        self.earliest = earliest  # the history read never starts before it
        self.start = anchor  # read: (start, anchor]
        self.by_index: dict[int, Bucket] = {}
        self.indexes: list[int] = []  # of by_index, ascending

    def reach(self, moment: float, chunk: float) -> None:
        """Read back to `moment` (not before `earliest`), at least `chunk` seconds at a time
        (a scan back reads a few spans, not one per step)."""
        moment = max(moment, self.earliest)
        if moment >= self.start:
            return
        moment = max(self.earliest, min(moment, self.start - chunk))
        for bucket in self.slices.buckets(self.size, self.anchor, moment, self.start):
            held = self.by_index.get(bucket.index)
            self.by_index[bucket.index] = bucket if held is None else _merged(held, bucket)
        self.indexes = sorted(self.by_index)
        self.start = moment

    def between(self, low: int, high: int) -> list[Bucket]:
        """The buckets of indexes low..high (inclusive)."""
        found = self.indexes[
            bisect.bisect_left(self.indexes, low) : bisect.bisect_right(self.indexes, high)
        ]
        return [self.by_index[i] for i in found]


def _merged(one: Bucket, two: Bucket) -> Bucket:
    """A bucket split by two reads (its older part read later)."""
    return Bucket(
        one.index,
        one.n + two.n,
        one.bad + two.bad,
        one.total + two.total,
        min(one.low, two.low),
        max(one.high, two.high),
        min(one.first, two.first),
        one.values + two.values,
    )


def onset(rule: WindowRule, slices: Slices, at: float) -> tuple[float | None, bool]:
    """When the change began: in the earliest of the run of crossed windows that ends at
    `at`, the split of the bad share into a before and an after that fits best; and
    whether the run reached back to where the history read starts (the window before it
    held too few samples to say, or the lookback ended): then the change began then or
    earlier."""
    step = step_of(rule)
    size = bucket_size(rule.window_s, step)
    per_window = round(rule.window_s / size)
    per_step = round(step / size)
    earliest = at - lookback_s(rule)
    timeline = _Timeline(slices, size, at, earliest - step)
    first: float | None = None
    open_start = True  # until a window is found that had not crossed, with enough samples
    k = 0
    while at - k * step - rule.window_s >= earliest - step:
        timeline.reach(at - k * step - rule.window_s, rule.window_s)
        parts = timeline.between(k * per_step, k * per_step + per_window - 1)
        if not crossed(rule, parts):
            open_start = sum(p.n for p in parts) < rule.min_samples
            break
        first = at - k * step
        k += 1
    if first is None:
        return None, False
    # The change began inside the first crossed window (the one before it had not crossed);
    # the split is fitted over the samples from half a window before that one.
    low, high = first - rule.window_s - step, first
    timeline.reach(low - rule.window_s / 2, 0.0)
    span = timeline.between(0, int((at - (low - rule.window_s / 2)) / size))
    ordered = sorted(span, key=lambda b: b.first)
    return change_point(
        [b.first for b in ordered], [b.bad for b in ordered], low, high, [b.n for b in ordered]
    ), open_start


def change_point(
    times: Sequence[float],
    bad: Sequence[int] | Sequence[bool],
    low: float,
    high: float,
    counts: Sequence[int] | None = None,
) -> float:
    """The time in [low, high] that best splits `bad` (ordered by `times`; each point
    `counts` samples, one by default, `bad` of them bad) into two rates, by the
    log-likelihood of two Bernoulli rates against one; `low` when none is better."""
    sizes = list(counts) if counts is not None else [1] * len(times)
    n = sum(sizes)
    total = sum(int(b) for b in bad)
    best_at, best_gain = low, 0.0
    before = seen = 0
    for i, moment in enumerate(times):
        # Split before point i: the samples of points [0, i) before, [i, ...) after.
        if low <= moment <= high and 0 < seen < n:
            gain = _split_gain(before, seen, total - before, n - seen, total, n)
            if gain > best_gain:
                best_gain, best_at = gain, moment
        before += int(bad[i])
        seen += sizes[i]
    return best_at


def _log_likelihood(k: int, n: int) -> float:
    if n == 0 or k == 0 or k == n:
        return 0.0
    p = k / n
    return k * math.log(p) + (n - k) * math.log(1 - p)


def _split_gain(k1: int, n1: int, k2: int, n2: int, k: int, n: int) -> float:
    return _log_likelihood(k1, n1) + _log_likelihood(k2, n2) - _log_likelihood(k, n)
