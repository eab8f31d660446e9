"""The alert stores in the state file: signal history, rule state, trace-rule caps, the
point each rule reached and the notification outbox."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from observer.alerts.engine import AlertState, Example, GroupKey, Row
from observer.alerts.rules import row_keys
from observer.state import State
from observer.state.alerts import Digest
from observer.state.rows import Notification, Outgoing, Queued
from tests.budget import scaled

T0 = 1_764_000_000.0  # 2025-11-24T16:00:00Z


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state.sqlite"


@pytest.fixture
def state(path: Path) -> Iterator[State]:
    opened = State(path)
    yield opened
    opened.close()


def reopened(state: State) -> State:
    """The same file as a new process sees it."""
    state.close()
    return State(state.path)


def trace(trace_id: str, at: float, **values: float | str | bool | None) -> Row:
    return Row(
        at=at,
        values=values or {"ungrounded": False},
        trace_id=trace_id,
        project_id="proj",
        environment="production",
        query_type="billing",
    )


# -- history -----------------------------------------------------------------------


def test_history_rows_come_back_as_written(state: State) -> None:
    row = Row(
        at=T0 + 0.5,
        values={"ungrounded": True, "confidence_band": "LOW", "faithfulness": 0.25, "x": None},
        trace_id="t1",
        project_id="proj-1",
        environment="staging",
        query_type="search",
    )
    state.history.put(row)
    assert reopened(state).history.rows(T0, T0 + 1) == [row]


def test_a_rescored_trace_replaces_its_row(state: State) -> None:
    state.history.put(trace("t1", T0 + 10, ungrounded=True, faithfulness=0.4))
    state.history.put(trace("t1", T0 + 20, ungrounded=False))
    assert state.history.rows(T0, T0 + 100) == [trace("t1", T0 + 20, ungrounded=False)]
    assert state.history.count() == 1


def test_merge_adds_the_judges_values_to_the_row(state: State) -> None:
    state.history.put(trace("t1", T0 + 10, ungrounded=True, faithfulness=0.4))
    merged = state.history.merge(
        "t1", {"faithfulness": 0.9, "critical_unsupported": True, "judge_error": None}
    )
    expected = trace("t1", T0 + 10, ungrounded=True, faithfulness=0.9, critical_unsupported=True)
    assert merged == expected
    # A value the judge does not have leaves the row's own alone.
    assert state.history.rows(T0, T0 + 100) == [expected]


def test_merge_into_an_unknown_trace_is_none(state: State) -> None:
    assert state.history.merge("nobody", {"faithfulness": 0.9}) is None
    assert state.history.rows(0, math.inf) == []


def skipped(trace_id: str, at: float, reason: str = "no_answer_text") -> Row:
    return Row(
        at=at,
        values={"skipped": True, "skip_reason": reason},
        trace_id=trace_id,
        project_id="proj",
        environment="production",
        query_type="none",
    )


def test_a_read_of_skipped_keeps_its_reason_and_other_reads_leave_skip_rows_out(
    state: State,
) -> None:
    scored = trace("t1", T0 + 10, ungrounded=True, skipped=False)
    state.history.put_many([scored, skipped("t2", T0 + 20)])
    assert state.history.rows(T0, T0 + 100, row_keys({"skipped"})) == [
        trace("t1", T0 + 10, skipped=False),
        skipped("t2", T0 + 20),
    ]
    reader = state.history.reader()
    try:
        # The evaluator's reads: a rule on a signal of answers never sees a skip row.
        assert reader.rows(T0, T0 + 100, {"ungrounded"}, samples=False) == [
            trace("t1", T0 + 10, ungrounded=True)
        ]
        assert [r.trace_id for r in reader.rows(T0, T0 + 100, row_keys({"skipped"}))] == [
            "t1",
            "t2",
        ]
    finally:
        reader.close()


def test_the_judge_merges_nothing_into_a_trace_skipped_since(state: State) -> None:
    state.history.put(skipped("t1", T0 + 10))
    assert state.history.merge("t1", {"faithfulness": 0.2, "judge_error": False}) is None
    assert state.history.rows(T0, T0 + 100) == [skipped("t1", T0 + 10)]


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (T0, T0 + 30, ["t10", "t20", "t30"]),
        (T0 + 10, T0 + 30, ["t20", "t30"]),
        (T0 + 10, T0 + 29.9, ["t20"]),
        (T0 + 30, T0 + 100, []),
        (T0 - 100, T0, []),
        (T0 + 20, T0 + 20, []),
    ],
    ids=[
        "all",
        "start_excluded",
        "end_included_only_when_reached",
        "after_the_last",
        "before_the_first",
        "empty_interval",
    ],
)
def test_rows_are_the_half_open_interval(
    state: State, start: float, end: float, expected: list[str]
) -> None:
    for at in (30, 10, 20):
        state.history.put(trace(f"t{at}", T0 + at))
    assert [r.trace_id for r in state.history.rows(start, end)] == expected


def test_daemon_samples_are_rows_without_a_trace(state: State) -> None:
    state.history.put(trace("t1", T0 + 5))
    state.history.add_samples(T0 + 10, {"lag_s": 42.0, "scores_dropped": 3})
    state.history.add_samples(T0 + 1, {"lag_s": 7.0})
    rows = state.history.rows(T0, T0 + 60)
    assert [(r.at, r.trace_id, dict(r.values)) for r in rows] == [
        (T0 + 1, None, {"lag_s": 7.0}),
        (T0 + 5, "t1", {"ungrounded": False}),
        (T0 + 10, None, {"lag_s": 42.0}),
        (T0 + 10, None, {"scores_dropped": 3.0}),
    ]
    assert state.history.count() == 1  # traces only


def test_span_covers_traces_and_samples(state: State) -> None:
    assert state.history.span() is None
    state.history.put(trace("t1", T0 + 50))
    assert state.history.span() == (T0 + 50, T0 + 50)
    state.history.add_samples(T0 + 5, {"lag_s": 1.0})
    state.history.add_samples(T0 + 90, {"lag_s": 1.0})
    assert state.history.span() == (T0 + 5, T0 + 90)


def test_prune_forgets_rows_and_samples_before_the_cutoff(state: State) -> None:
    for at in (10, 20, 30):
        state.history.put(trace(f"t{at}", T0 + at))
        state.history.add_samples(T0 + at, {"lag_s": float(at)})
    assert state.history.prune(T0 + 20) == 2
    rows = state.history.rows(0, math.inf)
    assert sorted({r.at for r in rows}) == [T0 + 20, T0 + 30]
    assert state.history.span() == (T0 + 20, T0 + 30)


# -- window-rule state ---------------------------------------------------------------

PROD: GroupKey = (("environment", "production"), ("query_type", "billing"))
STAGING: GroupKey = (("environment", "staging"), ("query_type", "none"))

FIRING = AlertState(
    status="firing",
    severity="warn",
    since=T0 + 60,
    last_notified=T0 + 120.25,
    escalate_since=T0 + 180,
    no_data_since=None,
    no_data_firing=False,
    value=0.0412345678901234,
    samples=57,
    evaluated_at=T0 + 240,
)


def test_rule_state_survives_a_restart_field_for_field(state: State) -> None:
    states = {PROD: FIRING, STAGING: AlertState(no_data_since=T0, evaluated_at=T0 + 240)}
    state.alerts.commit("ungrounded_rate_high", states, T0 + 240)
    state.alerts.commit("pipeline_lag_high", {(): AlertState(status="pending", since=T0)}, T0)
    assert reopened(state).alerts.load() == {
        "ungrounded_rate_high": states,
        "pipeline_lag_high": {(): AlertState(status="pending", since=T0)},
    }


def test_a_commit_is_the_whole_state_of_the_rule(state: State) -> None:
    state.alerts.commit("r", {PROD: FIRING, STAGING: AlertState()}, T0)
    state.alerts.commit("r", {STAGING: FIRING}, T0 + 60)
    assert state.alerts.load() == {"r": {STAGING: FIRING}}
    state.alerts.commit("r", {}, T0 + 120)
    assert state.alerts.load() == {}


def test_forget_other_rules_keeps_only_the_configured(state: State) -> None:
    for name in ("kept", "removed", "also_removed"):
        state.alerts.commit(name, {PROD: FIRING}, T0)
    state.alerts.forget_other_rules({"kept", "never_saved"})
    assert state.alerts.load() == {"kept": {PROD: FIRING}}


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
moments = st.none() | finite
alert_states = st.builds(
    AlertState,
    status=st.sampled_from(["ok", "pending", "firing"]),
    severity=st.none() | st.sampled_from(["warn", "page"]),
    since=moments,
    last_notified=moments,
    escalate_since=moments,
    no_data_since=moments,
    no_data_firing=st.booleans(),
    value=moments,
    samples=st.integers(min_value=0, max_value=10**9),
    evaluated_at=moments,
)
labels = st.text(min_size=0, max_size=12)
group_keys = st.lists(
    st.tuples(st.sampled_from(["environment", "query_type"]), labels), max_size=2
).map(tuple)


# A third of the profile's examples: each saves to a state file and opens it again.
@settings(scaled(0.3), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(states=st.dictionaries(group_keys, alert_states, max_size=6))
def test_any_rule_state_round_trips(path: Path, states: dict[GroupKey, AlertState]) -> None:
    with_file = State(path)
    try:
        with_file.alerts.commit("r", states, T0)
        loaded = with_file.alerts.load()
    finally:
        with_file.close()
    assert loaded.get("r", {}) == states


# -- trace rules: at once, capped per hour, digests -------------------------------------

HOUR = "2025-11-24T16"
NEXT_HOUR = "2025-11-24T17"


def example(trace_id: str) -> Example:
    return Example(trace_id, "proj", 1.0)


def admit_all(
    state: State, rule: str, count: int, hour: str = HOUR, prefix: str = "t"
) -> list[str]:
    return [
        state.alerts.admit(rule, f"{prefix}{i}", hour, T0 + i, example(f"{prefix}{i}"), 3)
        for i in range(count)
    ]


def test_admit_notifies_up_to_the_cap_then_suppresses(state: State) -> None:
    assert admit_all(state, "r", 5) == ["notify"] * 3 + ["suppressed"] * 2


def test_a_trace_is_notified_once_ever(state: State) -> None:
    assert state.alerts.admit("r", "t1", HOUR, T0, example("t1"), 3) == "notify"
    assert state.alerts.admit("r", "t1", HOUR, T0, example("t1"), 3) == "duplicate"
    assert state.alerts.admit("r", "t1", NEXT_HOUR, T0, example("t1"), 3) == "duplicate"
    again = reopened(state)
    try:
        assert again.alerts.admit("r", "t1", NEXT_HOUR, T0, example("t1"), 3) == "duplicate"
        # Another rule may still notify the same trace.
        assert again.alerts.admit("other", "t1", HOUR, T0, example("t1"), 3) == "notify"
    finally:
        again.close()


def test_a_duplicate_does_not_use_up_the_cap(state: State) -> None:
    state.alerts.admit("r", "t1", HOUR, T0, example("t1"), 2)
    state.alerts.admit("r", "t1", HOUR, T0, example("t1"), 2)
    assert state.alerts.admit("r", "t2", HOUR, T0, example("t2"), 2) == "notify"


def test_each_hour_and_each_rule_has_its_own_cap(state: State) -> None:
    assert admit_all(state, "r", 4) == ["notify"] * 3 + ["suppressed"]
    assert admit_all(state, "r", 2, NEXT_HOUR, prefix="n") == ["notify", "notify"]
    assert admit_all(state, "other", 3) == ["notify"] * 3


def test_the_digest_sums_up_a_past_hour_with_at_most_five_examples(state: State) -> None:
    admit_all(state, "r", 3 + 8)  # t0..t2 notified, t3..t10 suppressed
    assert state.alerts.due_digests(HOUR) == []  # the hour is not over yet
    (digest,) = state.alerts.due_digests(NEXT_HOUR)
    assert (digest.rule, digest.hour, digest.suppressed) == ("r", HOUR, 8)
    assert len(digest.examples) == 5
    # The first suppressed ones, and the latest.
    assert [e.trace_id for e in digest.examples] == ["t3", "t4", "t5", "t6", "t10"]


def test_a_digest_is_due_once(state: State) -> None:
    admit_all(state, "r", 4)
    admit_all(state, "r", 5, "2025-11-24T15", prefix="early")
    due = state.alerts.due_digests(NEXT_HOUR)
    assert [(d.hour, d.suppressed) for d in due] == [("2025-11-24T15", 2), (HOUR, 1)]
    state.alerts.mark_digested(due[0])
    again = reopened(state)
    try:
        assert [d.hour for d in again.alerts.due_digests(NEXT_HOUR)] == [HOUR]
        again.alerts.mark_digested(Digest("r", HOUR, 1, ()))
        assert again.alerts.due_digests("2099-01-01T00") == []
    finally:
        again.close()


def test_an_hour_without_suppressed_traces_has_no_digest(state: State) -> None:
    admit_all(state, "r", 3)
    assert state.alerts.due_digests(NEXT_HOUR) == []


def test_prune_forgets_old_traces_and_hours(state: State) -> None:
    state.alerts.admit("r", "old", "2025-11-24T15", T0 - 3600, example("old"), 1)
    state.alerts.admit("r", "old2", "2025-11-24T15", T0 - 3500, example("old2"), 1)
    state.alerts.admit("r", "new", HOUR, T0 + 10, example("new"), 1)
    state.alerts.admit("r", "new2", HOUR, T0 + 20, example("new2"), 1)
    state.alerts.prune(T0, HOUR)
    assert [d.hour for d in state.alerts.due_digests(NEXT_HOUR)] == [HOUR]
    # The new trace is still known; the old one is forgotten and may notify again.
    assert state.alerts.admit("r", "new", HOUR, T0 + 10, example("new"), 1) == "duplicate"
    assert state.alerts.admit("r", "old", "2025-11-24T15", T0 - 3600, example("old"), 1) == (
        "notify"
    )


# -- progress and the notification outbox ------------------------------------------------


def note(rule: str = "r", sent_at: float = T0, **changes: Any) -> Notification:
    """A window notification as the engine builds one."""
    moment = datetime.fromtimestamp(sent_at, UTC)
    base = Notification(
        id=f"msg_{rule}_{sent_at}",
        dedup_key=f"observer-{rule}",
        rule=rule,
        kind="window",
        state="firing",
        severity="page",
        group=PROD,
        summary=f"{rule}: rate(ungrounded) 0.07 > 0.05 (environment=production)",
        description="Ünïcode ✓ survives",
        started_at=moment,
        sent_at=moment,
        signal="ungrounded",
        aggregate="rate",
        value=0.07,
        op=">",
        threshold=0.05,
        window_s=900.0,
        samples=120,
        trace_urls=("https://langfuse.example.com/project/p/traces/t1",),
        runbook_url=None,
    )
    return dataclasses.replace(base, **changes)


def waiting(state: State, notifier: str = "hook") -> list[Queued]:
    """Everything waiting for a notifier, oldest first (delivering as it reads)."""
    out = []
    while (queued := state.alerts.next_notification(notifier)) is not None:
        out.append(queued)
        state.alerts.delivered(queued.id)
    return out


def test_commit_saves_the_state_the_point_and_the_notifications_together(state: State) -> None:
    outgoing = [Outgoing("hook", note()), Outgoing("pager", note())]
    state.alerts.commit("r", {PROD: FIRING}, T0 + 240, outgoing)
    again = reopened(state)
    try:
        assert again.alerts.load() == {"r": {PROD: FIRING}}
        assert again.alerts.progress() == {"r": T0 + 240}
        assert [q.notification for q in waiting(again, "hook")] == [note()]
        assert again.alerts.waiting() == 1  # the pager's
    finally:
        again.close()


def test_a_commit_that_fails_leaves_nothing_of_it(
    state: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    state.alerts.commit("r", {STAGING: AlertState()}, T0)

    def broken(*_: object) -> None:
        raise RuntimeError("disk gone")

    monkeypatch.setattr("observer.state.alerts._queue", broken)
    with pytest.raises(RuntimeError):
        state.alerts.commit("r", {PROD: FIRING}, T0 + 240, [Outgoing("hook", note())])
    assert state.alerts.load() == {"r": {STAGING: AlertState()}}
    assert state.alerts.progress() == {"r": T0}
    assert state.alerts.waiting() == 0


def test_any_notification_round_trips_through_the_outbox(state: State) -> None:
    resolved = note(
        state="resolved",
        severity="warn",
        ended_at=datetime.fromtimestamp(T0 + 600.5, UTC),
        group=(),
        trace_urls=(),
        value=None,
        runbook_url="https://wiki.example.com/x",
    )
    state.alerts.queue([Outgoing("hook", note()), Outgoing("hook", resolved)])
    again = reopened(state)
    try:
        assert [q.notification for q in waiting(again)] == [note(), resolved]
    finally:
        again.close()


def test_a_failed_row_stays_first_with_its_attempts(state: State) -> None:
    state.alerts.queue([Outgoing("hook", note("a")), Outgoing("hook", note("b"))])
    first = state.alerts.next_notification("hook")
    assert first is not None and first.notification.rule == "a" and first.attempts == 0
    state.alerts.failed(first.id, "HTTP 503")
    again = state.alerts.next_notification("hook")
    assert again is not None and (again.id, again.attempts) == (first.id, 1)
    assert [q.notification.rule for q in waiting(state)] == ["a", "b"]


def test_a_newer_refresh_replaces_the_one_waiting(state: State) -> None:
    state.alerts.queue(
        [
            Outgoing("hook", note("page")),
            Outgoing("hook", note("refresh", T0 + 30), supersede="refresh:k"),
            Outgoing("other", note("refresh", T0 + 30), supersede="refresh:k"),
        ]
    )
    state.alerts.queue([Outgoing("hook", note("refresh", T0 + 60), supersede="refresh:k")])
    assert [(q.notification.rule, q.notification.sent_at.timestamp()) for q in waiting(state)] == [
        ("page", T0),
        ("refresh", T0 + 60),
    ]
    assert state.alerts.waiting("other") == 1  # each notifier its own


def test_the_outbox_keeps_at_most_max_queued_per_notifier_dropping_the_oldest(
    state: State,
) -> None:
    dropped = state.alerts.queue([Outgoing("hook", note(f"r{i}")) for i in range(5)], 3)
    assert dropped == {"hook": 2}
    state.alerts.queue([Outgoing("other", note("x"))], 3)
    assert [q.notification.rule for q in waiting(state)] == ["r2", "r3", "r4"]


def test_admit_queues_what_it_notifies_and_nothing_else(state: State) -> None:
    def admit(trace_id: str) -> str:
        outgoing = [Outgoing("hook", note(trace_id))]
        return state.alerts.admit("r", trace_id, HOUR, T0, example(trace_id), 1, outgoing)

    assert [admit("t1"), admit("t1"), admit("t2")] == ["notify", "duplicate", "suppressed"]
    assert [q.notification.rule for q in waiting(state)] == ["t1"]


def test_a_digest_and_its_notification_are_one(state: State) -> None:
    admit_all(state, "r", 4)
    (digest,) = state.alerts.due_digests(NEXT_HOUR)
    state.alerts.mark_digested(digest, [Outgoing("hook", note("digest"))])
    assert state.alerts.due_digests(NEXT_HOUR) == []
    assert [q.notification.rule for q in waiting(state)] == ["digest"]


def test_forgotten_rules_lose_their_progress(state: State) -> None:
    state.alerts.commit("kept", {}, T0)
    state.alerts.commit("removed", {}, T0)
    state.alerts.forget_other_rules({"kept"})
    assert state.alerts.progress() == {"kept": T0}


def test_prune_forgets_notifications_nobody_took(state: State) -> None:
    state.alerts.queue([Outgoing("hook", note("old", T0 - 10)), Outgoing("hook", note("new"))])
    state.alerts.prune(T0, HOUR)
    assert [q.notification.rule for q in waiting(state)] == ["new"]


def test_a_trace_kept_for_the_digest_in_an_hour_nothing_was_notified_is_kept(
    state: State,
) -> None:
    """A fleet member whose fleet notified the hour's worth admits with a cap of 0: its
    first trace of the hour is the digest's, not lost."""
    assert state.alerts.admit("r", "t1", HOUR, T0, example("t1"), 0) == "suppressed"
    assert state.alerts.admit("r", "t2", HOUR, T0, example("t2"), 0) == "suppressed"
    (digest,) = state.alerts.due_digests(NEXT_HOUR)
    assert (digest.hour, digest.suppressed) == (HOUR, 2)
    assert [e.trace_id for e in digest.examples] == ["t1", "t2"]
