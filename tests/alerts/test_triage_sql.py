"""The triage from SQLite's counts (observer.state.slices) is the triage from rows in memory.

The daemon and `alerts status` ask SQLite; `alerts backtest` and the pure tests count
rows in Python. Over planted histories and a table of rules (flags and numbers, a
warning line or none, each aggregate kind, a `where`, a group by query type, samples
missing the signal), the two give the same segments, onset, layer and examples.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from observer.alerts.rules import WindowRule, parse_expression
from observer.alerts.triage import stored_slices, triage, triage_of
from observer.state import State
from observer.state.rows import GroupKey, Row, Triage
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
