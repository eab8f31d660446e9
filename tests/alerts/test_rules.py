"""Rules as values: signal expressions, the checks a rule must pass, the default rules."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.alerts.rules import (
    SIGNALS,
    Expression,
    Kind,
    RuleError,
    TraceRule,
    Value,
    WindowRule,
    check_trace_rule,
    check_window_rule,
    default_trace_rules,
    default_window_rules,
    parse_expression,
)

# -- expressions ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ungrounded", Expression("ungrounded")),
        ("faithfulness", Expression("faithfulness")),
        ("lag_s", Expression("lag_s")),
        ("confidence_band == LOW", Expression("confidence_band", "==", "LOW")),
        ("crag_grade != HIGH", Expression("crag_grade", "!=", "HIGH")),
        ("invalid_citations > 0", Expression("invalid_citations", ">", 0.0)),
        ("faithfulness<0.5", Expression("faithfulness", "<", 0.5)),
        ("  lag_s >= 600  ", Expression("lag_s", ">=", 600.0)),
        ("rerank_top1 <= 1e-3", Expression("rerank_top1", "<=", 0.001)),
        ("ungrounded == false", Expression("ungrounded", "==", 0.0)),
        ("ungrounded == TRUE", Expression("ungrounded", "==", 1.0)),
        ("needs_fallback != true", Expression("needs_fallback", "!=", 1.0)),
    ],
    ids=[
        "flag",
        "number",
        "pipeline_sample",
        "category_equals",
        "category_differs",
        "count_above_zero",
        "no_spaces",
        "surrounding_spaces",
        "exponent",
        "flag_false",
        "flag_true_any_case",
        "flag_differs",
    ],
)
def test_parse_expression(text: str, expected: Expression) -> None:
    assert parse_expression(text, "here") == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "here: '' is not '<signal>' or '<signal> <op> <value>'"),
        ("Ungrounded", "is not '<signal>' or '<signal> <op> <value>'"),
        ("ungrounded >", "is not '<signal>' or '<signal> <op> <value>'"),
        ("faithfulness => 0.5", "is not '<signal>' or '<signal> <op> <value>'"),
        ("crag_grade == LOW HIGH", "is not '<signal>' or '<signal> <op> <value>'"),
        ("groundedness", "here: unknown signal 'groundedness' (known: confidence,"),
        ("nope > 1", "unknown signal 'nope'"),
        ("confidence_band > LOW", "confidence_band is a category; compare it with == or !="),
        ("crag_grade == low", "crag_grade is one of HIGH, AMBIGUOUS, LOW, not 'low'"),
        ("confidence_band == AMBIGUOUS", "confidence_band is one of HIGH, MEDIUM, LOW"),
        ("ungrounded == yes", "ungrounded is a flag; use 'ungrounded' or 'ungrounded == false'"),
        ("ungrounded > 0", "ungrounded is a flag"),
        ("ungrounded < true", "ungrounded is a flag"),
        ("faithfulness > high", "faithfulness is a number; 'high' is not"),
        ("faithfulness > inf", "'inf' is not a finite number"),
        ("lag_s > nan", "'nan' is not a finite number"),
    ],
    ids=[
        "empty",
        "upper_case_name",
        "op_without_value",
        "unknown_op",
        "two_values",
        "unknown_signal",
        "unknown_signal_compared",
        "category_ordered",
        "category_value_case",
        "category_value_of_another_signal",
        "flag_against_a_word",
        "flag_against_a_number",
        "flag_ordered",
        "number_against_a_word",
        "infinity",
        "not_a_number",
    ],
)
def test_parse_expression_rejects(text: str, message: str) -> None:
    with pytest.raises(RuleError, match=re.escape(message)):
        parse_expression(text, "here")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("ungrounded", "ungrounded"),
        ("confidence_band==LOW", "confidence_band == LOW"),
        ("invalid_citations > 0", "invalid_citations > 0"),
        ("faithfulness < 0.50", "faithfulness < 0.5"),
        ("ungrounded == false", "ungrounded == 0"),
    ],
    ids=["bare", "category", "count", "number_shortest", "flag_false"],
)
def test_expression_text(text: str, shown: str) -> None:
    assert str(parse_expression(text, "here")) == shown


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        ("ungrounded", {"ungrounded": True}, 1.0),
        ("ungrounded", {"ungrounded": False}, 0.0),
        ("ungrounded == false", {"ungrounded": False}, 1.0),
        ("ungrounded == false", {"ungrounded": True}, 0.0),
        ("confidence_band == LOW", {"confidence_band": "LOW"}, 1.0),
        ("confidence_band == LOW", {"confidence_band": "HIGH"}, 0.0),
        ("crag_grade != HIGH", {"crag_grade": "AMBIGUOUS"}, 1.0),
        ("confidence_band", {"confidence_band": "LOW"}, None),
        ("faithfulness", {"faithfulness": 0.75}, 0.75),
        ("invalid_citations", {"invalid_citations": 3}, 3.0),
        ("invalid_citations > 0", {"invalid_citations": 0}, 0.0),
        ("invalid_citations > 0", {"invalid_citations": 2}, 1.0),
        ("faithfulness < 0.5", {"faithfulness": 0.5}, 0.0),
        ("faithfulness <= 0.5", {"faithfulness": 0.5}, 1.0),
        ("faithfulness", {}, None),
        ("faithfulness", {"faithfulness": None}, None),
        ("faithfulness < 0.5", {"ungrounded": True}, None),
        ("confidence_band == LOW", {"confidence_band": None}, None),
    ],
    ids=[
        "flag_true",
        "flag_false",
        "negated_flag_false",
        "negated_flag_true",
        "category_matches",
        "category_differs",
        "category_not_equal",
        "bare_category_is_no_number",
        "number",
        "integer_count",
        "count_zero_compared",
        "count_compared",
        "strict_comparison_at_the_bound",
        "inclusive_comparison_at_the_bound",
        "missing_number",
        "null_number",
        "missing_compared",
        "null_category",
    ],
)
def test_expression_value(text: str, values: Mapping[str, Value], expected: float | None) -> None:
    assert parse_expression(text, "here").value(values) == expected


@given(
    name=st.sampled_from(sorted(SIGNALS)),
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(["HIGH", "MEDIUM", "AMBIGUOUS", "LOW"]),
    ),
)
def test_a_comparison_is_always_a_flag_or_absent(name: str, value: Value) -> None:
    info = SIGNALS[name]
    if info.kind is Kind.CATEGORY:
        text = f"{name} == {info.categories[-1]}"
        if not isinstance(value, str):
            value = None
    elif info.kind is Kind.FLAG:
        text = f"{name} == true"
        if not isinstance(value, bool):
            value = None
    else:
        text = f"{name} > 0.5"
        if isinstance(value, str):
            value = None
    result = parse_expression(text, "here").value({name: value})
    assert result in ((None,) if value is None else (0.0, 1.0))


# -- window rules ---------------------------------------------------------------


def rule(**changes: object) -> WindowRule:
    """A rule that passes every check; each test changes what it is about."""
    base = WindowRule(
        name="r",
        expression=parse_expression("ungrounded", "test"),
        aggregate="rate",
        op=">",
        threshold=0.05,
        warn_threshold=0.03,
        window_s=900,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"warn_threshold": None},
        {
            "op": "<",
            "threshold": 0.8,
            "warn_threshold": 0.85,
            "expression": Expression("faithfulness"),
            "aggregate": "mean",
        },
        {"op": "==", "warn_threshold": None},
        {"expression": Expression("confidence_band", "==", "LOW")},
        {"expression": Expression("lag_s"), "aggregate": "max", "group_by": ()},
        {"aggregate": "count", "threshold": 0, "warn_threshold": None},
        {"for_s": 0, "repeat_s": 0, "no_data_for_s": 0, "no_data": "alert"},
        {"group_by": ("environment",), "where": (("query_type", "billing"),)},
    ],
    ids=[
        "the_contract",
        "no_warning",
        "downward",
        "equality_without_warning",
        "compared_category",
        "pipeline_sample",
        "count",
        "zero_durations",
        "group_and_filter",
    ],
)
def test_check_window_rule_accepts(changes: dict[str, object]) -> None:
    good = rule(**changes)
    assert check_window_rule(good) is good


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"expression": Expression("faithfulness")},
            "alerts.rules[r].aggregate: rate needs a flag; faithfulness is not one "
            "(compare it, e.g. 'faithfulness > 0')",
        ),
        (
            {"expression": Expression("crag_grade"), "aggregate": "mean"},
            "alerts.rules[r].signal: crag_grade is a category; compare it, "
            "e.g. 'crag_grade == LOW'",
        ),
        (
            {"warn_threshold": 0.06},
            "alerts.rules[r].warn_threshold: 0.06 must be crossed before threshold 0.05 (op >)",
        ),
        ({"warn_threshold": 0.05}, "alerts.rules[r].warn_threshold: 0.05 must be crossed before"),
        (
            {"op": "<", "threshold": 0.8, "warn_threshold": 0.7},
            "alerts.rules[r].warn_threshold: 0.7 must be crossed before threshold 0.8 (op <)",
        ),
        ({"op": "=="}, "alerts.rules[r].warn_threshold: not with op =="),
        ({"op": "=>"}, "alerts.rules[r].op: '=>' is not one of"),
        ({"aggregate": "avg"}, "alerts.rules[r].aggregate: 'avg' is not one of"),
        ({"no_data": "drop"}, "alerts.rules[r].no_data: 'drop' is not keep, ok or alert"),
        ({"group_by": ("region",)}, "alerts.rules[r].group_by: 'region' is not one of"),
        ({"where": (("region", "eu"),)}, "alerts.rules[r].where: 'region' is not one of"),
        ({"threshold": float("nan")}, "alerts.rules[r].threshold: must be a finite number"),
        ({"warn_threshold": float("-inf")}, "alerts.rules[r].warn_threshold: must be a finite"),
        (
            {
                "expression": Expression("lag_s"),
                "aggregate": "max",
                "where": (("environment", "production"),),
            },
            "alerts.rules[r].where: lag_s is a sample of the daemon, not of a trace",
        ),
        ({"window_s": 0}, "alerts.rules[r].window: must be longer than 0s"),
        ({"min_samples": 0}, "alerts.rules[r].min_samples: must be at least 1"),
        ({"for_s": -1}, "alerts.rules[r]: durations cannot be negative"),
        ({"repeat_s": -1}, "alerts.rules[r]: durations cannot be negative"),
    ],
    ids=[
        "rate_of_a_number",
        "bare_category",
        "warn_after_page",
        "warn_equal_to_page",
        "warn_after_page_downward",
        "warn_with_equality",
        "bad_op",
        "bad_aggregate",
        "bad_no_data",
        "bad_group_by",
        "bad_where",
        "where_on_a_daemon_sample",
        "nan_threshold",
        "infinite_warning",
        "empty_window",
        "no_samples",
        "negative_for",
        "negative_repeat",
    ],
)
def test_check_window_rule_rejects(changes: dict[str, object], message: str) -> None:
    with pytest.raises(RuleError, match=re.escape(message)):
        check_window_rule(rule(**changes))


@pytest.mark.parametrize(
    ("signal", "pipeline", "groups"),
    [
        ("ungrounded", False, ("environment", "query_type")),
        ("lag_s", True, ()),
        ("scores_dropped", True, ()),
    ],
    ids=["trace_signal_grouped", "lag_never_grouped", "dropped_never_grouped"],
)
def test_daemon_samples_are_never_grouped(
    signal: str, pipeline: bool, groups: tuple[str, ...]
) -> None:
    watched = rule(expression=Expression(signal), aggregate="max")
    assert (watched.pipeline, watched.groups) == (pipeline, groups)


# -- trace rules ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "where", "values", "labels", "matches"),
    [
        ("critical_unsupported", (), {"critical_unsupported": True}, {}, True),
        ("critical_unsupported", (), {"critical_unsupported": False}, {}, False),
        ("critical_unsupported", (), {}, {}, False),
        (
            "critical_unsupported",
            (("query_type", "billing"),),
            {"critical_unsupported": True},
            {"environment": "production", "query_type": "billing"},
            True,
        ),
        (
            "critical_unsupported",
            (("query_type", "billing"),),
            {"critical_unsupported": True},
            {"environment": "production", "query_type": "search"},
            False,
        ),
        (
            "critical_unsupported",
            (("query_type", "billing"),),
            {"critical_unsupported": True},
            {"environment": "production"},
            False,
        ),
        (
            "invalid_citations > 0",
            (("environment", "production"), ("query_type", "billing")),
            {"invalid_citations": 2},
            {"environment": "production", "query_type": "billing"},
            True,
        ),
        (
            "invalid_citations > 0",
            (("environment", "production"), ("query_type", "billing")),
            {"invalid_citations": 2},
            {"environment": "staging", "query_type": "billing"},
            False,
        ),
        ("faithfulness < 0.5", (), {"faithfulness": 0.2}, {}, True),
        ("confidence_band == LOW", (), {"confidence_band": "MEDIUM"}, {}, False),
    ],
    ids=[
        "flag_set",
        "flag_clear",
        "flag_missing",
        "where_matches",
        "where_other_query_type",
        "where_label_missing",
        "two_labels_match",
        "two_labels_one_differs",
        "number_compared",
        "category_differs",
    ],
)
def test_trace_rule_matches(
    when: str,
    where: tuple[tuple[str, str], ...],
    values: Mapping[str, Value],
    labels: Mapping[str, str],
    matches: bool,
) -> None:
    trace_rule = TraceRule("t", parse_expression(when, "test"), where=where)
    assert trace_rule.matches(values, labels) is matches


@pytest.mark.parametrize(
    ("trace_rule", "message"),
    [
        (
            TraceRule("t", Expression("faithfulness")),
            "alerts.trace_rules[t].when: faithfulness is not a flag "
            "(compare it, e.g. 'faithfulness < 0.5')",
        ),
        (
            TraceRule("t", Expression("lag_s", ">", 60.0)),
            "alerts.trace_rules[t].when: lag_s is not a signal of a trace",
        ),
        (
            TraceRule("t", Expression("ungrounded"), max_per_hour=0),
            "alerts.trace_rules[t].max_per_hour: must be at least 1",
        ),
        (
            TraceRule("t", Expression("ungrounded"), where=(("tenant", "a"),)),
            "alerts.trace_rules[t].where: 'tenant' is not one of",
        ),
    ],
    ids=["not_a_flag", "daemon_sample", "no_notification_an_hour", "bad_where"],
)
def test_check_trace_rule_rejects(trace_rule: TraceRule, message: str) -> None:
    with pytest.raises(RuleError, match=re.escape(message)):
        check_trace_rule(trace_rule)


# -- the default rules ------------------------------------------------------------

DEFAULTS = [
    # name, signal, aggregate, op, page, warn, window_s, min_samples, for_s
    ("faithfulness_low", "faithfulness", "mean", "<", 0.80, 0.85, 1800, 20, 120),
    ("ungrounded_rate_high", "ungrounded", "rate", ">", 0.05, 0.03, 900, 50, 120),
    ("low_band_rate_high", "confidence_band == LOW", "rate", ">", 0.30, 0.20, 1800, 50, 120),
    ("crag_low_rate_high", "crag_grade == LOW", "rate", ">", 0.25, 0.15, 1800, 50, 120),
    ("ghost_citation_rate_high", "invalid_citations > 0", "rate", ">", 0.02, 0.01, 1800, 50, 120),
    ("pipeline_lag_high", "lag_s", "max", ">", 600, 300, 300, 1, 120),
    ("judge_error_rate_high", "judge_error", "rate", ">", 0.20, 0.10, 1800, 10, 120),
    # The judge against people, read hourly; kappa only over >= 30 pairs (docs/judge.md).
    ("judge_agreement_low", "judge_kappa", "min", "<", 0.4, None, 7200, 1, 0),
    ("judge_canary_low", "judge_canary_agreement", "min", "<", 0.8, None, 7200, 1, 0),
    ("scores_dropped", "scores_dropped", "count", ">", 0, None, 900, 1, 0),
    # With a citation resolver: the share of looked-up traces citing a re-written chunk.
    ("stale_citation_rate", "stale_citations > 0", "rate", ">", 0.05, 0.02, 1800, 50, 120),
    # Refusals (docs/signals.md#abstention-and-over-citation), and those with HIGH retrieval.
    ("refusal_rate_high", "abstained", "rate", ">", 0.30, 0.20, 1800, 50, 120),
    ("over_refusal_rate_high", "over_refusal", "rate", ">", 0.05, 0.02, 1800, 50, 120),
    # Mapping drift: the share of answer-looking traces skipped (per environment only).
    ("skip_rate_high", "skipped", "rate", ">", 0.50, 0.20, 1800, 50, 120),
]


@pytest.mark.parametrize(
    ("name", "signal", "aggregate", "op", "page", "warn", "window_s", "min_samples", "for_s"),
    DEFAULTS,
    ids=[d[0] for d in DEFAULTS],
)
def test_default_window_rule(
    name: str,
    signal: str,
    aggregate: str,
    op: str,
    page: float,
    warn: float | None,
    window_s: float,
    min_samples: int,
    for_s: float,
) -> None:
    found = {r.name: r for r in default_window_rules()}[name]
    assert str(found.expression) == signal
    assert (found.aggregate, found.op, found.threshold, found.warn_threshold) == (
        aggregate,
        op,
        page,
        warn,
    )
    assert (found.window_s, found.min_samples, found.for_s) == (window_s, min_samples, for_s)
    assert (found.repeat_s, found.no_data, found.notify) == (4 * 3600, "keep", ())
    groups = ("environment",) if name == "skip_rate_high" else ("environment", "query_type")
    assert found.group_by == groups
    assert check_window_rule(found) is found


def test_the_default_window_rules_are_exactly_the_table() -> None:
    assert [r.name for r in default_window_rules()] == [d[0] for d in DEFAULTS]


def test_the_default_trace_rule() -> None:
    (only,) = default_trace_rules()
    assert only.name == "critical_claim_unsupported"
    assert only.expression == Expression("critical_unsupported")
    assert (only.where, only.max_per_hour) == ((), 20)
    assert check_trace_rule(only) is only
    assert only.matches({"critical_unsupported": True}, {"environment": "production"})
    assert not only.matches({"critical_unsupported": False}, {})
