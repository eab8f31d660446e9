"""Dimensions in the signal history (docs/alerts.md#window-rules): a row's labels, rules
that group by and filter on them, the engine and the sliding windows agreeing on the groups."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from observer.alerts.engine import Evaluation, GroupKey, Row, evaluate
from observer.alerts.history import dimensions, trace_row
from observer.alerts.rules import (
    DIMENSIONS,
    Expression,
    RuleError,
    TraceRule,
    WindowRule,
    check_trace_rule,
    check_window_rule,
    default_window_rules,
)
from observer.alerts.windows import slide
from observer.model import RagRecord
from observer.state.rows import DIMS, NO_DIMS
from observer.times import parse_time

T0 = 1_764_000_000.0
_ids = itertools.count()

BASE = WindowRule(
    name="ungrounded_rate_high",
    expression=Expression("ungrounded"),
    aggregate="rate",
    op=">",
    threshold=0.5,
    window_s=60.0,
    min_samples=4,
    group_by=("release",),
)

FULL = {
    "trace_name": "rag-query",
    "release": "2026.12.03-rc2",
    "version": "v7",
    "model": "gpt-4o-mini",
    "prompt": "rag-answer:3",
    "top_doc": "doc-refunds",
}


@pytest.mark.parametrize(
    ("row", "name", "label"),
    [
        (Row(T0, {}, "t", environment="production"), "environment", "production"),
        (Row(T0, {}, "t", query_type="billing"), "query_type", "billing"),
        (Row(T0, {}, "t"), "query_type", "none"),
        *[(Row(T0, {}, "t", dims=FULL), name, FULL[name]) for name in DIMS],
        *[(Row(T0, {}, "t"), name, "none") for name in DIMS],
        (Row(T0, {}, "t", dims={"release": "r1"}), "model", "none"),
        (Row(T0, {"lag_s": 3.0}), "release", "none"),  # a sample of the daemon
    ],
)
def test_a_row_reads_each_dimension_or_none(row: Row, name: str, label: str) -> None:
    assert row.label(name) == label


def test_rows_without_dimensions_share_one_empty_mapping() -> None:
    assert Row(T0, {}).dims is NO_DIMS
    assert Row(T0, {}, "t").dims is Row(T0 + 1, {}, "u").dims
    assert dimensions(RagRecord(trace_id="t", question="q", answer="a", sources=())) is NO_DIMS


def test_every_dimension_a_rule_may_name() -> None:
    assert ("environment", "query_type", *DIMS) == DIMENSIONS


RECORD = RagRecord(
    trace_id="t1",
    question="q",
    answer="a",
    sources=(),
    timestamp="2026-12-03T10:00:00+00:00",
    environment="production",
    query_type="billing",
    trace_name="rag-query",
    release="2026.12.03-rc2",
    version="v7",
    model="gpt-4o-mini",
    prompt_name="rag-answer",
    prompt_version=3,
)


@pytest.mark.parametrize(
    ("changes", "top_doc", "expected"),
    [
        ({}, "doc-refunds", FULL),
        ({"prompt_version": None}, "doc-refunds", {**FULL, "prompt": "rag-answer"}),
        ({"prompt_name": None}, "doc-refunds", {k: v for k, v in FULL.items() if k != "prompt"}),
        (
            {"release": "", "model": None},
            None,
            {"trace_name": "rag-query", "version": "v7", "prompt": "rag-answer:3"},
        ),
    ],
)
def test_a_trace_row_keeps_the_present_dimensions(
    changes: dict[str, object], top_doc: str | None, expected: dict[str, str]
) -> None:
    record = dataclasses.replace(RECORD, **changes)  # type: ignore[arg-type]
    fallback = parse_time("2026-12-03T11:00:00+00:00")
    assert fallback is not None
    row = trace_row(record, {"ungrounded": True}, fallback, top_doc)
    assert dict(row.dims) == expected
    assert (row.environment, row.query_type) == ("production", "billing")


@pytest.mark.parametrize("label", DIMENSIONS)
def test_window_rules_group_by_and_filter_on_every_dimension(label: str) -> None:
    rule = dataclasses.replace(BASE, group_by=(label,), where=((label, "x"),))
    assert check_window_rule(rule) is rule
    trace = TraceRule("t", Expression("ungrounded"), where=((label, "x"),))
    assert check_trace_rule(trace) is trace


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"group_by": ("region",)},
            "group_by: 'region' is not one of environment, query_type, "
            "trace_name, release, version, model, prompt, top_doc",
        ),
        ({"where": (("tenant", "a"),)}, "where: 'tenant' is not one of environment"),
        ({"group_by": ("release", "release")}, "group_by: 'release' is named twice"),
    ],
)
def test_an_unknown_dimension_is_refused_by_name(changes: dict[str, object], message: str) -> None:
    with pytest.raises(RuleError, match=message):
        check_window_rule(dataclasses.replace(BASE, **changes))  # type: ignore[arg-type]
    if "where" in changes:
        with pytest.raises(RuleError, match=message):
            check_trace_rule(TraceRule("t", Expression("ungrounded"), where=changes["where"]))  # type: ignore[arg-type]


def test_the_default_rules_still_group_by_environment_and_query_type() -> None:
    groupings = {rule.name: rule.group_by for rule in default_window_rules()}
    assert set(groupings.values()) == {("environment", "query_type"), ("environment",)}


def traces(bad: int, good: int, **dims: str) -> list[Row]:
    return [
        Row(
            at=T0 - 30,
            values={"ungrounded": i < bad},
            trace_id=f"t{next(_ids)}",
            environment="production",
            query_type="billing",
            dims=dims,
        )
        for i in range(bad + good)
    ]


def mixed() -> list[Row]:
    return (
        traces(6, 4, release="rc2", model="gpt-4o-mini")
        + traces(0, 10, release="r1", model="gpt-4o-mini")
        + traces(1, 9, model="gpt-4o")  # no release: `none`
    )


def firing(result: Evaluation) -> set[GroupKey]:
    return {e.group for e in result.events if e.transition == "firing"}


RC2 = (("environment", "production"), ("release", "rc2"))
R1 = (("environment", "production"), ("release", "r1"))
NONE = (("environment", "production"), ("release", "none"))


@pytest.mark.parametrize(
    ("rule", "expected", "fired"),
    [
        (
            dataclasses.replace(BASE, group_by=("environment", "release")),
            {RC2: 0.6, R1: 0.0, NONE: 0.1},
            {RC2},
        ),
        (
            dataclasses.replace(BASE, group_by=("model",)),
            {(("model", "gpt-4o-mini"),): 0.3, (("model", "gpt-4o"),): 0.1},
            set(),
        ),
        (
            dataclasses.replace(
                BASE, group_by=("environment", "release"), where=(("model", "gpt-4o-mini"),)
            ),
            {RC2: 0.6, R1: 0.0},
            {RC2},
        ),
        (
            dataclasses.replace(BASE, group_by=("query_type",), where=(("release", "none"),)),
            {(("query_type", "billing"),): 0.1},
            set(),
        ),
    ],
)
def test_the_engine_and_the_sliding_windows_group_by_dimensions(
    rule: WindowRule, expected: dict[GroupKey, float], fired: set[GroupKey]
) -> None:
    rule = check_window_rule(rule)
    rows = mixed()
    once = evaluate(rule, rows, {}, T0)
    assert {g: s.value for g, s in once.states.items()} == expected
    assert firing(once) == fired
    slid = slide(rule, sorted(rows, key=lambda r: r.at), {}, [T0])
    assert {g: s.value for g, s in slid.states.items()} == expected
    assert firing(slid) == fired


@pytest.mark.parametrize(
    ("where", "matches"),
    [
        ((("release", "rc2"),), True),
        ((("release", "r1"),), False),
        ((("model", "gpt-4o-mini"), ("environment", "production")), True),
        ((("prompt", "none"),), True),  # the row has no prompt
    ],
)
def test_a_trace_rule_filters_on_dimensions(
    where: tuple[tuple[str, str], ...], matches: bool
) -> None:
    rule = check_trace_rule(TraceRule("t", Expression("ungrounded"), where=where))
    row = traces(1, 0, release="rc2", model="gpt-4o-mini")[0]
    labels = {key: row.label(key) for key, _ in rule.where}
    assert rule.matches(row.values, labels) is matches
