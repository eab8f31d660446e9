"""The release-regression rule's statistics, by SQLite over the history's narrow copy.

`regression.compare` works a comparison out of rows; the daemon asks SQLite for the same
numbers (observer.alerts.families.release). They used to be read from the history's
JSON, every row of the rule's 12 hours parsed at every comparison: 15-17 s of CPU every
15 minutes at 30 answers a second, and ten times that at 300. They are read from
`history_values` (observer.state.values): the label sets a release, an environment and a
group name are found once among `label_sets` (a few rows), and the history is read as
a range of event time, one integer a row to tell its set, each signal its own column.

Each group is still summed by SQLite in event-time order, as before: the set ids map to
their group's number inside the query, so the float sums come out the same.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from observer.state.rows import NO_LABEL
from observer.state.values import column, columns

CellStats = dict[tuple[tuple[str, ...], str], dict[str, tuple[int, float, float]]]
Sets = dict[int, Mapping[str, str]]


def label_sets(db: sqlite3.Connection, environment: str | None = None) -> Sets:
    """Each label set (of one environment): its environment, query type and dimensions."""
    query = "SELECT id, environment, query_type, dims FROM label_sets"
    found: Sets = {}
    rows = (
        db.execute(query + " WHERE environment = ?", (environment,))
        if environment is not None
        else db.execute(query)
    )
    for set_id, env, query_type, dims in rows:
        labels = {str(k): str(v) for k, v in (orjson.loads(dims) if dims else {}).items()}
        labels["environment"], labels["query_type"] = str(env), str(query_type)
        found[int(set_id)] = labels
    return found


def _ids(ids: Sequence[int]) -> str:
    """A list of set ids as SQL (integers only: no parameter needed)."""
    return ", ".join(str(int(i)) for i in ids) or "NULL"


def _signal(db: sqlite3.Connection, name: str) -> str:
    """The signal's column, or NULL while no row has had it."""
    found = column(name)
    return found if found in columns(db) else "NULL"


def first_seen(
    db: sqlite3.Connection, dimension: str, start: float, end: float
) -> dict[str, dict[str, float]]:
    """Per environment, each value of `dimension` among the trace rows in (start, end] and
    the event time it was first seen (`regression.releases`)."""
    sets = label_sets(db)
    found: dict[str, dict[str, float]] = {}
    for set_id, at in db.execute(
        "SELECT labels, MIN(at) FROM history_values WHERE at > ? AND at <= ? GROUP BY labels",
        (start, end),
    ):
        labels = sets.get(int(set_id))
        value = labels.get(dimension, NO_LABEL) if labels is not None else NO_LABEL
        if labels is None or value == NO_LABEL:
            continue
        seen = found.setdefault(labels["environment"], {})
        seen[value] = min(float(at), seen.get(value, float("inf")))
    return found


def release_stats(
    db: sqlite3.Connection,
    *,
    environment: str,
    dimension: str,
    new: str,
    before: str,
    since: float,
    baseline_s: float,
    groups: Sequence[str],
    signals: Sequence[str],
    start: float,
    end: float,
) -> CellStats:
    """The count, sum and sum of squares of each signal per group and period ("new",
    "during", "earlier"), as `regression.compare` computes them from rows."""
    sets = label_sets(db, environment)
    new_ids = [i for i, s in sets.items() if s.get(dimension, NO_LABEL) == new]
    before_ids = [i for i, s in sets.items() if s.get(dimension, NO_LABEL) == before]
    keys: dict[tuple[str, ...], int] = {}
    number = {
        i: keys.setdefault(tuple(sets[i].get(g, NO_LABEL) for g in groups), len(keys))
        for i in (*new_ids, *before_ids)
    }
    if not number:
        return {}
    values = [_signal(db, s) for s in signals]
    aggregates = ", ".join(f"COUNT({v}), TOTAL({v}), TOTAL({v} * {v})" for v in values)
    group = " ".join(f"WHEN {i} THEN {n}" for i, n in number.items())
    new_sql, all_sql = _ids(new_ids), _ids(list(number))
    query = (
        f"SELECT CASE labels {group} END AS g, "
        f"CASE WHEN labels IN ({new_sql}) THEN 'new' WHEN at >= :since THEN 'during' "
        f"ELSE 'earlier' END AS period, {aggregates} "
        f"FROM history_values WHERE at > :start AND at <= :end AND labels IN ({all_sql}) "
        f"AND (labels IN ({new_sql}) OR at > :since - :baseline) GROUP BY g, period"
    )
    parameters: dict[str, Any] = {
        "since": since,
        "baseline": baseline_s,
        "start": start,
        "end": end,
    }
    named = {n: key for key, n in keys.items()}
    out: CellStats = {}
    for record in db.execute(query, parameters):
        numbers = record[2:]
        out[(named[int(record[0])], str(record[1]))] = {
            name: (int(numbers[3 * i]), float(numbers[3 * i + 1]), float(numbers[3 * i + 2]))
            for i, name in enumerate(signals)
            if numbers[3 * i]
        }
    return out


def release_rows(
    db: sqlite3.Connection,
    *,
    environment: str,
    dimension: str,
    value: str,
    where: Sequence[tuple[str, str]],
    signal: str,
    start: float,
    end: float,
    highest: bool,
    limit: int,
) -> list[tuple[str, str | None, float]]:
    """The `limit` rows of one release (and group) whose `signal` is highest (or lowest),
    the most recent first among equals: (trace_id, project_id, value)."""
    wanted = [(dimension, value), *where]
    ids = [
        i
        for i, labels in label_sets(db, environment).items()
        if all(labels.get(k, NO_LABEL) == v for k, v in wanted)
    ]
    order = "DESC" if highest else "ASC"
    query = (
        f"SELECT h.trace_id, h.project_id, v.v FROM (SELECT trace, at, {_signal(db, signal)} "
        f"AS v FROM history_values WHERE at > ? AND at <= ? AND labels IN ({_ids(ids)}) "
        f"AND v IS NOT NULL ORDER BY v {order}, at DESC LIMIT ?) AS v "
        f"JOIN history AS h ON h.rowid = v.trace ORDER BY v.v {order}, v.at DESC"
    )
    return [(str(t), p, float(v)) for t, p, v in db.execute(query, (start, end, limit))]
