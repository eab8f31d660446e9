"""Mapping drift (`skip_rate_high`, docs/alerts.md), the pure parts: which skipped traces get
a history row, that no other rule finds a sample in one, the top skip reason of a window,
and the message that names it and sends the reader to `observer discover`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.alerts.engine import Row, Top, evaluate, replay, top_detail
from observer.alerts.history import (
    answer_looking,
    judge_values,
    signal_values,
    skip_row,
)
from observer.alerts.messages import window_notification
from observer.alerts.rules import (
    SIGNALS,
    WindowRule,
    default_window_rules,
    parse_expression,
    row_keys,
)
from observer.judge.outcome import JudgeResult
from observer.records import parse_record
from observer.signals import SignalParams, compute
from tests.daemon_helpers import ROOT

T0 = 1_764_000_000.0
AT = datetime.fromtimestamp(T0, UTC)
RULE = {r.name: r for r in default_window_rules()}["skip_rate_high"]
OTHERS = [r for r in default_window_rules() if r.name != "skip_rate_high"]


@pytest.mark.parametrize(
    ("reason", "counts"),
    [
        # A trace with a generation observer could not read: an answer gone missing.
        ("no_answer_text", True),
        ("malformed_sources", True),
        ("citations_without_sources", True),
        ("mapping_error", True),
        ("too_large", True),
        ("hook_error", True),
        ("hook_skipped", True),
        ("hook_invalid", True),
        ("a_reason_added_later", True),
        # Not an answer, or not asked for.
        ("no_generation", False),
        ("no_root", False),
        ("own_trace", False),
        ("judge_environment", False),
        ("filtered_environment", False),
        ("filtered_name", False),
        ("filtered_tags", False),
    ],
)
def test_which_skips_look_like_answers(reason: str, counts: bool) -> None:
    assert answer_looking(reason) is counts
    row = skip_row("t1", reason, AT, "production", "proj")
    if not counts:
        assert row is None
        return
    assert row == Row(
        at=T0,
        values={"skipped": True, "skip_reason": reason},
        trace_id="t1",
        project_id="proj",
        environment="production",
        query_type="none",
    )


def test_a_skip_without_an_environment_is_the_default_one() -> None:
    row = skip_row("t1", "no_answer_text", AT, None)
    assert row is not None and (row.environment, row.project_id) == ("default", None)


def example_values() -> list[dict[str, object]]:
    """The history values of the example records, as a scored trace's row holds them."""
    out = []
    for line in (ROOT / "examples" / "records.jsonl").open("rb"):
        values: dict[str, object] = dict(signal_values(compute(parse_record(line), SignalParams())))
        out.append(values)
    return out


def test_every_scored_row_is_a_sample_of_skipped_as_false() -> None:
    values = example_values()
    assert values
    assert {RULE.expression.value(v) for v in values} == {0.0}  # type: ignore[arg-type]


@pytest.mark.parametrize("rule", OTHERS, ids=lambda r: r.name)
@given(reason=st.sampled_from(sorted({"no_answer_text", "malformed_sources", "too_large"})))
def test_no_other_default_rule_finds_a_sample_in_a_skip_row(rule: WindowRule, reason: str) -> None:
    row = skip_row("t1", reason, AT, "production")
    assert row is not None
    assert rule.expression.value(row.values) is None


def test_the_judge_values_never_say_skipped() -> None:
    for result in (JudgeResult("t1"), JudgeResult("t1", error="timeout")):
        assert "skipped" not in judge_values(result)


def test_a_read_of_skipped_keeps_its_reason() -> None:
    assert SIGNALS["skipped"].detail == "skip_reason"
    assert row_keys({"skipped", "ungrounded"}) == {"skipped", "skip_reason", "ungrounded"}
    assert row_keys({"ungrounded"}) == {"ungrounded"}


# -- the top skip reason ----------------------------------------------------------------


def rows(spec: list[tuple[str | None, int]], start: float = T0) -> list[Row]:
    """`(reason, n)`: n skipped traces of that reason, or n scored ones for None."""
    out: list[Row] = []
    for reason, n in spec:
        for _ in range(n):
            at = start + len(out)
            values: dict[str, str | bool] = {"skipped": False, "ungrounded": False}
            if reason is not None:
                values = {"skipped": True, "skip_reason": reason}
            out.append(
                Row(at, values, f"t{len(out)}", "proj", environment="production", query_type="none")
            )
    return out


def found(spec: list[tuple[str | None, int]]) -> list[tuple[float, Row]]:
    return [(v, r) for r in rows(spec) if (v := RULE.expression.value(r.values)) is not None]


@pytest.mark.parametrize(
    ("spec", "top"),
    [
        ([(None, 10)], None),
        ([("no_answer_text", 3), (None, 5)], Top("no_answer_text", 3, 3)),
        (
            [("malformed_sources", 2), ("no_answer_text", 5), (None, 1), ("too_large", 1)],
            Top("no_answer_text", 5, 8),
        ),
        # A tie goes to the first name, whatever the order the rows came in.
        ([("too_large", 2), ("mapping_error", 2)], Top("mapping_error", 2, 4)),
        ([], None),
    ],
    ids=["none_skipped", "one_reason", "most_frequent", "tie_by_name", "empty"],
)
def test_top_detail(spec: list[tuple[str | None, int]], top: Top | None) -> None:
    assert top_detail(RULE, found(spec)) == top


def test_a_rule_on_a_signal_without_detail_has_no_top() -> None:
    ungrounded = {r.name: r for r in OTHERS}["ungrounded_rate_high"]
    assert top_detail(ungrounded, [(1.0, r) for r in rows([("no_answer_text", 3)])]) is None


@given(
    counts=st.dictionaries(
        st.sampled_from(["no_answer_text", "malformed_sources", "too_large", "hook_error"]),
        st.integers(0, 20),
    ),
    scored=st.integers(0, 20),
    order=st.randoms(),
)
def test_the_top_reason_is_the_most_frequent_in_any_order(
    counts: dict[str, int], scored: int, order: object
) -> None:
    items = found([(None, scored), *counts.items()])
    order.shuffle(items)  # type: ignore[attr-defined]
    top = top_detail(RULE, items)
    skipped = sum(counts.values())
    if skipped == 0:
        assert top is None
        return
    assert top is not None and top.of == skipped
    assert top.count == max(counts.values()) == counts[top.value]
    assert top.value == min(k for k, n in counts.items() if n == top.count)


# -- through the engine and into the message --------------------------------------------


def test_the_drift_rule_fires_naming_the_top_reason_and_discover() -> None:
    # 30 min of an environment: 40 answers scored, then 60 traces skipped (45 no_answer_text).
    history = rows([(None, 40), ("no_answer_text", 45), ("malformed_sources", 15)])
    history += rows([(None, 5)], start=T0 + 200)  # another environment: its own group
    history[-5:] = [
        Row(r.at, r.values, r.trace_id, "proj", "staging", "none") for r in history[-5:]
    ]
    points = [T0 + 300 + 60 * i for i in range(4)]  # `for` is 2 min
    result = replay(RULE, history, {}, points)
    (event,) = [e for e in result.events if e.notify]
    assert (event.transition, event.severity, event.group) == (
        "firing",
        "page",
        (("environment", "production"),),
    )
    assert event.samples == 100 and event.value == pytest.approx(0.6)
    assert event.top == Top("no_answer_text", 45, 60)
    assert result.tops == {(("environment", "production"),): Top("no_answer_text", 45, 60)}
    message = window_notification(RULE, event, "https://langfuse.example.com", AT)
    assert message.summary == (
        "skip_rate_high: rate(skipped) 0.6 > 0.5 (environment=production), "
        "top skip reason no_answer_text (45 of 60)"
    )
    assert "Top skip reason: no_answer_text, 45 of the 60 skipped traces" in message.description
    assert "`observer discover`" in message.description
    assert len(message.trace_urls) == 5  # skipped traces, the most recent first


def test_fewer_than_fifty_traces_is_no_verdict() -> None:
    history = rows([("no_answer_text", 49)])
    result = evaluate(RULE, history, {}, T0 + 100)
    assert result.events == [] and result.states[(("environment", "production"),)].samples == 49


def test_a_resolve_says_nothing_of_discover() -> None:
    rule = RULE
    history = rows([("no_answer_text", 60)]) + rows([(None, 300)], start=T0 + 2000)
    points = [T0 + 120 + 60 * i for i in range(70)]
    events = [e for e in replay(rule, history, {}, points).events if e.notify]
    assert [e.transition for e in events] == ["firing", "resolved"]
    message = window_notification(rule, events[-1], "https://x", AT)
    assert message.state == "resolved" and "discover" not in message.description


def test_a_configured_rule_on_skipped_is_told_the_same() -> None:
    rule = WindowRule(
        name="drift",
        expression=parse_expression("skipped", "test"),
        aggregate="rate",
        op=">",
        threshold=0.1,
        window_s=600.0,
        group_by=(),
    )
    (event,) = evaluate(rule, rows([("hook_error", 2), (None, 3)]), {}, T0 + 10).events
    assert event.top == Top("hook_error", 2, 2)
    assert "observer discover" in window_notification(rule, event, "https://x", AT).description
