"""The signal history in the state file: rows for the alert rules, only what they read."""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import replace
from pathlib import Path

import orjson

from observer.alerts.engine import Row
from observer.state import State
from observer.state.rows import NO_DIMS


def test_rows_keep_only_the_signals_asked_for(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    try:
        for n in range(3):
            values = {"ungrounded": n == 1, "confidence": 0.5, "crag_grade": "HIGH"}
            state.history.put(Row(100.0 + n, values, f"t{n}", None, "production", "howto"))
        state.history.add_samples(101.5, {"lag_s": 12.0, "scores_dropped": 0.0})
        everything = state.history.rows(0, 1000)
        asked = state.history.rows(0, 1000, {"ungrounded", "lag_s"})
    finally:
        state.close()
    assert [r.at for r in everything] == [100.0, 101.0, 101.5, 101.5, 102.0]
    assert everything[0].values == {"ungrounded": False, "confidence": 0.5, "crag_grade": "HIGH"}
    # The same rows in the same order, but the samples no rule reads; values cut down.
    assert [r.at for r in asked] == [100.0, 101.0, 101.5, 102.0]
    assert [dict(r.values) for r in asked] == [
        {"ungrounded": False},
        {"ungrounded": True},
        {"lag_s": 12.0},
        {"ungrounded": False},
    ]
    assert [(r.trace_id, r.environment, r.query_type) for r in asked if r.trace_id] == [
        (f"t{n}", "production", "howto") for n in range(3)
    ]


def test_a_reader_reads_without_the_writers_lock_and_leaves_out_rows_no_rule_reads(
    tmp_path: Path,
) -> None:
    state = State(tmp_path / "s.sqlite")
    reader = state.history.reader()
    try:
        state.history.put_many(
            [
                Row(100.0, {"ungrounded": True}, "t0", None, "production", "howto"),
                Row(101.0, {"confidence": 0.5}, "t1", None, "production", "howto"),
            ]
        )
        state.history.add_samples(100.5, {"lag_s": 3.0})
        found: list[list[Row]] = []
        # A writer holds the lock the poll loop, the dispatcher and the judge share.
        with state._lock:
            thread = threading.Thread(
                target=lambda: found.append(reader.rows(0, 1000, {"ungrounded", "lag_s"}))
            )
            thread.start()
            thread.join(5)
            assert not thread.is_alive(), "the reader waited for the writers' lock"
        (rows,) = found
        assert [(r.at, dict(r.values)) for r in rows] == [
            (100.0, {"ungrounded": True}),
            (100.5, {"lag_s": 3.0}),
        ]  # t1 holds none of the signals asked for
        assert (
            reader.rows(0, 1000, {"ungrounded"}, samples=False)
            == state.history.rows(0, 1000, {"ungrounded"}, samples=False)[:1]
        )
        assert [r.at for r in reader.rows(0, 1000, traces=False)] == [100.5]
    finally:
        reader.close()
        reader.close()  # idempotent
        state.close()


DIMS = {"trace_name": "rag-query", "release": "2026.12.03-rc2", "model": "gpt-4o-mini"}


def test_dimensions_go_through_the_state_file(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    try:
        state.history.put_many(
            [
                Row(100.0, {"ungrounded": True}, "t1", "p", "production", "faq", DIMS),
                Row(101.0, {"ungrounded": False}, "t2", "p", "production", "faq", dict(DIMS)),
                Row(102.0, {"ungrounded": False}, "t3", "p", "production", "faq"),
            ]
        )
        merged = state.history.merge("t1", {"faithfulness": 0.4})
        rows = state.history.rows(0, 1000)
        raw = state.history.reader()
        try:
            read = raw.rows(0, 1000, {"ungrounded"})
        finally:
            raw.close()
        stored = (
            sqlite3.connect(tmp_path / "s.sqlite")
            .execute("SELECT trace_id, dims FROM history ORDER BY at")
            .fetchall()
        )
    finally:
        state.close()
    assert merged is not None and dict(merged.dims) == DIMS
    assert merged.values == {"ungrounded": True, "faithfulness": 0.4}
    for found in (rows, read):
        assert [dict(r.dims) for r in found] == [DIMS, DIMS, {}]
        # One mapping per distinct set within a read; none shares the one empty mapping.
        assert found[0].dims is found[1].dims and found[2].dims is NO_DIMS
    assert [(t, d and orjson.loads(d)) for t, d in stored] == [
        ("t1", DIMS),
        ("t2", DIMS),
        ("t3", None),
    ]


# The history table of a state file written before dimensions.
OLD_HISTORY = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
CREATE TABLE history (
    trace_id TEXT PRIMARY KEY,
    at REAL NOT NULL,
    project_id TEXT,
    environment TEXT NOT NULL,
    query_type TEXT NOT NULL,
    signals BLOB NOT NULL
);
INSERT INTO history VALUES ('old', 100.0, 'p', 'production', 'faq', '{"ungrounded": true}');
"""


def test_a_state_file_of_an_older_version_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_HISTORY)
    state = State(path)
    try:
        old = state.history.rows(0, 1000)
        state.history.put(Row(101.0, {"ungrounded": False}, "new", "p", "production", "faq", DIMS))
        assert state.history.merge("old", {"faithfulness": 0.9}) is not None
        rows = state.history.rows(0, 1000)
    finally:
        state.close()
    assert [(r.trace_id, r.values, r.dims) for r in old] == [("old", {"ungrounded": True}, NO_DIMS)]
    assert [(r.trace_id, dict(r.dims)) for r in rows] == [("old", {}), ("new", DIMS)]
    assert rows[0] == replace(old[0], values={"ungrounded": True, "faithfulness": 0.9})
    # Opened again: the column is there, nothing to migrate twice.
    State(path).close()
