"""The window-rule engine as the people it pages see it: when a page comes, and when not.

Each table runs one rule through a sequence of evaluations a minute apart; the
rows of a step lie inside that step's window only, written `bad/total`
(`6/10`: six of ten traces ungrounded), `-` for no rows at all.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import shutil
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from observer.alerts.engine import (
    MAX_CATCH_UP_S,
    AlertEvent,
    AlertState,
    Evaluation,
    Example,
    GroupKey,
    Row,
    aggregate,
    evaluate,
    evaluation_points,
    group_of,
    in_scope,
    quantile,
    replay,
    worst,
)
from observer.alerts.rules import Expression, WindowRule, check_window_rule
from observer.state import State
from tests.budget import scaled

T0 = 1_764_000_000.0  # a minute boundary
STEP = 60.0
_ids = itertools.count()

BASE = check_window_rule(
    WindowRule(
        name="ungrounded_rate_high",
        expression=Expression("ungrounded"),
        aggregate="rate",
        op=">",
        threshold=0.5,
        warn_threshold=0.3,
        window_s=STEP,
        min_samples=4,
        for_s=120.0,
        repeat_s=300.0,
        no_data="keep",
        no_data_for_s=180.0,
        group_by=(),
    )
)


def with_(**changes: object) -> WindowRule:
    return check_window_rule(dataclasses.replace(BASE, **changes))  # type: ignore[arg-type]


def traces(
    at: float,
    bad: int,
    good: int,
    environment: str = "production",
    query_type: str = "none",
    signal: str = "ungrounded",
) -> list[Row]:
    """`bad` traces with the flag set and `good` without, just before `at`."""
    return [
        Row(
            at=at - STEP / 2,
            values={signal: i < bad},
            trace_id=f"t{next(_ids)}",
            project_id="proj",
            environment=environment,
            query_type=query_type,
        )
        for i in range(bad + good)
    ]


def rows_of(spec: str, at: float) -> list[Row]:
    if spec == "-":
        return []
    bad, total = (int(part) for part in spec.split("/"))
    return traces(at, bad, total - bad)


Seen = tuple[str | None, str, str | None]  # (transition, status, severity) after a step


def play(
    rule: WindowRule,
    specs: Sequence[str],
    states: Mapping[GroupKey, AlertState] | None = None,
    first: int = 0,
) -> tuple[list[Seen], dict[GroupKey, AlertState], list[AlertEvent]]:
    """Evaluate `rule` once a minute over `specs` (step `first` onwards), one group."""
    current = dict(states or {})
    seen: list[Seen] = []
    events: list[AlertEvent] = []
    for index, spec in enumerate(specs, start=first):
        at = T0 + index * STEP
        result = evaluate(rule, rows_of(spec, at), current, at)
        current = result.states
        assert len(result.events) <= 1
        events.extend(result.events)
        state = current[()]
        transition = result.events[0].transition if result.events else None
        seen.append((transition, state.status, state.severity))
    return seen, current, events


# (transition, status, severity) after a step; a name for each that happens.
OK: Seen = (None, "ok", None)
PENDING: Seen = (None, "pending", "page")
PENDING_WARN: Seen = (None, "pending", "warn")
FIRING: Seen = (None, "firing", "page")
FIRING_WARN: Seen = (None, "firing", "warn")
STARTS: Seen = ("pending", "pending", "page")
STARTS_WARN: Seen = ("pending", "pending", "warn")
CLEARED: Seen = ("cleared", "ok", None)
FIRED: Seen = ("firing", "firing", "page")
FIRED_WARN: Seen = ("firing", "firing", "warn")
ESCALATED: Seen = ("escalated", "firing", "page")
DEESCALATED: Seen = ("deescalated", "firing", "warn")
RENOTIFIED: Seen = ("renotified", "firing", "page")
RESOLVED: Seen = ("resolved", "ok", None)
NO_DATA: Seen = ("no_data", "firing", "page")
NO_DATA_ENDS_PENDING: Seen = ("resolved", "pending", "page")

SCENARIOS: list[tuple[str, dict[str, object], list[str], list[Seen]]] = [
    ("for_pending_then_firing_after_it_held", {}, ["6/10"] * 3, [STARTS, PENDING, FIRED]),
    ("for_zero_fires_at_once", {"for_s": 0.0}, ["6/10"], [FIRED]),
    (
        "breach_that_clears_before_for_is_cleared",
        {},
        ["6/10", "6/10", "0/10", "0/10"],
        [STARTS, PENDING, CLEARED, OK],
    ),
    (
        "an_interrupted_breach_starts_for_again",
        {},
        ["6/10", "0/10", "6/10", "6/10", "6/10"],
        [STARTS, CLEARED, STARTS, PENDING, FIRED],
    ),
    ("too_few_samples_never_page", {"for_s": 0.0}, ["3/3"] * 3, [OK, OK, OK]),
    (
        "too_few_samples_hold_a_firing_alert",
        {},
        ["6/10", "6/10", "6/10", "0/3", "0/3", "0/10"],
        [STARTS, PENDING, FIRED, FIRING, FIRING, RESOLVED],
    ),
    ("too_few_samples_hold_pending", {}, ["6/10", "2/2", "6/10"], [STARTS, PENDING, FIRED]),
    (
        "warn_then_page_after_for",
        {},
        ["4/10"] * 3 + ["6/10"] * 4,
        [STARTS_WARN, PENDING_WARN, FIRED_WARN, FIRING_WARN, FIRING_WARN, ESCALATED, FIRING],
    ),
    (
        "an_interrupted_escalation_waits_for_again",
        {},
        ["4/10"] * 3 + ["6/10", "4/10", "6/10", "6/10", "6/10"],
        [STARTS_WARN, PENDING_WARN, FIRED_WARN, *[FIRING_WARN] * 4, ESCALATED],
    ),
    (
        "pending_warn_that_grows_fires_as_page",
        {},
        ["4/10", "6/10", "6/10"],
        [STARTS_WARN, PENDING, FIRED],
    ),
    (
        "page_back_to_warn_is_deescalated",
        {},
        ["6/10"] * 3 + ["4/10"] * 2,
        [STARTS, PENDING, FIRED, DEESCALATED, FIRING_WARN],
    ),
    (
        "warn_resolves",
        {"for_s": 0.0},
        ["4/10", "4/10", "0/10"],
        [FIRED_WARN, FIRING_WARN, RESOLVED],
    ),
    (
        "renotified_every_repeat_while_firing",
        {"for_s": 0.0},
        ["6/10"] * 11,
        [FIRED, *[FIRING] * 4, RENOTIFIED, *[FIRING] * 4, RENOTIFIED],
    ),
    (
        "repeat_zero_never_renotifies",
        {"for_s": 0.0, "repeat_s": 0.0},
        ["6/10"] * 11,
        [FIRED, *[FIRING] * 10],
    ),
    (
        "resolve_when_it_no_longer_crosses",
        {"for_s": 0.0},
        ["6/10", "1/10", "1/10"],
        [FIRED, RESOLVED, OK],
    ),
    (
        "no_data_keep_holds_a_firing_alert",
        {"for_s": 0.0, "no_data": "keep"},
        ["6/10"] + ["-"] * 10,
        [FIRED, *[FIRING] * 10],
    ),
    (
        "no_data_ok_resolves_after_no_data_for",
        {"for_s": 0.0, "no_data": "ok"},
        ["6/10"] + ["-"] * 5,
        [FIRED, FIRING, FIRING, FIRING, RESOLVED, OK],
    ),
    (
        "no_data_ok_clears_pending",
        {"no_data": "ok"},
        ["6/10"] + ["-"] * 4,
        [STARTS, PENDING, PENDING, PENDING, CLEARED],
    ),
    (
        "no_data_ok_counts_from_the_first_empty_window",
        {"for_s": 0.0, "no_data": "ok"},
        ["6/10", "-", "-", "6/10", "-", "-", "-", "-"],
        [FIRED, *[FIRING] * 6, RESOLVED],
    ),
    (
        "no_data_alert_pages_then_resolves_when_data_returns",
        {"no_data": "alert"},
        ["-"] * 5 + ["1/10"] * 2,
        [OK, OK, OK, NO_DATA, FIRING, RESOLVED, OK],
    ),
    (
        "no_data_alert_renotifies_every_repeat",
        {"no_data": "alert"},
        ["-"] * 9,
        [OK, OK, OK, NO_DATA, *[FIRING] * 4, RENOTIFIED],
    ),
    (
        "no_data_alert_held_while_too_few_samples_return",
        {"no_data": "alert"},
        ["-"] * 4 + ["0/2", "0/10"],
        [OK, OK, OK, NO_DATA, FIRING, RESOLVED],
    ),
    (
        "no_data_alert_resolved_then_a_breach_is_an_alert_of_its_own",
        {"no_data": "alert"},
        ["-"] * 4 + ["6/10"] * 3,
        [OK, OK, OK, NO_DATA, NO_DATA_ENDS_PENDING, PENDING, FIRED],
    ),
    (
        "no_data_alert_resolved_then_a_breach_fires_next_with_for_zero",
        {"no_data": "alert", "for_s": 0.0},
        ["-"] * 4 + ["6/10"] * 2,
        [OK, OK, OK, NO_DATA, NO_DATA_ENDS_PENDING, FIRED],
    ),
    (
        "no_data_alert_resolved_even_when_the_breach_then_clears",
        {"no_data": "alert"},
        ["-"] * 4 + ["6/10", "0/10"],
        [OK, OK, OK, NO_DATA, NO_DATA_ENDS_PENDING, CLEARED],
    ),
    (
        "no_data_alert_on_a_firing_alert_pages_as_no_data",
        {"for_s": 0.0, "no_data": "alert"},
        ["4/10"] + ["-"] * 4 + ["0/10"],
        [FIRED_WARN, FIRING_WARN, FIRING_WARN, FIRING_WARN, NO_DATA, RESOLVED],
    ),
]


@pytest.mark.parametrize(
    ("changes", "specs", "expected"),
    [s[1:] for s in SCENARIOS],
    ids=[s[0] for s in SCENARIOS],
)
def test_state_machine(changes: dict[str, object], specs: list[str], expected: list[Seen]) -> None:
    assert len(specs) == len(expected)
    seen, _, _ = play(with_(**changes), specs)
    assert seen == expected


@pytest.mark.parametrize(
    ("changes", "specs", "told"),
    [
        ({}, ["6/10", "6/10", "0/10"], []),
        ({}, ["6/10", "6/10", "6/10", "0/10"], ["firing", "resolved"]),
        ({"for_s": 0.0}, ["4/10", "6/10", "4/10"], ["firing", "escalated", "deescalated"]),
        ({"no_data": "alert"}, ["-", "-", "-", "-", "0/10"], ["no_data", "resolved"]),
        ({"no_data": "ok", "for_s": 0.0}, ["6/10", "-", "-", "-", "-"], ["firing", "resolved"]),
        ({"for_s": 0.0}, ["3/3"] * 8, []),
    ],
    ids=[
        "pending_and_cleared_are_silent",
        "fire_and_resolve",
        "severity_changes",
        "no_data_alert",
        "no_data_ok",
        "never_below_min_samples",
    ],
)
def test_what_a_person_is_told(
    changes: dict[str, object], specs: list[str], told: list[str]
) -> None:
    _, _, events = play(with_(**changes), specs)
    assert [e.transition for e in events if e.notify] == told


def test_a_firing_event_says_what_and_since_when() -> None:
    _, _, events = play(with_(for_s=120.0), ["6/10", "6/10", "7/10", "0/10"])
    fired, resolved = (e for e in events if e.notify)
    assert (fired.at, fired.since, fired.value, fired.samples) == (T0 + 120, T0 + 120, 0.7, 10)
    assert (fired.severity, fired.previous_severity) == ("page", None)
    assert len(fired.examples) == 5
    assert (resolved.at, resolved.since, resolved.value) == (T0 + 180, T0 + 120, 0.0)
    assert resolved.severity == "page"


# -- groups --------------------------------------------------------------------------

PROD_BILLING: GroupKey = (("environment", "production"), ("query_type", "billing"))
PROD_SEARCH: GroupKey = (("environment", "production"), ("query_type", "search"))
STAGING_BILLING: GroupKey = (("environment", "staging"), ("query_type", "billing"))


def mixed_rows(at: float) -> list[Row]:
    return (
        traces(at, 6, 4, "production", "billing")
        + traces(at, 0, 10, "production", "search")
        + traces(at, 8, 2, "staging", "billing")
    )


def firing_groups(result: Evaluation) -> set[GroupKey]:
    return {e.group for e in result.events if e.transition == "firing"}


def test_one_alert_per_environment_and_query_type() -> None:
    rule = with_(for_s=0.0, group_by=("environment", "query_type"))
    result = evaluate(rule, mixed_rows(T0), {}, T0)
    assert firing_groups(result) == {PROD_BILLING, STAGING_BILLING}
    assert result.states[PROD_SEARCH].status == "ok"
    assert {g: s.value for g, s in result.states.items()} == {
        PROD_BILLING: 0.6,
        PROD_SEARCH: 0.0,
        STAGING_BILLING: 0.8,
    }


def test_group_by_one_label_pools_the_other() -> None:
    rule = with_(for_s=0.0, group_by=("environment",))
    result = evaluate(rule, mixed_rows(T0), {}, T0)
    production = (("environment", "production"),)
    staging = (("environment", "staging"),)
    assert result.states[production].value == 0.3  # 6 of 20
    assert result.states[production].severity is None  # 0.3 is not above 0.3
    assert firing_groups(result) == {staging}


def test_where_keeps_other_environments_out() -> None:
    rule = with_(
        for_s=0.0,
        group_by=("environment", "query_type"),
        where=(("environment", "production"),),
    )
    result = evaluate(rule, mixed_rows(T0), {}, T0)
    assert firing_groups(result) == {PROD_BILLING}
    assert set(result.states) == {PROD_BILLING, PROD_SEARCH}


def by_environment(at: float = T0, **sizes: tuple[int, int]) -> list[Row]:
    return [row for env, (bad, good) in sizes.items() for row in traces(at, bad, good, env)]


def env(name: str) -> GroupKey:
    return (("environment", name),)


ENV_RULE = with_(for_s=0.0, group_by=("environment",), min_samples=1)


def test_the_busiest_groups_are_kept_and_the_rest_counted() -> None:
    rows = by_environment(a=(4, 0), b=(5, 0), c=(6, 0))
    result = evaluate(ENV_RULE, rows, {}, T0, max_groups=2)
    assert set(result.states) == {env("b"), env("c")}
    assert firing_groups(result) == {env("b"), env("c")}
    assert result.capped == 1


def test_a_firing_group_keeps_its_place_over_busier_ones() -> None:
    rows = by_environment(a=(1, 0), b=(5, 0), c=(6, 0))
    firing = AlertState(status="firing", severity="page", since=T0 - 600, last_notified=T0 - 600)
    result = evaluate(ENV_RULE, rows, {env("a"): firing}, T0, max_groups=2)
    assert result.states[env("a")].status == "firing"
    assert firing_groups(result) == {env("c")}  # a is not paged again
    assert result.capped == 1


def test_a_firing_group_keeps_its_place_over_busier_pending_ones() -> None:
    # alerts.max_groups lowered (to 2) while three groups alert: the one that
    # paged must stay remembered, or it is never resolved and pages again.
    rule = with_(for_s=300.0, group_by=("environment",), min_samples=1)
    rows = by_environment(a=(1, 0), b=(5, 0), c=(6, 0))
    firing = AlertState(status="firing", severity="page", since=T0 - 600, last_notified=T0 - 600)
    pending = AlertState(status="pending", severity="page", since=T0 - 60)
    states = {env("a"): firing, env("b"): pending, env("c"): pending}
    result = evaluate(rule, rows, states, T0, max_groups=2)
    assert result.states[env("a")].status == "firing"
    assert result.capped == 1
    later = evaluate(rule, by_environment(T0 + STEP, a=(0, 3)), result.states, T0 + STEP, 2)
    assert [(e.group, e.transition) for e in later.events] == [(env("a"), "resolved")]


def test_a_resolved_group_gives_up_its_place() -> None:
    firing = AlertState(status="firing", severity="page", since=T0 - 600, last_notified=T0 - 600)
    first = evaluate(
        ENV_RULE, by_environment(a=(0, 1), b=(5, 0), c=(6, 0)), {env("a"): firing}, T0, 2
    )
    assert [(e.group, e.transition) for e in first.events] == [
        (env("a"), "resolved"),
        (env("c"), "firing"),
    ]
    second = evaluate(
        ENV_RULE,
        by_environment(T0 + STEP, a=(0, 1), b=(5, 0), c=(6, 0)),
        first.states,
        T0 + STEP,
        2,
    )
    assert firing_groups(second) == {env("b")}
    assert env("a") not in second.states


# -- restarts --------------------------------------------------------------------------


def through_the_state_file(
    path: Path, rule: WindowRule, states: Mapping[GroupKey, AlertState]
) -> dict[GroupKey, AlertState]:
    """What a new process finds: saved after the evaluation, loaded at start."""
    before = State(path)
    try:
        before.alerts.commit(rule.name, states, T0)
    finally:
        before.close()
    after = State(path)
    try:
        return after.alerts.load().get(rule.name, {})
    finally:
        after.close()


RESTARTS: list[tuple[str, dict[str, object], list[str], list[str], list[Seen]]] = [
    ("ok", {}, ["0/10"], ["6/10"], [STARTS]),
    ("pending", {}, ["6/10"], ["6/10", "6/10"], [PENDING, FIRED]),
    ("firing", {}, ["6/10"] * 3, ["6/10", "0/10"], [FIRING, RESOLVED]),
    ("firing_before_repeat", {}, ["6/10"] * 3, ["6/10"] * 5, [*[FIRING] * 4, RENOTIFIED]),
    ("firing_warn", {}, ["4/10"] * 3, ["4/10", "6/10"], [FIRING_WARN, FIRING_WARN]),
    ("escalating", {}, ["4/10"] * 3 + ["6/10"], ["6/10", "6/10"], [FIRING_WARN, ESCALATED]),
    ("held_without_verdict", {}, ["6/10"] * 3 + ["0/2"], ["0/2", "6/10"], [FIRING, FIRING]),
    ("no_data_firing", {"no_data": "alert"}, ["-"] * 4, ["-", "0/10"], [FIRING, RESOLVED]),
    (
        "no_data_counting",
        {"no_data": "ok", "for_s": 0.0},
        ["6/10", "-", "-"],
        ["-", "-"],
        [FIRING, RESOLVED],
    ),
]


@pytest.mark.parametrize(
    ("changes", "before", "after", "expected"),
    [r[1:] for r in RESTARTS],
    ids=[r[0] for r in RESTARTS],
)
def test_a_restart_neither_pages_again_nor_forgets(
    tmp_path: Path,
    changes: dict[str, object],
    before: list[str],
    after: list[str],
    expected: list[Seen],
) -> None:
    rule = with_(**changes)
    _, states, _ = play(rule, before)
    restarted = through_the_state_file(tmp_path / "state.sqlite", rule, states)
    assert restarted == states
    seen, _, events = play(rule, after, restarted, first=len(before))
    assert seen == expected
    # The same as a process that never stopped.
    never_stopped, _, _ = play(rule, before + after)
    assert never_stopped[len(before) :] == seen
    if states[()].status == "firing":
        assert "firing" not in [e.transition for e in events]


# -- event time -----------------------------------------------------------------------


def stream(first_half_bad: bool) -> list[Row]:
    """Ten minutes of traces, one every ten seconds; the flag flips at minute five."""
    return [
        Row(T0 + 10 * i + 5, {"ungrounded": (i < 30) == first_half_bad}, f"s{i}") for i in range(60)
    ]


def test_a_lagging_watermark_sees_only_rows_up_to_it() -> None:
    rule = with_(for_s=0.0, window_s=300.0)
    rows = stream(first_half_bad=False)
    # Traces of all ten minutes are known; the watermark is still at minute five.
    lagging = evaluate(rule, rows, {}, T0 + 300)
    assert lagging.events == []
    assert (lagging.states[()].value, lagging.states[()].samples) == (0.0, 30)
    caught_up = evaluate(rule, rows, lagging.states, T0 + 600)
    assert [e.transition for e in caught_up.events] == ["firing"]


def test_rows_after_the_watermark_do_not_resolve() -> None:
    rule = with_(for_s=0.0, window_s=300.0)
    rows = stream(first_half_bad=True)
    fired = evaluate(rule, rows, {}, T0 + 300)
    assert [e.transition for e in fired.events] == ["firing"]
    still = evaluate(rule, rows, fired.states, T0 + 330)
    assert still.events == [] and still.states[()].status == "firing"
    assert still.states[()].value == 0.9  # 27 of the 30 traces up to the watermark
    resolved = evaluate(rule, rows, fired.states, T0 + 600)
    assert [e.transition for e in resolved.events] == ["resolved"]


def test_replay_up_to_a_lagging_watermark_sees_only_rows_up_to_it() -> None:
    rule = with_(for_s=0.0, window_s=300.0)
    points = evaluation_points(None, T0 + 300, STEP, rule.for_s + STEP)
    assert replay(rule, stream(first_half_bad=False), {}, points).events == []


def test_the_window_is_open_at_its_start_and_closed_at_its_end() -> None:
    rule = with_(for_s=0.0, window_s=60.0, min_samples=1)
    at_start = Row(T0, {"ungrounded": True}, "start")
    at_end = Row(T0 + 60, {"ungrounded": False}, "end")
    result = evaluate(rule, [at_start, at_end], {}, T0 + 60)
    assert (result.states[()].samples, result.states[()].value) == (1, 0.0)


def test_trace_rules_ignore_daemon_samples_and_daemon_rules_ignore_traces() -> None:
    lag_rule = check_window_rule(
        WindowRule(
            "pipeline_lag_high", Expression("lag_s"), "max", ">", 600, 300, warn_threshold=300
        )
    )
    sample = Row(T0 - 10, {"lag_s": 900.0})
    traced = Row(T0 - 10, {"lag_s": 10_000.0}, trace_id="t")
    result = evaluate(lag_rule, [sample, traced], {}, T0)
    assert result.states[()].value == 900.0
    assert [e.transition for e in result.events] == ["firing"]
    assert result.events[0].examples == ()  # a sample has no trace to link


# -- aggregates --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "values", "expected"),
    [
        ("mean", [4.0, 1.0, 3.0, 2.0], 2.5),
        ("rate", [1.0, 0.0, 1.0, 1.0], 0.75),
        ("count", [1.0, 0.0, 1.0, 1.0], 3.0),
        ("count", [2.0, 0.0, 3.0], 5.0),
        ("p50", [4.0, 1.0, 3.0, 2.0], 2.5),
        ("p50", [5.0, 1.0, 3.0], 3.0),
        ("p95", [4.0, 1.0, 3.0, 2.0], 3.85),
        ("p95", [7.0], 7.0),
        ("min", [4.0, 1.0, 3.0, 2.0], 1.0),
        ("max", [4.0, 1.0, 3.0, 2.0], 4.0),
        ("mean", [0.1] * 10, 0.1),
    ],
    ids=[
        "mean",
        "rate_share_true",
        "count_of_a_flag",
        "count_adds_up_a_count",
        "p50_even",
        "p50_odd",
        "p95_interpolated",
        "p95_single",
        "min",
        "max",
        "mean_without_drift",
    ],
)
def test_aggregate(name: str, values: list[float], expected: float) -> None:
    assert aggregate(name, values) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("value", "count", "op", "page", "warn", "severity"),
    [
        (0.8, 43, "<", 0.8, 0.85, "warn"),
        (0.85, 13, "<", 0.8, 0.85, None),
        (0.01, 57, ">", 0.01, None, None),
        (0.02, 29, "<", 0.02, None, None),
    ],
    ids=[
        "faithfulness_at_the_page_threshold_only_warns",
        "faithfulness_at_the_warn_threshold_is_fine",
        "upward_at_the_threshold",
        "downward_at_the_threshold",
    ],
)
def test_traces_exactly_at_a_threshold_do_not_cross_it(
    value: float, count: int, op: str, page: float, warn: float | None, severity: str | None
) -> None:
    rule = with_(
        expression=Expression("faithfulness"),
        aggregate="mean",
        op=op,
        threshold=page,
        warn_threshold=warn,
        for_s=0.0,
        min_samples=1,
    )
    rows = [Row(T0 - 10, {"faithfulness": value}, f"f{i}") for i in range(count)]
    result = evaluate(rule, rows, {}, T0)
    assert result.states[()].value == value
    assert [e.severity for e in result.events if e.transition == "firing"] == (
        [severity] if severity else []
    )


def test_an_unknown_aggregate_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown aggregate 'avg'"):
        aggregate("avg", [1.0])


@pytest.mark.parametrize(
    ("ordered", "q", "expected"),
    [
        ([0.0, 10.0], 0.5, 5.0),
        ([0.0, 10.0], 0.95, 9.5),
        ([0.0, 10.0], 0.0, 0.0),
        ([0.0, 10.0], 1.0, 10.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0.5, 3.0),
        ([3.0], 0.95, 3.0),
    ],
    ids=["middle", "p95", "lowest", "highest", "exact_rank", "one_value"],
)
def test_quantile(ordered: list[float], q: float, expected: float) -> None:
    assert quantile(ordered, q) == pytest.approx(expected)


samples = st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=2, max_size=60)


@given(samples)
def test_percentiles_agree_with_the_inclusive_method(values: list[float]) -> None:
    cuts = statistics.quantiles(values, n=20, method="inclusive")
    assert aggregate("p50", values) == pytest.approx(statistics.median(values), abs=1e-6)
    assert aggregate("p95", values) == pytest.approx(cuts[18], abs=1e-6)


@given(samples, st.floats(0, 1), st.floats(0, 1))
def test_quantiles_stay_within_the_values_and_grow_with_q(
    values: list[float], q1: float, q2: float
) -> None:
    ordered = sorted(values)
    low, high = sorted((q1, q2))
    assert min(values) <= quantile(ordered, low) <= quantile(ordered, high) <= max(values)
    assert min(values) <= aggregate("mean", values) <= max(values)


# -- the worst traces -----------------------------------------------------------------------


def found_for(rule: WindowRule, rows: Sequence[Row]) -> list[tuple[float, Row]]:
    return [(v, r) for r in rows if (v := rule.expression.value(r.values)) is not None]


def test_worst_of_a_flag_are_the_most_recent_bad_traces() -> None:
    rows = [Row(T0 + i, {"ungrounded": i % 2 == 0}, f"t{i}") for i in range(20)]
    assert worst(BASE, found_for(BASE, rows)) == tuple(
        Example(f"t{i}", None, 1.0) for i in (18, 16, 14, 12, 10)
    )


@pytest.mark.parametrize(
    ("signal", "op", "values", "expected"),
    [
        ("faithfulness", "<", [0.9, 0.2, 0.5, 0.1, 0.7, 0.3, 0.8], ["t3", "t1", "t5", "t2", "t4"]),
        ("invalid_citations", ">", [0, 3, 1, 5, 2, 0, 4], ["t3", "t6", "t1", "t4", "t2"]),
        ("faithfulness", "<", [0.5, 0.5, 0.5], ["t2", "t1", "t0"]),
    ],
    ids=["downward_lowest_first", "upward_highest_first", "ties_most_recent_first"],
)
def test_worst_of_a_number(signal: str, op: str, values: list[float], expected: list[str]) -> None:
    watched = with_(
        expression=Expression(signal),
        aggregate="mean",
        op=op,
        threshold=1.0 if op == ">" else 0.8,
        warn_threshold=None,
    )
    rows = [Row(T0 + i, {signal: v}, f"t{i}") for i, v in enumerate(values)]
    assert [e.trace_id for e in worst(watched, found_for(watched, rows))] == expected


def test_a_page_links_at_most_five_traces_and_only_bad_ones() -> None:
    rule = with_(for_s=0.0)
    result = evaluate(rule, traces(T0, 40, 10), {}, T0)
    (fired,) = result.events
    assert len(fired.examples) == 5
    assert all(e.value == 1.0 for e in fired.examples)
    assert result.examples[()] == fired.examples


# -- evaluation points ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("last", "target", "lead", "expected"),
    [
        (T0 + 120, T0 + 300, 180, [T0 + 180, T0 + 240, T0 + 300]),
        (T0 + 120, T0 + 290, 180, [T0 + 180, T0 + 240, T0 + 290]),
        (T0 + 100, T0 + 300, 180, [T0 + 120, T0 + 180, T0 + 240, T0 + 300]),
        (T0 + 120, T0 + 130, 180, [T0 + 130]),
        (None, T0 + 1000, 180, [T0 + 840, T0 + 900, T0 + 960, T0 + 1000]),
        (None, T0 + 960, 180, [T0 + 840, T0 + 900, T0 + 960]),
        (T0 + 300, T0 + 300, 180, []),
        (T0 + 300, T0 + 240, 180, []),
        (T0 + 1000 - 2 * 86400, T0 + 1000, 180, [T0 + 840, T0 + 900, T0 + 960, T0 + 1000]),
    ],
    ids=[
        "aligned_steps_to_the_target",
        "ends_at_an_unaligned_target",
        "unaligned_last",
        "within_one_step",
        "first_evaluation_leads",
        "first_evaluation_aligned_target",
        "target_did_not_move",
        "target_went_back",
        "long_gap_only_leads",
    ],
)
def test_evaluation_points(
    last: float | None, target: float, lead: float, expected: list[float]
) -> None:
    assert evaluation_points(last, target, STEP, lead) == expected


def test_a_gap_of_a_day_is_replayed_minute_by_minute() -> None:
    points = evaluation_points(T0, T0 + MAX_CATCH_UP_S, STEP, 180)
    assert len(points) == 24 * 60
    assert points[0] == T0 + STEP and points[-1] == T0 + MAX_CATCH_UP_S


def test_a_backtest_window_longer_than_a_day_is_replayed_step_by_step() -> None:
    """A daemon back from a long gap leads in to its target; a backtest (no catch-up
    limit) replays every step of its window, however long."""
    assert evaluation_points(T0, T0 + 14 * 86400, STEP, 0.0) == [T0 + 14 * 86400]
    points = evaluation_points(T0, T0 + 14 * 86400, STEP, 0.0, None)
    assert len(points) == 14 * 24 * 60
    assert points[0] == T0 + STEP and points[-1] == T0 + 14 * 86400


@given(
    last=st.none() | st.integers(0, 10**6).map(lambda s: T0 + s),
    ahead=st.integers(-1000, 3 * 86400),
    step_s=st.sampled_from([15.0, 60.0, 300.0]),
    lead_s=st.sampled_from([0.0, 60.0, 180.0, 3660.0]),
)
def test_evaluation_points_properties(
    last: float | None, ahead: int, step_s: float, lead_s: float
) -> None:
    target = (last if last is not None else T0) + ahead
    points = evaluation_points(last, target, step_s, lead_s)
    if last is not None and target <= last:
        assert points == []
        return
    assert points[-1] == target
    assert points == sorted(set(points))
    assert all(p % step_s == 0 for p in points[:-1])
    earliest = target - lead_s if last is None or target - last > MAX_CATCH_UP_S else last
    assert all(p > earliest for p in points[:-1])
    assert len(points) <= MAX_CATCH_UP_S / step_s + 1


# -- replay ------------------------------------------------------------------------------------

ENVIRONMENTS = ("production", "staging", "dev")


@st.composite
def histories(draw: st.DrawFn) -> list[Row]:
    count = draw(st.integers(0, 80))
    return [
        Row(
            at=T0 + draw(st.integers(0, 1800)),
            values={"ungrounded": draw(st.booleans())},
            trace_id=f"t{i}",
            environment=draw(st.sampled_from(ENVIRONMENTS)),
        )
        for i in range(count)
    ]


@given(
    rows=histories(),
    points=st.lists(st.integers(0, 2400), min_size=1, max_size=25, unique=True).map(
        lambda xs: [T0 + x for x in sorted(xs)]
    ),
    for_s=st.sampled_from([0.0, 60.0, 180.0]),
    no_data=st.sampled_from(["keep", "ok", "alert"]),
    max_groups=st.integers(1, 3),
)
def test_replay_is_evaluate_at_each_point(
    rows: list[Row], points: list[float], for_s: float, no_data: str, max_groups: int
) -> None:
    rule = with_(
        for_s=for_s,
        window_s=300.0,
        min_samples=2,
        no_data=no_data,
        no_data_for_s=120.0,
        group_by=("environment",),
    )
    replayed = replay(rule, rows, {}, points, max_groups)
    states: dict[GroupKey, AlertState] = {}
    events: list[AlertEvent] = []
    last = Evaluation()
    for at in points:
        last = evaluate(rule, rows, states, at, max_groups)
        states = last.states
        events.extend(last.events)
    assert replayed.events == events
    assert replayed.states == states
    assert replayed.examples == last.examples
    assert replayed.capped == last.capped


# -- the state machine under random use ------------------------------------------------------

PAGES = frozenset({"firing", "renotified", "escalated", "deescalated"})
PRODUCTION_ONLY = (("environment", "production"),)


@st.composite
def random_rules(draw: st.DrawFn) -> WindowRule:
    kind = draw(st.sampled_from(["flag", "number", "daemon"]))
    if kind == "flag":
        expression, aggregate_name, op, page = Expression("ungrounded"), "rate", ">", 0.5
        warn = draw(st.none() | st.just(0.3))
    elif kind == "number":
        expression, aggregate_name, op, page = Expression("faithfulness"), "mean", "<", 0.5
        warn = draw(st.none() | st.just(0.7))
    else:
        expression, aggregate_name, op, page = Expression("lag_s"), "max", ">", 600.0
        warn = draw(st.none() | st.just(300.0))
    return check_window_rule(
        WindowRule(
            name="random_rule",
            expression=expression,
            aggregate=aggregate_name,
            op=op,
            threshold=page,
            warn_threshold=warn,
            window_s=draw(st.sampled_from([60.0, 300.0, 900.0])),
            min_samples=draw(st.integers(1, 5)),
            for_s=draw(st.sampled_from([0.0, 60.0, 120.0, 300.0])),
            repeat_s=draw(st.sampled_from([0.0, 60.0, 300.0, 3600.0])),
            no_data=draw(st.sampled_from(["keep", "ok", "alert"])),
            no_data_for_s=draw(st.sampled_from([0.0, 120.0, 600.0])),
            group_by=draw(st.sampled_from([(), ("environment",), ("environment", "query_type")])),
            where=() if kind == "daemon" else draw(st.sampled_from([(), PRODUCTION_ONLY])),
        )
    )


class OneRuleUnderRandomUse(RuleBasedStateMachine):
    """One rule, random traces and samples, evaluations as the daemon runs them, restarts."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="observer-engine-"))
        self.store = State(self.directory / "state.sqlite")
        self.saved = False
        self.rows: list[Row] = []
        self.states: dict[GroupKey, AlertState] = {}
        self.watermark = T0
        # What the people paged were told: groups firing, and those firing for no data.
        self.open: set[GroupKey] = set()
        self.no_data_open: set[GroupKey] = set()
        self.rule = BASE
        self.max_groups = 50
        self.step_s = STEP

    @initialize(rule=random_rules(), max_groups=st.integers(1, 3))
    def configure(self, rule: WindowRule, max_groups: int) -> None:
        self.rule = rule
        self.max_groups = max_groups

    @rule(
        count=st.integers(1, 8),
        ahead=st.integers(0, 900),
        spread=st.integers(0, 300),
        environment=st.sampled_from(ENVIRONMENTS),
        query_type=st.sampled_from(["billing", "none"]),
        bad=st.floats(0, 1),
        seed=st.integers(0, 2**16),
    )
    def traces_arrive(
        self,
        count: int,
        ahead: int,
        spread: int,
        environment: str,
        query_type: str,
        bad: float,
        seed: int,
    ) -> None:
        """Traces beyond the watermark: visible to an evaluation once it gets there."""
        for i in range(count):
            unit = ((seed * 7919 + i * 104729) % 1000) / 1000
            values: dict[str, float | bool | None] = {
                "ungrounded": unit < bad,
                "faithfulness": None if unit > 0.9 else round(1 - bad * unit * 2, 3),
            }
            self.rows.append(
                Row(
                    at=self.watermark + ahead + (i * spread) / max(count, 1),
                    values=values,
                    trace_id=f"t{next(_ids)}",
                    project_id="proj",
                    environment=environment,
                    query_type=query_type,
                )
            )

    @rule(ahead=st.integers(0, 900), lag=st.sampled_from([0.0, 120.0, 400.0, 900.0]))
    def daemon_sample(self, ahead: int, lag: float) -> None:
        self.rows.append(Row(at=self.watermark + ahead, values={"lag_s": lag}))

    @rule(advance=st.one_of(st.integers(0, 600), st.integers(86_400, 200_000)))
    def evaluate(self, advance: int) -> None:
        """What the service does after a pass: catch up to the new point, save the state."""
        target = self.watermark + advance
        last = max((s.evaluated_at for s in self.states.values() if s.evaluated_at), default=None)
        points = evaluation_points(last, target, self.step_s, self.rule.for_s + self.step_s)
        self.watermark = target
        if not points:
            return
        result = replay(self.rule, self.rows, self.states, points, self.max_groups)
        for event in result.events:
            self.told(event)
        self.states = result.states
        self.store.alerts.commit(self.rule.name, self.states, points[-1])
        self.saved = True

    @rule(now=st.integers(0, 3))
    def restart(self, now: int) -> None:
        """A new process on the same file: what it knows is what was saved."""
        if now != 0 or not self.saved:
            return  # closing SQLite is slow: restart a quarter as often, after a save
        self.saved = False
        self.store.close()
        self.store = State(self.store.path)
        self.states = self.store.alerts.load().get(self.rule.name, {})

    def in_window(self, group: GroupKey, at: float) -> int:
        """Samples of the group in the window at `at`, counted independently of the engine."""
        rule = self.rule
        return sum(
            1
            for row in self.rows
            if at - rule.window_s < row.at <= at
            and (row.trace_id is None) == rule.pipeline
            and in_scope(rule, row)
            and group_of(rule, row) == group
            and rule.expression.value(row.values) is not None
        )

    def told(self, event: AlertEvent) -> None:
        group, kind = event.group, event.transition
        if kind == "firing":
            assert group not in self.open, f"paged twice for {group} without a resolve"
            self.open.add(group)
        elif kind == "no_data":
            assert self.rule.no_data == "alert"
            assert self.in_window(group, event.at) == 0
            self.open.add(group)
            self.no_data_open.add(group)
        elif kind == "resolved":
            assert group in self.open, f"resolved {group}, which never fired"
            self.open.discard(group)
            self.no_data_open.discard(group)
        elif kind in ("renotified", "escalated", "deescalated"):
            assert group in self.open, f"{kind} for {group}, which is not firing"
        else:  # pending, cleared: never while people think it fires
            assert group not in self.open, f"{kind} for {group}, which fired and never resolved"
        if kind in PAGES and not (kind == "renotified" and group in self.no_data_open):
            assert self.in_window(group, event.at) >= self.rule.min_samples
        if event.severity == "warn":
            assert self.rule.warn_threshold is not None

    @invariant()
    def what_people_were_told_is_what_fires(self) -> None:
        firing = {g for g, s in self.states.items() if s.status == "firing"}
        assert firing == self.open

    @invariant()
    def states_are_sound(self) -> None:
        for state in self.states.values():
            for number in (
                state.value,
                state.since,
                state.last_notified,
                state.escalate_since,
                state.no_data_since,
                state.evaluated_at,
            ):
                assert number is None or math.isfinite(number)
            if state.status == "firing":
                assert state.severity in ("warn", "page")
                if state.severity == "warn":
                    assert self.rule.warn_threshold is not None
            if state.status == "ok":
                assert state.severity is None
        assert len(self.states) <= self.max_groups

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.directory, ignore_errors=True)


# Three quarters of the profile's runs: each is a state file and up to 40 steps.
OneRuleUnderRandomUse.TestCase.settings = settings(scaled(0.75), stateful_step_count=40)
TestOneRuleUnderRandomUse = OneRuleUnderRandomUse.TestCase
