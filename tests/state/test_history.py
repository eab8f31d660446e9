"""The signal history in the state file: rows for the alert rules, only what they read."""

from __future__ import annotations

import threading
from pathlib import Path

from observer.alerts.engine import Row
from observer.state import State


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
