"""Window rules over kept buckets: the same evaluation as `replay` over every row, step after
step, while the history changes under the cache.

`replay` (every point over its whole window, the rows read from the state file) is the
reference. Between two steps the history changes the way the daemon changes it: new
rows, re-scored traces (new values, sometimes a new event time in another bucket), a
judge's values merged in, rows pruned. The kept buckets must notice each change and give
the same events, states, examples, top details and capped count; and a steady step reads
only the buckets that changed.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from observer.alerts.buckets import Agg, bucket_of, cover, slide_merged
from observer.alerts.engine import AlertState, Evaluation, GroupKey, Row, replay
from observer.alerts.families.cache import BucketCache
from observer.alerts.rules import WindowRule, default_window_rules, row_keys
from observer.state import State
from tests.alerts.test_windows import T0, assert_same, point_lists, rules, trace_rows
from tests.budget import scaled


def evaluate(
    cache: BucketCache,
    state: State,
    rule: WindowRule,
    states: dict[GroupKey, AlertState],
    points: list[float],
    max_groups: int,
) -> Evaluation:
    """The cache's evaluation of `points` is replay's over the rows the file holds now."""
    history = state.history
    windows = cache.windows(history, [(rule, at) for at in points])
    got = slide_merged(
        rule,
        lambda at: windows[(rule, at)],
        states,
        points,
        max_groups,
    )
    rows = history.rows(-1.0, T0 + 10_000, row_keys({rule.expression.signal}), samples=False)
    assert_same(got, replay(rule, rows, states, points, max_groups))
    return got


@st.composite
def changes(draw: st.DrawFn, rows: list[Row]) -> tuple[list[Row], list[str]]:
    """Rows written again (re-scored: new values and sometimes a new time; the judge's values
    merged) and new ones; trace ids pruned."""
    fresh = draw(trace_rows(draw(st.integers(0, 30))))
    written = [Row(r.at, r.values, f"n{r.trace_id}", r.project_id, r.environment, r.query_type)
               for r in fresh]  # fmt: skip
    for row in rows:
        kind = draw(st.integers(0, 6))
        if kind == 0:
            moved = row.at + draw(st.sampled_from([0.0, 0.5, 61.0, -45.0, 900.0]))
            again = draw(trace_rows(1))[0]
            written.append(Row(moved, again.values, row.trace_id, row.project_id,
                               again.environment, again.query_type))  # fmt: skip
        elif kind == 1 and not row.values.get("skipped"):
            faithfulness = draw(st.sampled_from([0.1, 0.5, 0.95, 1.0]))
            written.append(Row(row.at, {**row.values, "faithfulness": faithfulness},
                               row.trace_id, row.project_id, row.environment,
                               row.query_type))  # fmt: skip
    pruned = [r.trace_id for r in rows if r.trace_id and draw(st.integers(0, 9)) == 0]
    return written, pruned


@settings(scaled(0.5), deadline=None)
@given(
    data=st.data(),
    rule=rules().filter(lambda r: not r.pipeline),
    step=st.sampled_from([60.0, 45.0, 7.5]),
    rows=st.integers(0, 80).flatmap(trace_rows),
    before=point_lists(),
    points=point_lists(),
    max_groups=st.integers(1, 7),
)
def test_kept_buckets_evaluate_as_replay_while_the_history_changes(
    data: st.DataObject,
    rule: WindowRule,
    step: float,
    rows: list[Row],
    before: list[float],
    points: list[float],
    max_groups: int,
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        state = State(Path(directory) / "state.sqlite")
        try:
            state.history.put_many(rows)
            cache = BucketCache((rule,), step)
            states = replay(rule, rows, {}, sorted(before), max_groups).states
            evaluate(cache, state, rule, {}, sorted(before), max_groups)
            written, pruned = data.draw(changes(rows))
            state.history.put_many(written)
            with state.history.connection() as db:
                db.executemany("DELETE FROM history WHERE trace_id = ?", [(t,) for t in pruned])
            evaluate(cache, state, rule, states, points, max_groups)
            evaluate(cache, state, rule, states, points, max_groups)  # nothing changed since
        finally:
            state.close()


def test_a_steady_step_reads_only_the_buckets_written_since() -> None:
    """A history of 30 minutes, then one more minute of rows: the next step reads that
    minute's bucket again, not the 30 the window covers."""
    rules_ = [r for r in default_window_rules() if not r.pipeline]
    with tempfile.TemporaryDirectory() as directory:
        state = State(Path(directory) / "state.sqlite")
        try:
            minute = [Row(T0 + i, {"ungrounded": i % 7 == 0}, f"t{i}", environment="production")
                      for i in range(1, 1861)]  # fmt: skip
            state.history.put_many(minute)
            cache = BucketCache(rules_, 60.0)
            first = cache.windows(state.history, [(r, T0 + 1860.0) for r in rules_])
            kept = {k: v[1] for k, v in cache.kept.items()}
            state.history.put_many(
                [
                    Row(T0 + 1860 + i, {"ungrounded": True}, f"u{i}", environment="production")
                    for i in range(1, 61)
                ]
            )
            second = cache.windows(state.history, [(r, T0 + 1920.0) for r in rules_])
            reread = [k for k, v in cache.kept.items() if kept.get(k) is not v[1]]
            assert reread == [bucket_of(T0 + 1920.0, 60.0)]  # the new minute, alone
            ungrounded = next(r for r in rules_ if r.name == "ungrounded_rate_high")
            group = (("environment", "production"), ("query_type", "none"))
            assert first[(ungrounded, T0 + 1860.0)][group].n == 900
            assert (
                second[(ungrounded, T0 + 1920.0)][group].value("rate")
                == (60 + sum(1 for i in range(1021, 1861) if i % 7 == 0)) / 900
            )
        finally:
            state.close()


def test_a_window_is_its_whole_buckets_and_the_rows_of_its_edges() -> None:
    rule = default_window_rules()[1]  # 15 minutes
    aligned = cover(rule, T0 + 1800.0, 60.0)
    assert (aligned.head, aligned.tail) == (None, None)
    assert aligned.last - aligned.first + 1 == 15
    target = cover(rule, T0 + 1830.5, 60.0)
    assert target.head == (T0 + 930.5, T0 + 960.0)
    assert target.tail == (T0 + 1800.0, T0 + 1830.5)
    assert target.last - target.first + 1 == 14


def test_merged_minimum_keeps_the_first_of_equals() -> None:
    earlier, later = Agg(False, False), Agg(False, False)
    earlier.add(0.0)
    later.add(-0.0)
    earlier.absorb(later)
    assert str(earlier.value("min")) == "0.0"


def test_examples_among_equal_times_and_values_follow_the_history_order() -> None:
    """Eight traces of the same minute, time and value: the examples are replay's five, in
    the order the history holds them, for a flag and for a number."""
    flag = next(r for r in default_window_rules() if r.name == "ungrounded_rate_high")
    number = next(r for r in default_window_rules() if r.name == "faithfulness_low")
    rows = [Row(T0 + 30.0, {"ungrounded": True, "faithfulness": 0.2}, f"t{i}",
                environment="production") for i in (5, 3, 8, 1, 7, 2, 6, 4)]  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        state = State(Path(directory) / "state.sqlite")
        try:
            state.history.put_many(rows)
            for each in (flag, number):
                rule = replace(each, min_samples=1, for_s=0.0)
                got = evaluate(BucketCache((rule,), 60.0), state, rule, {}, [T0 + 60.0], 10)
                examples = [e.trace_id for e in got.events[0].examples]
                assert examples == ["t5", "t3", "t8", "t1", "t7"]  # as written, equal times
        finally:
            state.close()


def test_families_sharing_the_cache_keep_each_others_minutes() -> None:
    """A 15-minute rule's step does not drop the minutes a 30-minute rule of another family
    reads: the next step of either reads only the new minute."""
    short = next(r for r in default_window_rules() if r.window_s == 900.0 and not r.pipeline)
    long = next(r for r in default_window_rules() if r.window_s == 1800.0 and not r.pipeline)
    with tempfile.TemporaryDirectory() as directory:
        state = State(Path(directory) / "state.sqlite")
        try:
            state.history.put_many(
                [Row(T0 + i, {"ungrounded": True}, f"t{i}") for i in range(1, 1861)]
            )
            cache = BucketCache((short, long), 60.0)
            cache.windows(state.history, [(long, T0 + 1860.0)])
            cache.windows(state.history, [(short, T0 + 1860.0)])
            kept = dict(cache.kept)
            cache.windows(state.history, [(long, T0 + 1860.0)])
            assert {k: v for k, v in cache.kept.items()} == kept  # nothing read again
        finally:
            state.close()
