"""The signal history in the state file: rows for the alert rules, only what they read."""

from __future__ import annotations

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
