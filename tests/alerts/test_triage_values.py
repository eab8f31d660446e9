"""The history's narrow copy (observer.state.values) stays the history's rows.

The triage counts from `history_values`, the copy written with every history row. Over
random histories written through the state file as the daemon writes them (a re-scored
trace replacing its row, the judge's values merged into some, prunes), the window read
from the copy counts what the history's own rows count; a state file of schema 4, whose
history has no copy yet, gives once opened the triage a fresh file gives.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from observer.alerts.rules import WindowRule, parse_expression
from observer.alerts.triage import (
    RowSlices,
    bucket_size,
    step_of,
    stored_slices,
    triage,
    triage_of,
)
from observer.state import State
from observer.state.rows import Row
from tests.alerts.test_triage import PROD, T, grounding_rule, planted, release_scenario
from tests.alerts.test_triage_sql import _buckets, _cells, _close, answers, flagged, same
from tests.alerts.test_triage_sql import ungrounded as ungrounded_rule


def faithfulness_rule() -> WindowRule:
    return grounding_rule(
        name="faithfulness_low",
        expression=parse_expression("faithfulness", "t"),
        window_s=600.0,
        threshold=0.7,
        warn_threshold=0.8,
    )


RULES = [
    grounding_rule(window_s=600.0),
    ungrounded_rule(window_s=600.0),
    faithfulness_rule(),
    ungrounded_rule(window_s=600.0, expression=parse_expression("judge_error", "t")),
]
JUDGED = st.one_of(
    st.just({"judge_error": True}),
    st.builds(
        lambda f, c: {"judge_error": False, "faithfulness": f, "citation_accuracy": c},
        st.sampled_from((0.2, 0.75, 0.9, 1.0)),
        st.sampled_from((0.5, 1.0)),
    ),
)


def _read_equals_rows(state: State, rule: WindowRule) -> None:
    """The window read from the copy counts what the history's rows (read back from their
    JSON) count; the examples are theirs."""
    rows = state.history.rows(0, 4e9, samples=False)
    start, size = T - rule.window_s, bucket_size(rule.window_s, step_of(rule))
    expected = RowSlices(rule, PROD, rows)
    with state.history.connection() as db:
        stored = stored_slices(rule, PROD, db)
        for where in [(), (("model", "gpt-x"),), (("query_type", "pricing"),)]:
            assert stored.worst(where, start, T) == expected.worst(where, start, T)
        _close(_cells(stored.cells(start, T)), _cells(expected.cells(start, T)))
        _close(
            _buckets(stored.buckets(size, T, start, T)),
            _buckets(expected.buckets(size, T, start, T)),
        )
    with state.history.connection() as db:
        (copies,) = db.execute("SELECT COUNT(*) FROM history_values").fetchone()
    assert copies == len(rows)  # one copy a row: none left behind by a re-score


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    history=answers(),
    judged=st.lists(st.tuples(st.integers(0, 60), JUDGED), max_size=12),
    rule=st.sampled_from(RULES),
    prune_s=st.sampled_from((None, 300.0, 500.0)),
)
def test_the_copy_counts_what_the_rows_count_after_rescores_merges_and_prunes(
    tmp_path_factory: pytest.TempPathFactory,
    history: tuple[list[Row], list[Row]],
    judged: list[tuple[int, dict[str, object]]],
    rule: WindowRule,
    prune_s: float | None,
) -> None:
    first, again = history
    state = State(tmp_path_factory.mktemp("state") / "state.sqlite")
    try:
        for each in first:
            state.history.put(each)
        for i, values in judged[: len(judged) // 2]:
            state.history.merge(f"t{i}", values)  # type: ignore[arg-type]
        for each in again:
            state.history.put(each)  # re-scored: its row, time and labels replaced
        for i, values in judged[len(judged) // 2 :]:
            state.history.merge(f"t{i}", values)  # type: ignore[arg-type]
        if prune_s is not None:
            state.history.prune(T - prune_s)
        _read_equals_rows(state, rule)
    finally:
        state.close()


def schema_4(path: Path, rows: list[Row]) -> None:
    """A state file as schema 4 left it: the history's rows, no copy, no label sets."""
    state = State(path)
    state.history.put_many(rows)
    state.close()
    with sqlite3.connect(path) as db:
        db.executescript(
            "DROP TABLE history_values; DROP TABLE label_sets;"
            "UPDATE meta SET value = '4' WHERE key = 'schema_version';"
        )
    db.close()


CASES: list[tuple[str, Callable[[], list[Row]], WindowRule]] = [
    ("release scenario", release_scenario, grounding_rule()),
    ("planted", planted, grounding_rule()),
    ("a flag", flagged, ungrounded_rule()),
]


@pytest.mark.parametrize(("history", "rule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_schema_4_file_gives_once_opened_the_triage_a_fresh_file_gives(
    tmp_path: Path, history: Callable[[], list[Row]], rule: WindowRule
) -> None:
    rows = history()
    schema_4(tmp_path / "old.sqlite", rows)
    old = State(tmp_path / "old.sqlite")  # migrated: the copy filled from the rows' JSON
    fresh = State(tmp_path / "fresh.sqlite")
    fresh.history.put_many(rows)
    try:
        found = []
        for state in (old, fresh):
            with state.history.connection() as db:
                found.append(triage_of(rule, PROD, stored_slices(rule, PROD, db), T))
            assert found[-1].samples > 0
        same(found[0], found[1])
        same(found[0], triage(rule, PROD, rows, T))
        assert copy_of(old) == copy_of(fresh)  # the same copy, value for value
    finally:
        old.close()
        fresh.close()


def copy_of(state: State) -> list[dict[str, object]]:
    with state.history.connection() as db:
        cursor = db.execute("SELECT * FROM history_values ORDER BY at, trace")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
