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
  (release=rc2 and query_type=pricing).
- **since when**: the onset. Scanning back from the alert in steps, the run of
  windows that had already crossed (warn or page) ends at the first such
  window; inside it, the moment that best splits the bad share into a before
  and an after (the largest likelihood ratio of two Bernoulli rates) is the
  onset: the start of the change, not the moment the rule fired.
- **whose**: the layer to blame, over the bad samples of the leading segment
  (the zero-cost rules of docs/alerts.md#triage): `index` when cited chunks are missing or stale,
  `abstention` when the answer refused while retrieval was HIGH, `retrieval`
  when the CRAG grade is LOW, `generation` when retrieval was HIGH yet the
  answer failed. The layer that holds more than half of the classified bad
  samples is named; none when no layer does.
- **examples**: the worst traces of the leading segment in the window.

No clock, no I/O: the caller reads the history (`KEYS`) and passes the rows.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from observer.alerts.engine import MAX_EXAMPLES, aggregate, group_of, in_scope, worst
from observer.alerts.rules import DIMENSIONS, LAYERS, WindowRule
from observer.state.rows import GroupKey, Row, Segment, Triage, Value

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


def lookback_s(rule: WindowRule) -> float:
    """The span of history a triage reads, ending at the alert."""
    return min(24 * 3600.0, max(2 * 3600.0, LOOKBACK_WINDOWS * rule.window_s))


def keys(rule: WindowRule) -> set[str]:
    """The row values a triage of `rule` needs."""
    return {rule.expression.signal, *LAYER_KEYS}


Sample = tuple[float, Row]  # the expression's value on a row, and the row


def is_bad(rule: WindowRule, value: float) -> bool:
    """One sample on the wrong side of the rule by itself: a true flag, a number past the
    threshold (warn's, when the rule has one: the first line it crosses)."""
    if rule.expression.is_flag:
        return value == 1.0
    line = rule.warn_threshold if rule.warn_threshold is not None else rule.threshold
    return rule.breaches(value, line)


def bad_when(rule: WindowRule) -> str:
    """What `is_bad` tests, as a person reads it: `ungrounded`, `numeric_grounding < 0.95`."""
    if rule.expression.is_flag:
        return str(rule.expression)
    line = rule.warn_threshold if rule.warn_threshold is not None else rule.threshold
    return f"{rule.expression.signal} {rule.op} {line:g}"


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


def triage(
    rule: WindowRule,
    group: GroupKey,
    rows: Sequence[Row],
    at: float,
    dimensions: Sequence[str] = DIMENSIONS,
) -> Triage:
    """The triage of `rule`'s `group` firing at `at`, from the history `rows` (trace rows of
    at least `lookback_s(rule)` before `at`, with `keys(rule)` and the rows' dimensions)."""
    history = samples_of(rule, group, rows)
    window = [(v, r) for v, r in history if at - rule.window_s < r.at <= at]
    bad = [is_bad(rule, v) for v, _ in window]
    fixed = {k for k, _ in group} | {k for k, _ in rule.where}
    segments = rank(rule, window, bad, [d for d in dimensions if d not in fixed])
    lead_rows = _inside(window, segments[0].where) if segments else window
    layer, shares = blame(rule, [(v, r) for v, r in lead_rows if is_bad(rule, v)])
    began, open_start = onset(rule, history, at)
    return Triage(
        samples=len(window),
        bad=sum(bad),
        bad_when=bad_when(rule),
        segments=segments,
        onset=began,
        onset_open=open_start,
        layer=layer,
        layer_shares=shares,
        examples=worst(rule, lead_rows)[:MAX_EXAMPLES],
    )


def _inside(window: Sequence[Sample], where: Sequence[tuple[str, str]]) -> list[Sample]:
    return [(v, r) for v, r in window if all(r.label(k) == value for k, value in where)]


def _aggregate(rule: WindowRule, values: Sequence[float]) -> float | None:
    return aggregate(rule.aggregate, values) if values else None


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
    rule: WindowRule, window: Sequence[Sample], bad: Sequence[bool], dimensions: Sequence[str]
) -> tuple[Segment, ...]:
    """The best segment of each dimension, ranked by excess; the leader refined by a second
    dimension when that concentrates the bad samples further."""
    total_bad = sum(bad)
    if total_bad == 0:
        return ()
    best: list[Segment] = []
    for dimension in dimensions:
        found = _best_of(rule, window, bad, (), dimension, total_bad)
        if found is not None:
            best.append(found)
    best.sort(key=lambda s: (-s.excess, s.where))
    if not best:
        return ()
    lead = best[0]
    inside = [i for i, (_, r) in enumerate(window) if all(r.label(k) == v for k, v in lead.where)]
    refined: Segment | None = None
    for dimension in dimensions:
        if dimension == lead.where[0][0]:
            continue
        narrower = _best_of(
            rule,
            [window[i] for i in inside],
            [bad[i] for i in inside],
            lead.where,
            dimension,
            total_bad,
        )
        if narrower is not None and (refined is None or narrower.excess > refined.excess):
            refined = narrower
    if refined is not None:
        # Counted against the whole window, as every segment is.
        refined = _segment(rule, window, bad, refined.where, total_bad)
    ordered = ([refined] if refined is not None else []) + best
    return tuple(ordered[:SEGMENTS_TOLD])


def _best_of(
    rule: WindowRule,
    window: Sequence[Sample],
    bad: Sequence[bool],
    prefix: tuple[tuple[str, str], ...],
    dimension: str,
    total_bad: int,
) -> Segment | None:
    """The value of `dimension` (within `window`) with the largest significant excess."""
    counts: Counter[str] = Counter()
    bads: Counter[str] = Counter()
    for (_, row), flagged in zip(window, bad, strict=True):
        label = row.label(dimension)
        counts[label] += 1
        bads[label] += flagged
    n, b = len(window), sum(bad)
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
    return _segment(rule, window, bad, (*prefix, (dimension, chosen[1])), total_bad)


def _segment(
    rule: WindowRule,
    window: Sequence[Sample],
    bad: Sequence[bool],
    where: tuple[tuple[str, str], ...],
    total_bad: int,
) -> Segment:
    inside: list[float] = []
    outside: list[float] = []
    b_in = b_out = 0
    for (value, row), flagged in zip(window, bad, strict=True):
        if all(row.label(k) == v for k, v in where):
            inside.append(value)
            b_in += flagged
        else:
            outside.append(value)
            b_out += flagged
    rest_rate = b_out / len(outside) if outside else 0.0
    return Segment(
        where=where,
        samples=len(inside),
        bad=b_in,
        bad_rate=b_in / len(inside) if inside else 0.0,
        rest_bad_rate=rest_rate,
        value=_aggregate(rule, inside),
        rest_value=_aggregate(rule, outside),
        share=b_in / total_bad if total_bad else 0.0,
        excess=b_in - len(inside) * rest_rate,
    )


def layer_of(values: Mapping[str, Value]) -> str | None:
    """The layer one bad sample points at (docs/alerts.md#triage), or None when it cannot tell."""
    if _positive(values.get("missing_chunks")) or _positive(values.get("stale_citations")):
        return "index"
    grade = values.get("crag_grade")
    if values.get("abstained") is True:
        return "abstention" if grade == "HIGH" or values.get("over_refusal") is True else None
    if grade == "LOW":
        return "retrieval"
    if grade == "HIGH":
        return "generation"
    return None


def _positive(value: Value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def blame(
    rule: WindowRule, bad: Sequence[Sample]
) -> tuple[str | None, tuple[tuple[str, float], ...]]:
    """The layer holding more than half of the classified bad samples, and every layer's
    share of them (largest first)."""
    counts = Counter(layer for _, row in bad if (layer := layer_of(row.values)) is not None)
    told = sum(counts.values())
    if told == 0:
        return None, ()
    shares = tuple(
        (name, counts[name] / told)
        for name in sorted(counts, key=lambda n: (-counts[n], LAYERS.index(n)))
    )
    leader, share = shares[0]
    return (leader if share > 0.5 else None), shares


def crossed(rule: WindowRule, values: Sequence[float]) -> bool:
    """A window's samples cross the rule's first line (warn, else page), with enough of them."""
    if len(values) < rule.min_samples:
        return False
    value = aggregate(rule.aggregate, values)
    line = rule.warn_threshold if rule.warn_threshold is not None else rule.threshold
    return rule.breaches(value, line)


def onset(rule: WindowRule, history: Sequence[Sample], at: float) -> tuple[float | None, bool]:
    """When the change began: in the earliest of the run of crossed windows that ends at
    `at`, the split of the bad share into a before and an after that fits best; and
    whether the run reached back to where the history read starts (the window before it
    held too few samples to say, or the lookback ended): then the change began then or
    earlier."""
    if not history:
        return None, False
    times = [r.at for _, r in history]
    step = max(60.0, rule.window_s / 10)
    first: float | None = None
    end = at
    earliest = at - lookback_s(rule)
    values = [v for v, _ in history]
    open_start = True  # until a window is found that had not crossed, with enough samples
    while end - rule.window_s >= earliest - step:
        low_i = bisect.bisect_right(times, end - rule.window_s)
        window = values[low_i : bisect.bisect_right(times, end)]
        if not crossed(rule, window):
            open_start = len(window) < rule.min_samples
            break
        first = end
        end -= step
    if first is None:
        return None, False
    bad = [is_bad(rule, v) for v, _ in history]
    # The change began inside the first crossed window (the one before it had not crossed).
    low, high = first - rule.window_s - step, first
    return change_point(times, bad, low, high), open_start


def change_point(times: Sequence[float], bad: Sequence[bool], low: float, high: float) -> float:
    """The time in [low, high] that best splits `bad` (ordered by `times`) into two rates,
    by the log-likelihood of two Bernoulli rates against one; `low` when none is better."""
    n = len(bad)
    total = sum(bad)
    best_at, best_gain = low, 0.0
    before = 0
    for i in range(n):
        # Split between i-1 and i: samples [0, i) before, [i, n) after.
        if low <= times[i] <= high and 0 < i < n:
            gain = _split_gain(before, i, total - before, n - i, total, n)
            if gain > best_gain:
                best_gain, best_at = gain, times[i]
        before += bad[i]
    return best_at


def _log_likelihood(k: int, n: int) -> float:
    if n == 0 or k == 0 or k == n:
        return 0.0
    p = k / n
    return k * math.log(p) + (n - k) * math.log(1 - p)


def _split_gain(k1: int, n1: int, k2: int, n2: int, k: int, n: int) -> float:
    return _log_likelihood(k1, n1) + _log_likelihood(k2, n2) - _log_likelihood(k, n)
