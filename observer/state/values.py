"""The history's values by column: what a page's triage counts (observer.state.slices).

Each trace row of the history keeps its values as one JSON object (`history.signals`).
Counting a window's samples from it meant parsing every row's JSON and grouping by its
label text, more than half a second a page at 30 answers a second (bench/triage.py).
So every trace row is kept a second time, narrow, as it is written (`write_values`):

- `history_values`: one row per history row, ordered by event time (its key: `at`, then
  the history row's rowid `trace`), its label set's id (`labels`) and each of its
  values in a column of its own, `v_<name>`, stored as SQLite's JSON functions read it
  from the JSON (a flag 1 or 0, a number, a text, a list or object as its JSON text; a
  non-finite number, which the JSON holds as null, none), and where the row would point
  as a bad sample (`place`: a layer or why none, its index in `PLACES`). A window's read
  is a range of one b-tree, a few columns a row, no JSON.
  A value name not seen before gets its column when first written; a name no rule could
  watch (not lowercase letters, digits and underscores) gets none.
- `label_sets`: each distinct environment, query type and dimensions (the JSON the
  history keeps, `{}` for none) once, so the triage groups by one integer, not by text.
  A set keeps `last_at`, at most `LAST_AT_SLACK_S` older than the newest row written
  with it; housekeeping forgets a set with the last of its rows.

A re-scored trace replaces its copy (its old time and values go); the judge's merged
values replace it the same way (`history.write_row`); pruning the history prunes both.
A state file of schema 5 or older is filled from its history at its first open by this version
(`fill`, docs/operating.md#upgrading).
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Final

import orjson

from observer.state.rows import Row, Value

VALUES_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS label_sets (
    id INTEGER PRIMARY KEY,
    environment TEXT NOT NULL,
    query_type TEXT NOT NULL,
    dims BLOB NOT NULL,
    last_at REAL NOT NULL,
    UNIQUE (environment, query_type, dims)
);
CREATE TABLE IF NOT EXISTS history_values (
    at REAL NOT NULL,
    trace INTEGER NOT NULL,
    labels INTEGER NOT NULL,
    place INTEGER NOT NULL,
    PRIMARY KEY (at, trace)
) WITHOUT ROWID;
"""

# A value name that can be a column (and a rule's signal: observer.state.slices checks so).
NAME: Final = re.compile(r"^[a-z_][a-z0-9_]*$")
# The label set of a row without dimensions.
NO_DIMS_JSON: Final = b"{}"
_INT64: Final = 2**63
# Every answer of `place`, by its index (the `place` column): never reorder, only append.
PLACES: Final = (
    "index",
    "abstention",
    "refused_without_evidence",
    "no_retrieval_score",
    "ambiguous",
    "retrieval",
    "generation",
)
_PLACE_CODE: Final = {name: i for i, name in enumerate(PLACES)}
# How far a label set's `last_at` may trail its newest row (`label_set`).
LAST_AT_SLACK_S: Final = 3600.0
# Remembered between writes: each value name's column, each set of columns' INSERT.
_COLUMN_OF: dict[str, str | None] = {}
_INSERTS: dict[tuple[str, ...], str] = {}


def _positive(value: Value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def place(values: Mapping[str, Value]) -> str:
    """Where one bad sample points (docs/alerts.md#triage): a layer, or why none
    (a key of `alerts.triage.UNPLACED`)."""
    if _positive(values.get("missing_chunks")) or _positive(values.get("stale_citations")):
        return "index"
    grade = values.get("crag_grade")
    if values.get("abstained") is True:
        if grade == "HIGH" or values.get("over_refusal") is True:
            return "abstention"
        if grade == "LOW":
            return "refused_without_evidence"
        return "no_retrieval_score" if grade is None else "ambiguous"
    if grade == "LOW":
        return "retrieval"
    if grade == "HIGH":
        return "generation"
    return "no_retrieval_score" if grade is None else "ambiguous"


def column(name: str) -> str:
    """The column of a value name (a prefix keeps it off `at`, `trace` and `labels`)."""
    if not NAME.match(name):
        raise ValueError(f"not a value name: {name!r}")
    return f"v_{name}"


def stored(value: Value | object) -> object:
    """A value as `json_extract` reads it back from the history's JSON (orjson writes a
    non-finite number as null); a list or object as its JSON text."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else float(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return orjson.dumps(value).decode()


def columns(db: sqlite3.Connection) -> set[str]:
    """The value columns `history_values` has (`v_<name>`)."""
    found = {str(row[1]) for row in db.execute("PRAGMA table_info(history_values)")}
    return {name for name in found if name.startswith("v_")}


def label_set(db: sqlite3.Connection, row: Row) -> int:
    """The id of the row's label set, added if new. Its `last_at` is moved forward only
    when the row is more than `LAST_AT_SLACK_S` newer (a write of the set's page an hour,
    not one a trace): no row of a set is newer than its `last_at` and the slack."""
    dims = orjson.dumps(dict(row.dims)) if row.dims else NO_DIMS_JSON
    labels = (row.environment, row.query_type, dims)
    found = db.execute(
        "SELECT id, last_at FROM label_sets WHERE environment = ? AND query_type = ? AND dims = ?",
        labels,
    ).fetchone()
    if found is not None and found[1] >= row.at - LAST_AT_SLACK_S:
        return int(found[0])
    ((set_id,),) = db.execute(
        "INSERT INTO label_sets (environment, query_type, dims, last_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (environment, query_type, dims) DO UPDATE SET "
        "last_at = max(last_at, excluded.last_at) RETURNING id",
        (*labels, row.at),
    ).fetchall()
    return int(set_id)


def _column_of(name: str) -> str | None:
    """A value name's column, None for a name that cannot be one (remembered: a row's
    names are the same few every time)."""
    if name in _COLUMN_OF:
        return _COLUMN_OF[name]
    if len(_COLUMN_OF) > 10_000:
        _COLUMN_OF.clear()
    found = _COLUMN_OF[name] = column(name) if NAME.match(name) else None
    return found


def _insert(names: tuple[str, ...]) -> str:
    found = _INSERTS.get(names)
    if found is None:
        if len(_INSERTS) > 1_000:
            _INSERTS.clear()
        listed = "".join(f", {c}" for c in names)
        found = _INSERTS[names] = (
            f"INSERT INTO history_values (at, trace, labels, place{listed}) "
            f"VALUES (?, ?, ?, ?{', ?' * len(names)})"
        )
    return found


def write_values(db: sqlite3.Connection, trace: int, row: Row, labels: int | None = None) -> None:
    """The narrow copy of history row `trace`, inside the caller's transaction (any old
    copy deleted before: `delete_values`); `labels`: its label set's id, when known. On
    every scored trace's write: kept lean."""
    if labels is None:
        labels = label_set(db, row)
    names: list[str] = []
    values: list[object] = [row.at, trace, labels, _PLACE_CODE[place(row.values)]]
    known = _COLUMN_OF
    for key, value in row.values.items():
        name = known[key] if key in known else _column_of(key)
        if name is None:
            continue
        kind = type(value)
        if kind is float:
            if not math.isfinite(value):  # type: ignore[arg-type]
                continue
        elif kind is not bool and kind is not str and (value := stored(value)) is None:  # type: ignore[assignment]
            continue
        names.append(name)
        values.append(value)
    sql = _insert(tuple(names))
    try:
        db.execute(sql, values)
    except sqlite3.OperationalError as error:
        if "has no column named" not in str(error):
            raise
        # A value name first written: its column, then the row (a failed statement
        # leaves the caller's transaction as it was).
        for name in sorted(set(names) - columns(db)):
            db.execute(f"ALTER TABLE history_values ADD COLUMN {name}")
        db.execute(sql, values)


def delete_values(db: sqlite3.Connection, trace: int, at: float) -> None:
    db.execute("DELETE FROM history_values WHERE at = ? AND trace = ?", (at, trace))


def prune_values(db: sqlite3.Connection, before: float) -> None:
    """Forget the copies of rows older than `before`, and the label sets no row at or
    after `before` can have (`label_set`)."""
    db.execute("DELETE FROM history_values WHERE at < ?", (before,))
    db.execute("DELETE FROM label_sets WHERE last_at < ?", (before - LAST_AT_SLACK_S,))


def _history_rows(db: sqlite3.Connection, chunk: int) -> Iterable[tuple[int, Row, bytes | None]]:
    """Every trace row of the history with its rowid and its dimensions' JSON, `chunk`
    at a time."""
    after = -(2**63)
    while True:
        found = db.execute(
            "SELECT rowid, at, environment, query_type, signals, dims FROM history "
            "WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, chunk),
        ).fetchall()
        if not found:
            return
        for rowid, at, environment, query_type, signals, dims in found:
            decoded: Mapping[str, str] = orjson.loads(dims) if dims else {}
            yield (
                int(rowid),
                Row(float(at), orjson.loads(signals), None, None, environment, query_type, decoded),
                dims,
            )
        after = int(found[-1][0])


def fill(db: sqlite3.Connection, chunk: int = 10_000) -> int:
    """`history_values` and `label_sets` made anew from the history, the way each row is
    written (the migration to schema 6); how many rows."""
    for statement in VALUES_SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute("DELETE FROM history_values")
    db.execute("DELETE FROM label_sets")
    sets: dict[tuple[str, str, bytes | None], int] = {}  # the label sets written so far
    newest: dict[int, float] = {}  # each set's newest row
    n = 0
    for trace, row, dims in _history_rows(db, chunk):
        key = (row.environment, row.query_type, dims)
        if key not in sets:
            sets[key] = label_set(db, row)
        found = sets[key]
        write_values(db, trace, row, found)
        newest[found] = max(newest.get(found, row.at), row.at)
        n += 1
    db.executemany(
        "UPDATE label_sets SET last_at = ? WHERE id = ?", [(at, i) for i, at in newest.items()]
    )
    return n
