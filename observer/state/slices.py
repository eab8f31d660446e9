"""A window rule's samples of one group, aggregated by SQLite (observer.alerts.triage).

A page's triage needs counts, not rows: per combination of labels, badness and layer
the samples' count, sum, min and max (`Cell`); per stretch of event time the same
(`Bucket`); the worst few traces of a segment. Reading the rows into Python and
decoding each one's JSON cost seconds at a busy service (bench/triage.py); SQLite
reads the one signal a rule watches from the history's narrow copy
(observer.state.values: a column a value, the label set one number, the place kept
with the row) and groups the rows where they lie, on the evaluator's own connection.
The label sets' text is read once for the ids a read returns.

What a sample is, is `alerts.rules.Expression.value` and `alerts.triage.is_bad`,
written in SQL (`Query`): a row without the signal (unknown, DESIGN's "unknown is not
zero") is no sample. Pure SQL building; the queries run on the caller's connection.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from observer.state.rows import NO_LABEL, Example
from observer.state.values import PLACES, column, columns

_NAME: Final = re.compile(r"^[a-z_][a-z0-9_]*$")
_OPS: Final = frozenset({">", ">=", "<", "<=", "==", "!="})
# A dimension that is a column of the history; the others live in its dims JSON.
_COLUMNS: Final = ("environment", "query_type")


@dataclass(frozen=True, slots=True)
class Cell:
    """The samples of a window that share every label, their badness and their place."""

    labels: Mapping[str, str]  # environment, query_type and the row's dims (absent: none)
    bad: bool
    place: str  # a bad sample's layer or why it has none (`alerts.triage.place`); "" if good
    n: int
    total: float
    low: float
    high: float
    values: tuple[float, ...] = ()  # only for a quantile (read from rows, not SQL)

    def label(self, name: str) -> str:
        return self.labels.get(name, NO_LABEL)


@dataclass(frozen=True, slots=True)
class Bucket:
    """The samples of one stretch of event time: index 0 is (anchor - size, anchor]."""

    index: int
    n: int
    bad: int
    total: float
    low: float
    high: float
    first: float  # the earliest sample's event time
    values: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Part:
    """The samples of one stretch of a window that share their labels and badness."""

    index: int
    labels: Mapping[str, str]
    bad: bool
    n: int
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class Query:
    """A rule's samples of one group, as SQL: the signal (and the comparison that makes it
    a flag), what makes a sample bad, and the labels it must have."""

    signal: str
    op: str | None  # the expression's comparison, if any
    operand: float | str | None
    bad_op: str | None  # None: a flag, bad when true; else bad when `value bad_op line`
    line: float
    scope: tuple[tuple[str, str], ...]  # the group's and the rule's `where` labels
    highest: bool = False  # the worst numbers are the highest (op > or >=), else the lowest

    def __post_init__(self) -> None:
        for name in (self.signal, *(k for k, _ in self.scope)):
            if not _NAME.match(name):
                raise ValueError(f"not a signal or dimension: {name!r}")
        for op in (self.op, self.bad_op):
            if op is not None and op not in _OPS:
                raise ValueError(f"not a comparison: {op!r}")


def label_sql(name: str) -> str:
    """A dimension as SQL: a column, or the row's dims JSON ('none' when absent)."""
    if not _NAME.match(name):
        raise ValueError(f"not a dimension: {name!r}")
    if name in _COLUMNS:
        return name
    return f"coalesce(json_extract(CAST(dims AS TEXT), '$.{name}'), '{NO_LABEL}')"


def _field(name: str) -> str:
    return f"json_extract(CAST(signals AS TEXT), '$.{name}')"


def _sql_op(op: str) -> str:
    return {"==": "=", "!=": "<>"}.get(op, op)


def _value_sql(query: Query, raw: str) -> tuple[str, dict[str, Any]]:
    """The expression's value of a row whose signal is `raw` (a column, or NULL): a number,
    1.0 or 0.0 for a comparison, NULL when the row has none (or, without a comparison, a
    text)."""
    if query.op is None:
        return f"CASE WHEN typeof({raw}) IN ('integer', 'real') THEN {raw} + 0.0 END", {}
    if isinstance(query.operand, str):
        compare = f"typeof({raw}) = 'text'"
    else:
        compare = f"typeof({raw}) IN ('integer', 'real')"
    return (
        f"CASE WHEN {raw} IS NULL THEN NULL WHEN {compare} AND {raw} {_sql_op(query.op)} "
        ":operand THEN 1.0 ELSE 0.0 END",
        {"operand": query.operand},
    )


def _bad_sql(query: Query) -> str:
    if query.bad_op is None:
        return "(v = 1.0)"
    return f"(v {_sql_op(query.bad_op)} :line)"


# The columns of a sample a read may use: its time, its history row, its label set.
_ROW: Final = "at, trace, labels, place"


def _raw(db: sqlite3.Connection, signal: str) -> str:
    """The signal's column of `history_values`; NULL (no samples) while no row has had it."""
    name = column(signal)
    return name if name in columns(db) else "NULL"


def _in_scope(
    conditions: Sequence[tuple[str, str]], parameters: dict[str, Any], prefix: str
) -> str:
    """The rows whose label set has each (dimension, value) of `conditions`."""
    if not conditions:
        return ""
    tests = []
    for i, (key, wanted) in enumerate(conditions):
        tests.append(f"{label_sql(key)} = :{prefix}{i}")
        parameters[f"{prefix}{i}"] = wanted
    return f"labels IN (SELECT id FROM label_sets WHERE {' AND '.join(tests)})"


def _samples(
    db: sqlite3.Connection,
    query: Query,
    where: Sequence[tuple[str, str]] = (),
    extra: str = "",
    columns: str = _ROW,
) -> tuple[str, dict[str, Any]]:
    """The rows of the scope (and `where`) in (:start, :end] with `columns`, their value
    `v` and badness `bad`, read from `history_values` (observer.state.values)."""
    value, parameters = _value_sql(query, _raw(db, query.signal))
    conditions = ["at > :start", "at <= :end"]
    for labels, prefix in ((query.scope, "scope"), (where, "where")):
        if found := _in_scope(labels, parameters, prefix):
            conditions.append(found)
    if extra:
        conditions.append(extra)
    parameters["line"] = query.line
    # LIMIT -1 keeps SQLite from flattening the query into the ones around it, which
    # would work out `v` once for every mention of it.
    inner = (
        f"SELECT {columns}, {value} AS v FROM history_values "
        f"WHERE {' AND '.join(conditions)} LIMIT -1 OFFSET 0"
    )
    return (
        f"SELECT *, {_bad_sql(query)} AS bad FROM ({inner}) WHERE v IS NOT NULL",
        parameters,
    )


LabelSet = tuple[object, object, bytes | None]  # environment, query type, dimensions' JSON


def _label_sets(db: sqlite3.Connection, ids: Collection[int]) -> dict[int, LabelSet]:
    """The environment, query type and dimensions' JSON of each label set."""
    found: dict[int, LabelSet] = {}
    listed = sorted(ids)
    for i in range(0, len(listed), 500):
        chunk = listed[i : i + 500]
        marks = ", ".join("?" * len(chunk))
        for set_id, environment, query_type, dims in db.execute(
            f"SELECT id, environment, query_type, dims FROM label_sets WHERE id IN ({marks})",
            chunk,
        ):
            found[int(set_id)] = (environment, query_type, dims)
    return found


def _labels(
    environment: object, query_type: object, dims: bytes | None, seen: dict[Any, Any]
) -> Mapping[str, str]:
    key = (environment, query_type, dims)
    found = seen.get(key)
    if found is None:
        decoded = orjson.loads(dims) if dims else {}
        found = {str(k): str(v) for k, v in decoded.items()}
        found["environment"] = str(environment)
        found["query_type"] = str(query_type)
        seen[key] = found
    return found


def window(
    db: sqlite3.Connection,
    query: Query,
    size: float,
    start: float,
    end: float,
) -> tuple[list[Cell], list[Bucket], list[Part]]:
    """The scope's samples in (start, end] grouped by labels, badness and place (`Cell`),
    by stretch of `size` seconds back from `end` (`Bucket`), and by both (`Part`, where
    the worst samples lie), in one read: a page's window is the first span its onset
    reads. SQLite groups by the label set, the stretch and a bad sample's place."""
    samples, parameters = _samples(db, query)
    sql = (
        "SELECT CAST((:end - at) / :size AS INTEGER) AS b, labels, bad, "
        "CASE WHEN bad THEN place END AS p, COUNT(*), TOTAL(v), MIN(v), MAX(v), MIN(at) "
        f"FROM ({samples}) GROUP BY b, labels, bad, p"
    )
    parameters.update(size=size, start=start, end=end)
    read = db.execute(sql, parameters).fetchall()
    sets = _label_sets(db, {int(r[1]) for r in read})
    seen: dict[Any, Any] = {}
    cells: dict[tuple[Any, ...], list[Any]] = {}
    buckets: dict[int, list[Any]] = {}
    parts: list[Part] = []
    for b, labels, bad, p, n, total, low, high, first in read:
        e, q, d = sets[labels]
        parts.append(Part(b, _labels(e, q, d, seen), bool(bad), n, low, high))
        cell = cells.get((labels, bad, p))
        if cell is None:
            cells[(labels, bad, p)] = [n, [total], low, high]
        else:
            cell[0] += n
            cell[1].append(total)
            cell[2], cell[3] = min(cell[2], low), max(cell[3], high)
        bucket = buckets.get(b)
        if bucket is None:
            buckets[b] = [n, n if bad else 0, [total], low, high, first]
        else:
            bucket[0] += n
            bucket[1] += n if bad else 0
            bucket[2].append(total)
            bucket[3], bucket[4] = min(bucket[3], low), max(bucket[4], high)
            bucket[5] = min(bucket[5], first)
    return (
        [
            Cell(
                _labels(*sets[labels], seen),
                bool(bad),
                "" if p is None else PLACES[p],
                n,
                math.fsum(t),
                float(lo),
                float(hi),
            )
            for (labels, bad, p), (n, t, lo, hi) in cells.items()
        ],
        [
            Bucket(int(b), n, k, math.fsum(t), float(lo), float(hi), float(first))
            for b, (n, k, t, lo, hi, first) in buckets.items()
        ],
        parts,
    )


def nearest(
    query: Query, parts: Sequence[Part], where: Sequence[tuple[str, str]], limit: int
) -> set[int] | None:
    """The stretches of a window (`Part.index`) that hold its `limit` worst samples inside
    `where` in `worst`'s order; None when its parts cannot tell. For a flag: the newest
    stretches with that many true samples. Else: the `limit`-th lowest of the parts'
    lowest values bounds the worst (that many samples are at or below it), and only
    parts reaching it can hold them (the highest, for a rule on the highest)."""
    inside = [p for p in parts if all(p.labels.get(k, NO_LABEL) == v for k, v in where)]
    if query.bad_op is None:
        bad = sorted((p for p in inside if p.bad), key=lambda p: p.index)
        seen = 0
        for part in bad:
            seen += part.n
            if seen >= limit:
                return {p.index for p in bad if p.index <= part.index}
        return {p.index for p in bad}
    if len(inside) < limit:
        return None
    if query.highest:
        line = sorted((p.high for p in inside), reverse=True)[limit - 1]
        return {p.index for p in inside if p.high >= line}
    line = sorted(p.low for p in inside)[limit - 1]
    return {p.index for p in inside if p.low <= line}


def buckets(
    db: sqlite3.Connection, query: Query, size: float, anchor: float, start: float, end: float
) -> list[Bucket]:
    """The scope's samples in (start, end] by stretch of `size` seconds back from `anchor`."""
    samples, parameters = _samples(db, query, columns="at")
    sql = (
        "SELECT CAST((:anchor - at) / :size AS INTEGER) AS b, COUNT(*), SUM(bad), TOTAL(v), "
        f"MIN(v), MAX(v), MIN(at) FROM ({samples}) GROUP BY b"
    )
    parameters.update(anchor=anchor, size=size, start=start, end=end)
    return [
        Bucket(int(b), int(n), int(k), float(t), float(lo), float(hi), float(first))
        for b, n, k, t, lo, hi, first in db.execute(sql, parameters)
    ]


def worst(
    db: sqlite3.Connection,
    query: Query,
    where: Sequence[tuple[str, str]],
    start: float,
    end: float,
    limit: int,
    within: tuple[float, Collection[int]] | None = None,
) -> tuple[Example, ...]:
    """The `limit` worst samples inside `where` in (start, end], as `engine.worst` orders
    them: for a flag the most recent true ones, else by value (the highest first when
    `query.highest`, else the lowest), the most recent first among equals. `within`:
    (size, indexes) the stretches of `size` seconds back from `end` that hold them
    (`nearest`): only those are read."""
    extra = ""
    parameters: dict[str, Any] = {"anchor": end}
    if within is not None:
        size, indexes = within
        if not indexes:
            return ()
        listed = ", ".join(str(int(i)) for i in sorted(indexes))
        extra = f"CAST((:anchor - at) / :size AS INTEGER) IN ({listed})"
        # A stretch wider on each side: the condition above says which rows are in.
        start = max(start, end - (max(indexes) + 2) * size)
        end = min(end, end - (min(indexes) - 1) * size)
        parameters["size"] = size
    samples, found = _samples(db, query, where, extra)
    parameters.update(found)
    if query.bad_op is None:
        order = "WHERE v = 1.0 ORDER BY at DESC"
    else:
        order = f"ORDER BY v {'DESC' if query.highest else 'ASC'}, at DESC"
    sql = f"SELECT trace, v FROM ({samples}) {order} LIMIT :limit"
    parameters.update(start=start, end=end, limit=limit)
    chosen = db.execute(sql, parameters).fetchall()
    out = []
    for trace, v in chosen:
        trace_id, project_id = db.execute(
            "SELECT trace_id, project_id FROM history WHERE rowid = ?", (trace,)
        ).fetchone()
        out.append(Example(str(trace_id), project_id, float(v)))
    return tuple(out)


def places(
    db: sqlite3.Connection, query: Query, where: Sequence[tuple[str, str]], start: float, end: float
) -> dict[str, int]:
    """How many bad samples inside `where` in (start, end] each place holds."""
    samples, parameters = _samples(db, query, where)
    parameters.update(start=start, end=end)
    sql = f"SELECT place, COUNT(*) FROM ({samples}) WHERE bad GROUP BY place"
    return {PLACES[p]: int(n) for p, n in db.execute(sql, parameters)}


class StoredSlices:
    """`alerts.triage.Slices` over the stored history, on the caller's connection (the
    evaluator's own reader, or the state file's under its lock)."""

    def __init__(
        self,
        db: sqlite3.Connection,
        query: Query,
        size: float,
        examples: int = 5,
    ) -> None:
        self.db = db
        self.query = query
        self.size = size  # the onset's stretch of time (`alerts.triage.bucket_size`)
        self.examples = examples
        # The window's buckets, read with its cells: (size, anchor, start, end) -> buckets.
        self._read: dict[tuple[float, float, float, float], list[Bucket]] = {}
        self._parts: dict[tuple[float, float], list[Part]] = {}  # (start, end) -> its parts

    def cells(self, start: float, end: float) -> list[Cell]:
        found, self._read[(self.size, end, start, end)], self._parts[(start, end)] = window(
            self.db, self.query, self.size, start, end
        )
        return found

    def buckets(self, size: float, anchor: float, start: float, end: float) -> list[Bucket]:
        read = self._read.pop((size, anchor, start, end), None)
        if read is not None:
            return read
        return buckets(self.db, self.query, size, anchor, start, end)

    def worst(
        self, where: Sequence[tuple[str, str]], start: float, end: float
    ) -> tuple[Example, ...]:
        parts = self._parts.get((start, end))
        near = None if parts is None else nearest(self.query, parts, where, self.examples)
        within = None if near is None else (self.size, near)
        return worst(self.db, self.query, where, start, end, self.examples, within)
