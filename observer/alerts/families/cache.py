"""The window rules' buckets, kept between steps: read again only where rows changed.

A step needs the aggregates of the buckets its points' windows cover
(observer.alerts.buckets). The buckets a previous step read are kept, each with the
number of rows it held; in one snapshot of the history, a kept bucket is read again
when a row in it was written since the last step (the history's write count, `seq`) or
its number of rows changed (a row moved to another minute, or pruned). A step in a
steady stream so reads the last minute or two, not the whole window: its cost and its
memory do not grow with the window or the rate (docs/alerts.md#what-evaluation-costs).

Memory: per kept bucket, per trace rule, per group an `Agg` (a quantile rule's keeps
its values). A bucket before the longest window of a step's earliest point is dropped.
The window families of one service share a cache: each minute is read once.
"""

from __future__ import annotations

from collections.abc import Sequence

from observer.alerts.buckets import Agg, Aggs, Cover, aggregated, bucket_of, cover, merged
from observer.alerts.engine import GroupKey, Row
from observer.alerts.families.family import Rows
from observer.alerts.rules import WindowRule, row_keys
from observer.state.history import count_between, read_rows, written_since


class BucketCache:
    """The trace rules' aggregates per bucket of `step` seconds, and the history's write
    count when they were last brought up to date."""

    def __init__(self, rules: Sequence[WindowRule], step: float) -> None:
        self.rules = tuple(r for r in rules if not r.pipeline)
        self.keys = row_keys({r.expression.signal for r in self.rules})
        self.step = step
        self.kept: dict[int, tuple[int, dict[WindowRule, Aggs]]] = {}
        self.seq: int | None = None

    def windows(
        self, rows: Rows, wanted: Sequence[tuple[WindowRule, float]]
    ) -> dict[tuple[WindowRule, float], Aggs]:
        """The aggregates of each (rule, point)'s window, per group; the buckets kept are
        read again where their rows changed, those no window needs any more dropped."""
        step = self.step
        covers = {(rule, at): cover(rule, at, step) for rule, at in wanted}
        needed = sorted({k for c in covers.values() for k in range(c.first, c.last + 1)})
        edges: dict[tuple[float, float], list[Row]] = {}
        with rows.connection() as db:
            top, changed = written_since(db, self.seq)
            dirty = {bucket_of(at, step) for at in changed}
            for k in needed:
                count = count_between(db, k * step, (k + 1) * step)
                kept = self.kept.get(k)
                if kept is None or k in dirty or kept[0] != count:
                    read = read_rows(
                        db, k * step, (k + 1) * step, self.keys, samples=False, skip_empty=True
                    )
                    self.kept[k] = (count, {rule: aggregated(rule, read) for rule in self.rules})
            for c in covers.values():
                for edge in (c.head, c.tail):
                    if edge is not None and edge not in edges:
                        edges[edge] = read_rows(
                            db, edge[0], edge[1], self.keys, samples=False, skip_empty=True
                        )
            self.seq = top
        if wanted and self.rules:
            # Before the longest window of the earliest point no family sharing this needs it.
            horizon = min(at for _, at in wanted) - max(r.window_s for r in self.rules)
            for k in [k for k in self.kept if (k + 1) * step <= horizon]:
                del self.kept[k]
        return {key: self._merged(key[0], c, edges) for key, c in covers.items()}

    def _merged(
        self, rule: WindowRule, c: Cover, edges: dict[tuple[float, float], list[Row]]
    ) -> Aggs:
        parts: list[dict[GroupKey, Agg]] = []
        if c.head is not None:
            parts.append(aggregated(rule, edges[c.head]))
        parts.extend(self.kept[k][1][rule] for k in range(c.first, c.last + 1))
        if c.tail is not None:
            parts.append(aggregated(rule, edges[c.tail]))
        return merged(rule, parts)
