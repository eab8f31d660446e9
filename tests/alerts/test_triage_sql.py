"""The triage from SQLite's counts (observer.state.slices) is the triage from rows in memory.

The daemon and `alerts status` ask SQLite; `alerts backtest` and the pure tests count
rows in Python. Over planted histories and a table of rules (flags and numbers, a
warning line or none, each aggregate kind, a `where`, a group by query type, samples
missing the signal), the two give the same segments, onset, layer and examples; and over
random histories with re-scored traces, the window read (the cells and the onset's first
buckets in one query) counts what rows count and the examples read where it says are the
worst rows have.
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from observer.alerts.rules import DIMENSIONS, WindowRule, parse_expression
from observer.alerts.triage import (
    RowSlices,
    bucket_size,
    step_of,
    stored_slices,
    triage,
    triage_of,
)
from observer.state import State
from observer.state.history import HISTORY_SCHEMA, write_row
from observer.state.rows import GroupKey, Row, Triage
from observer.state.slices import Bucket, Cell
from tests.alerts.test_triage import PROD, TYPES, T, grounding_rule, planted, release_scenario


def flagged(seed: int = 5) -> list[Row]:
    """Two hours of answers; since 40 minutes before T, model gpt-y's are often ungrounded
    and some traces recorded no retrieval score (no grade), others no ungrounded value."""
    rng = random.Random(seed)
    rows = []
    for i in range(2400):
        at = T - 7200 + i * 3 + rng.random()
        model = rng.choice(("gpt-x", "gpt-y"))
        broken = at > T - 2400 and model == "gpt-y"
        values: dict[str, object] = {"crag_grade": rng.choice(("HIGH", "LOW", "HIGH"))}
        if rng.random() < 0.1:
            values.pop("crag_grade")
        if rng.random() > 0.05:
            values["ungrounded"] = rng.random() < (0.6 if broken else 0.02)
        values["confidence_band"] = "LOW" if rng.random() < (0.5 if broken else 0.1) else "HIGH"
        dims = {"model": model, "release": "r1"} if rng.random() > 0.2 else {}
        row = Row(at, values, f"f{i}", "p1", "production", rng.choice(TYPES), dims)  # type: ignore[arg-type]
        rows.append(row)
    return rows


def ungrounded(**changes: object) -> WindowRule:
    rule = WindowRule(
        "ungrounded_rate_high",
        parse_expression("ungrounded", "test"),
        "rate",
        ">",
        0.05,
        900.0,
        warn_threshold=0.03,
        min_samples=20,
        group_by=("environment",),
    )
    return dataclasses.replace(rule, **changes)  # type: ignore[arg-type]


CASES: list[tuple[str, Callable[[], list[Row]], WindowRule, GroupKey]] = [
    ("planted grounding", planted, grounding_rule(), PROD),
    ("retrieval", lambda: planted(crag="LOW"), grounding_rule(), PROD),
    ("release scenario", release_scenario, grounding_rule(), PROD),
    ("no warning line", release_scenario, grounding_rule(warn_threshold=None), PROD),
    ("a flag", flagged, ungrounded(), PROD),
    (
        "a comparison, by query type",
        flagged,
        ungrounded(
            name="low_band",
            expression=parse_expression("confidence_band == LOW", "t"),
            threshold=0.3,
            warn_threshold=0.2,
            window_s=1800.0,
            group_by=("environment", "query_type"),
        ),
        (("environment", "production"), ("query_type", "pricing")),
    ),
    ("a where", flagged, ungrounded(where=(("query_type", "howto"),)), PROD),
    ("count", flagged, ungrounded(aggregate="count", threshold=20.0, warn_threshold=10.0), PROD),
    ("min", planted, grounding_rule(aggregate="min", threshold=0.2, warn_threshold=0.6), PROD),
]


def same(mine: Triage, theirs: Triage) -> None:
    assert (mine.samples, mine.bad, mine.bad_when) == (theirs.samples, theirs.bad, theirs.bad_when)
    assert [s.where for s in mine.segments] == [s.where for s in theirs.segments]
    for a, b in zip(mine.segments, theirs.segments, strict=True):
        assert (a.samples, a.bad, a.bad_rate, a.rest_bad_rate) == (
            b.samples,
            b.bad,
            b.bad_rate,
            b.rest_bad_rate,
        )
        for x, y in ((a.value, b.value), (a.rest_value, b.rest_value)):
            assert (x is None) == (y is None)
            if x is not None and y is not None:
                assert x == pytest.approx(y, abs=1e-9)
    assert (mine.onset, mine.onset_open) == (theirs.onset, theirs.onset_open)
    assert (mine.layer, mine.unclear) == (theirs.layer, theirs.unclear)
    assert dict(mine.layer_shares) == pytest.approx(dict(theirs.layer_shares))
    assert [e.trace_id for e in mine.examples] == [e.trace_id for e in theirs.examples]


@pytest.mark.parametrize(
    ("history", "rule", "group"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_sqlite_counts_give_the_triage_rows_give(
    tmp_path: Path, history: Callable[[], list[Row]], rule: WindowRule, group: GroupKey
) -> None:
    rows = history()
    state = State(tmp_path / "state.sqlite")
    try:
        state.history.put_many(rows)
        with state.history.connection() as db:
            stored = triage_of(rule, group, stored_slices(rule, group, db), T)
    finally:
        state.close()
    expected = triage(rule, group, rows, T)
    same(stored, expected)
    assert expected.samples > 0


# -- the window read (cells and the onset's first buckets in one query) against rows --------

LABELS = [{}, {"model": "gpt-x"}, {"model": "gpt-y", "release": "r2"}]
GRADES = ("HIGH", "LOW", "AMBIGUOUS", None)


@st.composite
def answers(draw: st.DrawFn) -> tuple[list[Row], list[Row]]:
    """Rows on half-second steps of the last 11 minutes before T (some on the window's
    edges), with or without the signal and each field that places a bad sample; and the
    re-scores of some of them (the same trace, new values and labels)."""

    def row(i: int) -> Row:
        values: dict[str, object] = {}
        if draw(st.booleans()):
            values["numeric_grounding"] = draw(st.sampled_from((0.3, 0.5, 0.95, 1.0)))
        if draw(st.booleans()):
            values["ungrounded"] = draw(st.booleans())
        grade = draw(st.sampled_from(GRADES))
        if grade is not None:
            values["crag_grade"] = grade
        for name in ("abstained", "over_refusal"):
            if draw(st.integers(0, 3)) == 0:
                values[name] = draw(st.booleans())
        if draw(st.integers(0, 4)) == 0:
            values["missing_chunks"] = draw(st.integers(0, 2))
        at = T - draw(st.integers(0, 1320)) / 2
        environment = draw(st.sampled_from(("production", "production", "staging")))
        dims = draw(st.sampled_from(LABELS))
        query_type = draw(st.sampled_from(TYPES))
        return Row(at, values, f"t{i}", "p1", environment, query_type, dims)  # type: ignore[arg-type]

    first = [row(i) for i in range(draw(st.integers(0, 40)))]
    again = [row(i) for i in draw(st.sets(st.integers(0, max(0, len(first) - 1))))][: len(first)]
    return first, again


def _cells(found: list[Cell]) -> list[tuple[object, ...]]:
    return sorted(
        (tuple(c.label(d) for d in DIMENSIONS), c.bad, c.place, c.n, c.low, c.high, c.total)
        for c in found
    )


def _buckets(found: list[Bucket]) -> list[tuple[object, ...]]:
    return sorted((b.index, b.n, b.bad, b.low, b.high, b.first, b.total) for b in found)


def _close(mine: list[tuple[object, ...]], theirs: list[tuple[object, ...]]) -> None:
    assert [m[:-1] for m in mine] == [t[:-1] for t in theirs]
    assert [m[-1] for m in mine] == pytest.approx([t[-1] for t in theirs], abs=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    history=answers(),
    rule=st.sampled_from(
        [
            grounding_rule(window_s=600.0),
            grounding_rule(window_s=600.0, warn_threshold=None, op=">", threshold=0.4),
            ungrounded(window_s=600.0),
        ]
    ),
)
def test_the_window_read_counts_what_rows_count(
    history: tuple[list[Row], list[Row]], rule: WindowRule
) -> None:
    first, again = history
    final = {r.trace_id: r for r in [*first, *again]}  # a re-score replaces the trace's row
    db = sqlite3.connect(":memory:")
    db.executescript(HISTORY_SCHEMA)
    for each in [*first, *again]:
        write_row(db, each)
    start, size = T - rule.window_s, bucket_size(rule.window_s, step_of(rule))
    stored = stored_slices(rule, PROD, db)
    rows = RowSlices(rule, PROD, final.values())
    wheres = [(), (("model", "gpt-x"),), (("query_type", "pricing"), ("release", "r2"))]
    # The examples, read before the window (the whole of it) and after (only the stretches
    # its parts say hold them).
    for where in wheres:
        assert stored.worst(where, start, T) == rows.worst(where, start, T)
    _close(_cells(stored.cells(start, T)), _cells(rows.cells(start, T)))
    for where in wheres:
        assert stored.worst(where, start, T) == rows.worst(where, start, T)
    # The onset's first read is the window's, read with its cells; the query of every
    # later read counts the same.
    _close(_buckets(stored.buckets(size, T, start, T)), _buckets(rows.buckets(size, T, start, T)))
    _close(_buckets(stored.buckets(size, T, start, T)), _buckets(rows.buckets(size, T, start, T)))
