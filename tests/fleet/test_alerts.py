"""Alerts once per fleet, against a real redis-server: rows shared between members'
histories, the watermark moved only after them, a trace rule raised once, the window
rules' state handed from one evaluator to the next, fenced."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
import redis

from observer.alerts.engine import AlertState, Row
from observer.fleet.alerts import FleetAlerts, decode_row, encode_row
from observer.fleet.connect import LeaseLost
from observer.fleet.keys import Keys
from observer.fleet.lease import Lease
from observer.state import State
from observer.state.rows import NO_DIMS

KEYS = Keys("a")
GROUP = (("environment", "production"),)
HOUR = "2026-12-02T10"


@pytest.fixture
def states(tmp_path: Path) -> Iterator[tuple[State, State]]:
    one, two = State(tmp_path / "one.sqlite"), State(tmp_path / "two.sqlite")
    yield one, two
    one.close()
    two.close()


def _row(trace_id: str, at: float = 1_700_000_000.0) -> Row:
    return Row(at, {"confidence": 0.4, "ungrounded": True}, trace_id, "p", "production", "faq")


def test_a_row_survives_the_stream() -> None:
    row = _row("t")
    assert decode_row(encode_row(row)) == row
    dims = {"release": "2026.12.03-rc2", "model": "gpt-4o-mini", "top_doc": "doc-7"}
    with_dims = replace(row, dims=dims)
    assert decode_row(encode_row(with_dims)) == with_dims
    # A member of an older version shares six fields: the row reads with no dimensions.
    old = orjson.dumps([row.at, dict(row.values), "t", "p", "production", "faq"])
    assert decode_row(old) == row and decode_row(old).dims is NO_DIMS


def test_each_member_gets_the_rows_the_others_wrote(
    rclient: redis.Redis, states: tuple[State, State]
) -> None:
    one, two = states
    a = FleetAlerts(rclient, KEYS, one, "one", maxlen=1000)
    b = FleetAlerts(rclient, KEYS, two, "two", maxlen=1000)
    one.history.on_row = a.publish
    one.history.put(_row("x"))  # not a committed trace row of a pass: not shared
    one.history.written(_row("t1"))
    b.publish(_row("t2"))
    assert b.follow() == 1  # t1; its own t2 skipped
    assert a.follow() == 1  # t2
    assert {r.trace_id for r in two.history.rows(0, 2e9)} == {"t1"}
    assert {r.trace_id for r in one.history.rows(0, 2e9)} >= {"t2"}
    assert b.follow() == 0  # read once
    # A member restarted on its state file goes on where it stopped.
    assert FleetAlerts(rclient, KEYS, two, "two", maxlen=1000).last_id == b.last_id


def test_the_local_watermark_moves_only_once_the_rows_before_it_are_in(
    rclient: redis.Redis, states: tuple[State, State]
) -> None:
    one, two = states
    a = FleetAlerts(rclient, KEYS, one, "one", maxlen=10_000)
    b = FleetAlerts(rclient, KEYS, two, "two", maxlen=10_000)
    for i in range(1200):  # more than one read's worth
        a.publish(_row(f"t{i}"))
    mark = datetime(2026, 12, 1, 12, tzinfo=UTC)
    b.sync(mark)
    assert two.history.count() == 1200
    assert two.watermark() == mark
    b.sync(datetime(2026, 12, 1, 11, tzinfo=UTC))
    assert two.watermark() == mark  # never back


def test_a_trace_rule_is_raised_once_per_fleet(
    rclient: redis.Redis, states: tuple[State, State]
) -> None:
    one, two = states
    a = FleetAlerts(rclient, KEYS, one, "one", maxlen=1000)
    b = FleetAlerts(rclient, KEYS, two, "two", maxlen=1000)
    assert a.admit("critical", "t1", HOUR, 20) == "notify"
    assert b.admit("critical", "t1", HOUR, 20) == "duplicate"  # scored again after a crash
    assert b.admit("other_rule", "t1", HOUR, 20) == "notify"


def test_a_trace_rules_hourly_cap_counts_the_whole_fleet(
    rclient: redis.Redis, states: tuple[State, State]
) -> None:
    """max_per_hour = 2 over two members: two traces notified, the third kept for the
    digest, whichever member raised them; the next hour starts again."""
    one, two = states
    a = FleetAlerts(rclient, KEYS, one, "one", maxlen=1000)
    b = FleetAlerts(rclient, KEYS, two, "two", maxlen=1000)
    said = [a.admit("cap", "t1", HOUR, 2), b.admit("cap", "t2", HOUR, 2)]
    said += [a.admit("cap", "t3", HOUR, 2), b.admit("cap", "t4", HOUR, 2)]
    assert said == ["notify", "notify", "over", "over"]
    assert b.admit("cap", "t5", "2026-12-02T11", 2) == "notify"


def test_without_redis_a_member_decides_alone(states: tuple[State, State]) -> None:
    unreachable = redis.Redis(port=1, socket_connect_timeout=0.2)
    assert (
        FleetAlerts(unreachable, KEYS, states[0], "one", maxlen=10).admit("cap", "t1", HOUR, 2)
        == "unknown"
    )


def test_the_alert_state_goes_to_the_next_evaluator_and_a_paused_one_cannot_overwrite_it(
    rclient: redis.Redis, states: tuple[State, State]
) -> None:
    one, two = states
    firing = AlertState(status="firing", severity="page", since=100.0, last_notified=100.0)
    one.alerts.commit("ungrounded_rate_high", {GROUP: firing}, evaluated_at=160.0)
    a = FleetAlerts(rclient, KEYS, one, "one", maxlen=1000)
    b = FleetAlerts(rclient, KEYS, two, "two", maxlen=1000)
    lease_a, lease_b = Lease(rclient, KEYS, "one", 15), Lease(rclient, KEYS, "two", 15)
    assert not b.take_over()  # nothing handed on yet: b starts from its own
    assert lease_a.keep()
    a.hand_over(lease_a.value)
    rclient.delete(KEYS.lease)  # a's lease ran out
    assert lease_b.keep()
    assert b.take_over()
    assert two.alerts.load() == {"ungrounded_rate_high": {GROUP: firing}}
    assert two.alerts.progress() == {"ungrounded_rate_high": 160.0}
    one.alerts.commit("ungrounded_rate_high", {GROUP: AlertState()}, evaluated_at=200.0)
    with pytest.raises(LeaseLost):
        a.hand_over(lease_a.value)  # a, paused, wakes up: it cannot undo b's state
    assert b.take_over()
    assert two.alerts.load()["ungrounded_rate_high"][GROUP] == firing


def test_incidents_and_their_threads_go_to_the_next_evaluator(
    rclient: redis.Redis, states: tuple[State, State]
) -> None:
    """One incident per fleet: the next evaluator continues the incident the last one
    opened (a later symptom of the cause joins it) and replies in its Slack thread."""
    from observer.alerts.incidents import tell
    from tests.alerts.test_incidents import alert, lead

    one, two = states
    opened = tell(
        {},
        alert(
            "low_band_rate_high",
            triage=lead(
                ("release", "rc2"),
            ),
        ),
        ("s",),
        100.0,
    )
    one.alerts.commit("low_band_rate_high", {GROUP: AlertState("firing")}, 100.0,
                      incidents=[opened.incident])  # fmt: skip
    one.alerts.remember_thread("s", opened.incident.id, "1700000001.000100", 100.0)
    a = FleetAlerts(rclient, KEYS, one, "one", maxlen=1000)
    b = FleetAlerts(rclient, KEYS, two, "two", maxlen=1000)
    lease_a, lease_b = Lease(rclient, KEYS, "one", 15), Lease(rclient, KEYS, "two", 15)
    assert lease_a.keep()
    a.hand_over(lease_a.value)
    rclient.delete(KEYS.lease)
    assert lease_b.keep()
    assert b.take_over()
    assert two.alerts.incidents() == [opened.incident]
    assert two.alerts.thread("s", opened.incident.id) == "1700000001.000100"
    joined = tell(
        two.alerts.incidents(), alert("release_regression", triage=lead(("release", "rc2"),)),
        ("s",), 400.0,
    )  # fmt: skip
    assert joined.notification.role == "joined" and joined.incident.id == opened.incident.id


def test_an_older_members_hand_over_carries_no_incidents_and_is_taken_as_such(
    rclient: redis.Redis, states: tuple[State, State]
) -> None:
    _, two = states
    firing = AlertState(status="firing", severity="page", since=100.0)
    old = orjson.dumps(
        {"states": [["r", orjson.dumps(list(GROUP)).decode(), orjson.dumps(firing).decode()]],
         "progress": [["r", 160.0]]}
    )  # fmt: skip
    two.alerts.restore(old)
    assert two.alerts.load() == {"r": {GROUP: firing}} and two.alerts.incidents() == []
