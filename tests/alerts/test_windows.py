"""Incremental windows: `slide` is `replay` on any history, rule, state and points.

`replay` (evaluate every point over its whole window) is the reference; the
property below draws histories with every kind of value a rule reads (flags,
categories, numbers that do not add up exactly in floating point, values
missing, the rows of skipped traces with their reasons), rules of every
aggregate, expression, grouping and filter, states left by an earlier
evaluation, and evaluation points (in order, repeated, sometimes going back),
and demands the same events, states, examples, top details and capped count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from observer.alerts.engine import AlertState, Evaluation, GroupKey, Row, aggregate, replay
from observer.alerts.rules import AGGREGATES, WindowRule, check_window_rule, parse_expression
from observer.alerts.windows import ExactSum, GroupWindow, slide
from tests.budget import scaled

T0 = 1_764_000_000.0
ENVIRONMENTS = ("production", "staging")
QUERY_TYPES = ("billing", "howto", "none")
# Values whose float sums depend on the order of additions, and plain ones.
REASONS = ("no_answer_text", "malformed_sources", "too_large")
TRICKY = (0.1, 0.2, 0.3, 0.7, 0.8, 1 / 3, 2 / 3, 1e-9, 1e9, 0.0, 1.0, 0.5, 0.85, 0.95)

numbers = st.one_of(
    st.sampled_from(TRICKY),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.integers(0, 5).map(float),
)


@st.composite
def trace_rows(draw: st.DrawFn, count: int) -> list[Row]:
    rows = []
    for i in range(count):
        values: dict[str, float | str | bool | None] = {}
        if draw(st.integers(0, 3)) == 0:
            # An answer-looking trace skipped: its row holds the flag and its reason only.
            values = {"skipped": True, "skip_reason": draw(st.sampled_from(REASONS))}
        else:
            if draw(st.booleans()):
                values["skipped"] = False
            if draw(st.booleans()):
                values["ungrounded"] = draw(st.booleans())
            if draw(st.integers(0, 3)):
                values["faithfulness"] = draw(numbers)
            if draw(st.booleans()):
                values["confidence_band"] = draw(st.sampled_from(["HIGH", "MEDIUM", "LOW"]))
            if draw(st.booleans()):
                values["invalid_citations"] = float(draw(st.integers(0, 3)))
        rows.append(
            Row(
                at=T0 + draw(st.integers(0, 3600)) + draw(st.sampled_from([0.0, 0.5, 0.25])),
                values=values,
                trace_id=f"t{i}",
                project_id=draw(st.sampled_from(["proj", None])),
                environment=draw(st.sampled_from(ENVIRONMENTS)),
                query_type=draw(st.sampled_from(QUERY_TYPES)),
            )
        )
    return rows


@st.composite
def histories(draw: st.DrawFn) -> list[Row]:
    rows = draw(trace_rows(draw(st.integers(0, 120))))
    for _ in range(draw(st.integers(0, 30))):
        at = T0 + draw(st.integers(0, 3600))
        rows.append(Row(at=at, values={"lag_s": draw(numbers)}))
    # The history comes back sorted by event time; equal times in any order.
    return sorted(draw(st.permutations(rows)), key=lambda r: r.at)


EXPRESSIONS = {
    "rate": [
        "ungrounded",
        "confidence_band == LOW",
        "invalid_citations > 0",
        "faithfulness < 0.5",
        "skipped",
    ],
    "number": ["faithfulness", "invalid_citations", "lag_s"],
}


@st.composite
def rules(draw: st.DrawFn) -> WindowRule:
    name = draw(st.sampled_from(AGGREGATES))
    pool = EXPRESSIONS["rate"] if name == "rate" else EXPRESSIONS["rate"] + EXPRESSIONS["number"]
    expression = parse_expression(draw(st.sampled_from(pool)), "test")
    op = draw(st.sampled_from([">", "<", ">=", "<="]))
    threshold = draw(st.sampled_from([0.0, 0.3, 0.5, 0.8, 1.0, 2.0, 100.0]))
    warn = None
    if draw(st.booleans()):
        nearer = threshold - 0.1 if op in (">", ">=") else threshold + 0.1
        warn = nearer
    pipeline = expression.info.pipeline
    return check_window_rule(
        WindowRule(
            name="random",
            expression=expression,
            aggregate=name,
            op=op,
            threshold=threshold,
            warn_threshold=warn,
            window_s=draw(st.sampled_from([60.0, 300.0, 900.0, 1800.0])),
            min_samples=draw(st.integers(1, 6)),
            for_s=draw(st.sampled_from([0.0, 60.0, 120.0, 300.0])),
            repeat_s=draw(st.sampled_from([0.0, 60.0, 600.0])),
            no_data=draw(st.sampled_from(["keep", "ok", "alert"])),
            no_data_for_s=draw(st.sampled_from([0.0, 120.0, 600.0])),
            group_by=draw(
                st.sampled_from(
                    [(), ("environment",), ("query_type",), ("environment", "query_type")]
                )
            ),
            where=() if pipeline else draw(st.sampled_from([(), (("environment", "production"),)])),
        )
    )


def aligned_points(draw: st.DrawFn) -> list[float]:
    minutes = draw(st.lists(st.integers(0, 80), min_size=1, max_size=40))
    points = [T0 + 60.0 * m for m in sorted(minutes)]  # repeats allowed
    if draw(st.booleans()):
        points.append(T0 + draw(st.integers(0, 4800)) + 0.5)  # an unaligned target
    if draw(st.integers(0, 4)) == 0:
        points = draw(st.permutations(points))  # back in time, too
    return points


@st.composite
def point_lists(draw: st.DrawFn) -> list[float]:
    return aligned_points(draw)


def check_same(
    rule: WindowRule,
    rows: Sequence[Row],
    states: dict[GroupKey, AlertState],
    points: Sequence[float],
    max_groups: int,
) -> None:
    expected = replay(rule, rows, states, points, max_groups)
    assert_same(slide(rule, rows, states, points, max_groups), expected)


def assert_same(got: Evaluation, expected: Evaluation) -> None:
    """The same events, states, examples, top details and capped count."""
    assert got.events == expected.events
    assert got.states == expected.states
    assert got.examples == expected.examples
    assert got.tops == expected.tops
    assert got.capped == expected.capped


# Twice the profile's examples: the slide must equal the replay where a window's edge meets
# a gap, a cap or a point past the rows, which few of the drawn histories reach.
@settings(scaled(2))
@given(
    rule=rules(),
    rows=histories(),
    before=point_lists(),
    points=point_lists(),
    max_groups=st.integers(1, 7),
)
def test_slide_is_replay(
    rule: WindowRule,
    rows: list[Row],
    before: list[float],
    points: list[float],
    max_groups: int,
) -> None:
    # The state an earlier evaluation left (pending, firing, no data ...), then more points.
    states = replay(rule, rows, {}, sorted(before), max_groups).states
    check_same(rule, rows, {}, points, max_groups)
    check_same(rule, rows, states, points, max_groups)


def test_slide_is_replay_over_a_long_catch_up() -> None:
    """Four hours of a busy service minute by minute: windows that fill, fire and drain."""
    rows = []
    for i in range(4 * 3600):
        bad = (i // 1800) % 2 == 1  # half an hour bad, half an hour good
        rows.append(
            Row(
                at=T0 + i,
                values={"ungrounded": bad and i % 5 == 0, "faithfulness": 0.7 if bad else 0.9},
                trace_id=f"t{i}",
                project_id="proj",
                environment=ENVIRONMENTS[i % 2],
                query_type=QUERY_TYPES[i % 3],
            )
        )
    points = [T0 + 60.0 * m for m in range(1, 241)]
    for signal, name, op, threshold in (
        ("ungrounded", "rate", ">", 0.05),
        ("faithfulness", "mean", "<", 0.8),
        ("faithfulness", "p95", "<", 0.8),
        ("faithfulness", "min", "<", 0.8),
    ):
        rule = check_window_rule(
            WindowRule(
                name=f"{signal}_{name}",
                expression=parse_expression(signal, "test"),
                aggregate=name,
                op=op,
                threshold=threshold,
                window_s=900.0,
                min_samples=20,
                for_s=120.0,
                repeat_s=600.0,
            )
        )
        expected = replay(rule, rows, {}, points)
        assert any(e.transition == "firing" for e in expected.events)
        assert any(e.transition == "resolved" for e in expected.events)
        assert slide(rule, rows, {}, points) == expected


# -- the pieces ---------------------------------------------------------------------------------


@given(
    values=st.lists(numbers, min_size=1, max_size=60),
    removed=st.integers(0, 59),
)
def test_an_exact_sum_is_fsum_of_what_it_holds(values: list[float], removed: int) -> None:
    total = ExactSum()
    for value in values:
        total.add(value)
    assert total.value() == math.fsum(values)
    kept = values[min(removed, len(values) - 1) :]
    for value in values[: min(removed, len(values) - 1)]:
        total.remove(value)
    assert total.value() == math.fsum(kept)


@pytest.mark.parametrize("name", AGGREGATES)
@given(values=st.lists(numbers, min_size=1, max_size=40), keep=st.integers(1, 40))
def test_a_window_aggregates_as_engine_aggregate(name: str, values: list[float], keep: int) -> None:
    window = GroupWindow(name)
    row = Row(at=T0, values={})
    for seq, value in enumerate(values):
        window.add(seq, value, row)
        assert window.value() == aggregate(name, values[: seq + 1])
    while len(window) > keep:
        window.drop_oldest()
        assert window.value() == aggregate(name, values[len(values) - len(window) :])


def test_an_unknown_aggregate_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown aggregate"):
        GroupWindow("p99")
