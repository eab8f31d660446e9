"""The fleet's claims around a member's own commit, against a real redis-server.

The judge's claim and a trace rule's claim are taken just before the member's SQLite
transaction: a transaction that fails or is deferred gives them back (the trace read
again is judged, the trace checked again is raised), one that commits makes them hold
for their full life. The failures are real ones: a full outbox, and a write the state
file refuses (an SQLite trigger standing in for a disk error). After Redis lost its
data each member gives back what its state file remembers, once per epoch.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openai
import pytest
import redis

from observer.alerts.engine import Row
from observer.alerts.rules import Expression, TraceRule
from observer.alerts.service import AlertService, Options, RuleSet
from observer.fleet.alerts import TRACE_ALERT_KEPT_S, FleetAlerts
from observer.fleet.budget import DAY_S, FleetBudget
from observer.fleet.keys import Keys
from observer.judge.client import JudgeClient
from observer.judge.sampler import SamplerParams
from observer.judge.service import JudgeService, buckets
from observer.mapping import MappingRules
from observer.model import RagRecord, Signals, answer_basis
from observer.pipeline.traces import Outcome, TraceRecorder
from observer.records import record_from_obj
from observer.signals import SignalParams, compute
from observer.state import State, StateError
from observer.state.rows import Example
from observer.telemetry.metrics import Metrics
from observer.times import parse_time
from tests.daemon_helpers import demo_observations
from tests.fakes.openai_stub import OpenAIStub
from tests.servers import RedisServer

KEYS = Keys("c")
NOW = datetime(2026, 11, 29, 12, 30, tzinfo=UTC)
HOUR, DAY = buckets(NOW)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "records.jsonl"
NOWHERE = "http://127.0.0.1:9/v1"  # a judge never called: these tests only decide


def _client(base_url: str = NOWHERE) -> JudgeClient:
    return JudgeClient(openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0), "stub")


def _judge(
    client: redis.Redis,
    state: State,
    metrics: Metrics,
    *,
    max_judged: int = 200,
    base_url: str = NOWHERE,
) -> JudgeService:
    return JudgeService(
        _client(base_url),
        state,
        metrics,
        SamplerParams(enabled=True, rate=1.0, max_judged_per_hour=max_judged),
        clock=lambda: NOW,
        shared=FleetBudget(client, KEYS),
    )


def _answer_trace() -> tuple[str, list[dict[str, Any]], datetime]:
    traces: dict[str, list[dict[str, Any]]] = {}
    for observation in demo_observations():
        traces.setdefault(observation["traceId"], []).append(observation)
    trace_id, observations = next(
        (t, o) for t, o in traces.items() if any(x["name"] == "answer" for x in o)
    )
    root = next(o for o in observations if o.get("isRootObservation"))
    start = parse_time(root["startTime"])
    assert start is not None
    return trace_id, observations, start


def _records(count: int) -> list[RagRecord]:
    lines = EXAMPLES.read_text().splitlines()
    base = [record_from_obj(json.loads(line)) for line in lines]
    return [dataclasses.replace(base[i % len(base)], trace_id=f"tr-{i:04d}") for i in range(count)]


def _offer(service: JudgeService, record: RagRecord, signals: Signals) -> bool:
    """A sample decided and queued outside a pass, as the pass does it in a trace's own
    transaction: True when one was queued; a sample that cannot be written gives its claim
    back."""
    reservation = service.reservation(record, signals, None, answer_basis(record))
    if reservation is None:
        return False
    written = False
    try:
        service.state.judge.write(reservation.write)
        written = True
    finally:
        if not written:
            service.release(reservation)
    service.queued(reservation)
    return True


def _judge_keys(client: redis.Redis) -> list[bytes]:
    return sorted(client.keys(KEYS.judged("*", "*")))


@pytest.fixture
def state(tmp_path: Path) -> Iterator[State]:
    opened = State(tmp_path / "member.sqlite")
    yield opened
    opened.close()


def _refuse(state: State, table: str) -> None:
    """The state file refuses every new row of `table`, as a failing disk would."""
    with closing(sqlite3.connect(state.path)) as db:
        db.execute(
            f"CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} "
            "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
        )


def _accept(state: State, table: str) -> None:
    with closing(sqlite3.connect(state.path)) as db:
        db.execute(f"DROP TRIGGER refuse_{table}")


# -- the judge's claim and the trace's transaction ---------------------------------------


def test_a_deferred_trace_gives_its_judge_claim_back_and_is_judged_when_read_again(
    rclient: redis.Redis, state: State
) -> None:
    metrics = Metrics()
    recorder = TraceRecorder(
        state, metrics, SignalParams(), MappingRules(), judge=_judge(rclient, state, metrics)
    )
    trace_id, observations, root = _answer_trace()
    state.max_outbox = 0  # a full outbox: the trace is deferred
    prepared = recorder.prepare(trace_id, observations, None, NOW)
    assert recorder.record(trace_id, prepared, root, None, NOW) == Outcome("deferred")
    assert _judge_keys(rclient) == []
    assert FleetBudget(rclient, KEYS).counts(HOUR, DAY) == (0, 0)
    assert state.judge.pending() == []

    state.max_outbox = 100_000  # delivered since: read again, it is scored and taken
    prepared = recorder.prepare(trace_id, observations, None, NOW)
    assert recorder.record(trace_id, prepared, root, None, NOW).kind == "scored"
    assert [p.trace_id for p in state.judge.pending()] == [trace_id]
    (key,) = _judge_keys(rclient)
    assert rclient.ttl(key) > DAY_S - 60  # confirmed after the commit
    assert FleetBudget(rclient, KEYS).counts(HOUR, DAY)[0] == 1


def test_a_failing_transaction_gives_its_judge_claim_back(
    rclient: redis.Redis, state: State
) -> None:
    metrics = Metrics()
    recorder = TraceRecorder(
        state, metrics, SignalParams(), MappingRules(), judge=_judge(rclient, state, metrics)
    )
    trace_id, observations, root = _answer_trace()
    _refuse(state, "traces")
    prepared = recorder.prepare(trace_id, observations, None, NOW)
    with pytest.raises(StateError, match="disk I/O error"):
        recorder.record(trace_id, prepared, root, None, NOW)
    assert _judge_keys(rclient) == []
    assert FleetBudget(rclient, KEYS).counts(HOUR, DAY) == (0, 0)

    _accept(state, "traces")
    assert recorder.record(trace_id, prepared, root, None, NOW).kind == "scored"
    assert [p.trace_id for p in state.judge.pending()] == [trace_id]
    assert len(_judge_keys(rclient)) == 1


def test_an_offer_whose_sample_cannot_be_written_gives_its_claim_back(
    rclient: redis.Redis, state: State
) -> None:
    service = _judge(rclient, state, Metrics())
    (record,) = _records(1)
    _refuse(state, "judge_pending")
    with pytest.raises(StateError):
        _offer(service, record, compute(record, SignalParams()))
    assert _judge_keys(rclient) == []
    _accept(state, "judge_pending")
    assert _offer(service, record, compute(record, SignalParams()))
    assert len(_judge_keys(rclient)) == 1


# -- exact caps, counted as one daemon counts them ---------------------------------------


def test_three_members_offered_the_same_traces_at_once_judge_the_cap_and_no_more(
    rclient: redis.Redis, redis_proc: RedisServer, tmp_path: Path
) -> None:
    """Each member sees every trace (entries scored twice) in its own order, all at once:
    25 taken for the fleet; every other decision `over_budget`, as one daemon's would
    be, except on answers another member took (counted there)."""
    records = _records(60)
    clients = [redis.Redis.from_url(redis_proc.url) for _ in range(3)]
    states = [State(tmp_path / f"m{i}.sqlite") for i in range(3)]
    metrics = [Metrics() for _ in range(3)]
    services = [_judge(clients[i], states[i], metrics[i], max_judged=25) for i in range(3)]
    start = threading.Barrier(3)

    def offer_all(index: int) -> None:
        start.wait()
        for record in records[index * 20 :] + records[: index * 20]:  # its own order
            _offer(services[index], record, compute(record, SignalParams()))

    try:
        threads = [threading.Thread(target=offer_all, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        taken = sum(
            m.value("observer_judge_decisions_total", decision=d)
            for m in metrics
            for d in ("sampled", "risk")
        )
        over = sum(
            m.value("observer_judge_decisions_total", decision="over_budget") for m in metrics
        )
        assert taken == 25
        assert sum(len(s.judge.pending()) for s in states) == 25
        assert len(_judge_keys(rclient)) == 25
        assert FleetBudget(rclient, KEYS).counts(HOUR, DAY)[0] == 25
        # An answer no member took was over budget for each of them; one taken was over
        # budget for none (the cap never falls): the others found it taken.
        assert over == 3 * (60 - 25)
    finally:
        for each in states:
            each.close()
        for client in clients:
            client.close()


# -- a trace rule's claim and the alert state's transaction -------------------------------

RULE = TraceRule(name="ungrounded", expression=Expression("ungrounded"), max_per_hour=2)


def _row(trace_id: str, at: float) -> Row:
    return Row(at, {"ungrounded": True}, trace_id, "p", "production", "faq")


def _alerts(client: redis.Redis, state: State, member: str) -> tuple[AlertService, FleetAlerts]:
    fleet = FleetAlerts(client, KEYS, state, member, maxlen=100)
    service = AlertService(
        state,
        Metrics(),
        RuleSet((), (RULE,)),
        delivery=None,
        options=Options(base_url="https://langfuse.example.com"),
        clock=lambda: NOW,
        shared=fleet,
    )
    return service, fleet


def test_a_trace_rule_that_cannot_be_recorded_gives_its_claim_back(
    rclient: redis.Redis, state: State, tmp_path: Path
) -> None:
    service, _ = _alerts(rclient, state, "one")
    key = KEYS.trace_alert(RULE.name, "t1")
    _refuse(state, "trace_alerts")
    with pytest.raises(StateError):
        service.scored(_row("t1", NOW.timestamp()))
    assert rclient.exists(key) == 0
    assert int(rclient.get(KEYS.alert_hour(RULE.name, HOUR)) or 0) == 0

    # Another member scores the trace again (the entry was claimed): it raises it.
    other = State(tmp_path / "other.sqlite")
    try:
        _alerts(rclient, other, "two")[0].scored(_row("t1", NOW.timestamp()))
        assert other.alerts.raised_since(0) == [(RULE.name, "t1", NOW.timestamp())]
    finally:
        other.close()
    assert rclient.get(key) == b"two" and rclient.ttl(key) > TRACE_ALERT_KEPT_S - 60
    _accept(state, "trace_alerts")
    service.scored(_row("t1", NOW.timestamp()))
    assert state.alerts.raised_since(0) == []  # raised once per fleet: by "two"


def test_a_trace_rule_recorded_holds_its_claim_for_its_life(
    rclient: redis.Redis, state: State
) -> None:
    service, fleet = _alerts(rclient, state, "one")
    key = KEYS.trace_alert(RULE.name, "t1")
    assert fleet.admit(RULE.name, "t0", HOUR, 2) == "notify"  # provisional, unconfirmed
    assert 0 < rclient.pttl(KEYS.trace_alert(RULE.name, "t0")) <= 10_000
    service.scored(_row("t1", NOW.timestamp()))
    assert rclient.get(key) == b"one" and rclient.ttl(key) > TRACE_ALERT_KEPT_S - 60


# -- after Redis lost its data ------------------------------------------------------------


def test_after_redis_lost_its_data_a_member_gives_its_judge_claims_and_spend_back(
    rclient: redis.Redis, state: State, judge_stub: OpenAIStub, tmp_path: Path
) -> None:
    metrics = Metrics()
    service = _judge(rclient, state, metrics, base_url=judge_stub.url + "/v1")
    records = _records(5)
    for record in records:
        assert _offer(service, record, compute(record, SignalParams()))
    for record in records[:3]:  # judged; the other two still wait in the state file
        basis = answer_basis(record)
        state.record_trace(record.trace_id, "f", NOW, (), NOW, basis=basis)  # the pass's
        result = service.judge_now(record, compute(record, SignalParams()), DAY, basis=basis)
        assert result.error is None
    assert len(state.judge.pending()) == 2
    before = FleetBudget(rclient, KEYS).counts(HOUR, DAY)
    assert before[0] == 5 and before[1] > 0

    rclient.flushall()  # Redis restarted without persistence
    budget = FleetBudget(rclient, KEYS)
    assert budget.restore(state, "epoch-2", "one", NOW) == 2 + 5  # two counters, five claims
    assert budget.counts(HOUR, DAY) == before
    assert budget.restore(state, "epoch-2", "one", NOW) == 0  # twice: counted once
    assert budget.counts(HOUR, DAY) == before

    other_state = State(tmp_path / "other.sqlite")
    try:
        other_metrics = Metrics()
        other = _judge(rclient, other_state, other_metrics)
        for record in records:  # scored again by another member: none judged twice
            assert not _offer(other, record, compute(record, SignalParams()))
        assert other_metrics.value("observer_judge_decisions_total", decision="sampled") == 0
        (fresh,) = [dataclasses.replace(records[0], trace_id="tr-new")]
        assert _offer(other, fresh, compute(fresh, SignalParams()))
    finally:
        other_state.close()
    assert budget.counts(HOUR, DAY)[0] == before[0] + 1


def test_a_restored_claim_lives_what_is_left_of_its_life(
    rclient: redis.Redis, state: State, judge_stub: OpenAIStub
) -> None:
    service = _judge(rclient, state, Metrics(), base_url=judge_stub.url + "/v1")
    (record,) = _records(1)
    signals, basis = compute(record, SignalParams()), answer_basis(record)
    assert _offer(service, record, signals)
    state.record_trace(record.trace_id, "f", NOW, (), NOW, basis=basis)
    assert service.judge_now(record, signals, DAY, basis=basis).error is None
    rclient.flushall()
    later = NOW + timedelta(days=1)
    assert FleetBudget(rclient, KEYS).restore(state, "e", "one", later) == 1  # its claim
    key = KEYS.judged(record.trace_id, basis)
    assert DAY_S - 86400 - 60 < rclient.ttl(key) <= DAY_S - 86400
    rclient.flushall()
    gone = NOW + timedelta(seconds=DAY_S + 1)
    assert FleetBudget(rclient, KEYS).restore(state, "f", "one", gone) == 0


def test_after_redis_lost_its_data_a_member_gives_its_trace_rules_back(
    rclient: redis.Redis, state: State, tmp_path: Path
) -> None:
    service, fleet = _alerts(rclient, state, "one")
    at = NOW.timestamp()
    for trace_id in ("t1", "t2", "t3"):  # two notified, one kept for the digest
        service.scored(_row(trace_id, at))
    old = at - TRACE_ALERT_KEPT_S - 10
    state.alerts.admit(RULE.name, "ancient", "2026-11-01T00", old, Example("ancient", "p", 1.0), 2)
    assert state.alerts.raised_in(HOUR) == {RULE.name: 3}

    rclient.flushall()
    assert fleet.restore(state, "epoch-2", "one", NOW) == 1 + 3  # the hour's count, 3 traces
    assert fleet.restore(state, "epoch-2", "one", NOW) == 0
    assert int(rclient.get(KEYS.alert_hour(RULE.name, HOUR)) or 0) == 3
    assert rclient.exists(KEYS.trace_alert(RULE.name, "ancient")) == 0

    other = State(tmp_path / "other.sqlite")
    try:
        again, _ = _alerts(rclient, other, "two")
        again.scored(_row("t1", at))  # scored again elsewhere: not raised twice
        again.scored(_row("t4", at))  # a new one: over the fleet's hour, for the digest
        assert other.alerts.raised_since(0) == [(RULE.name, "t4", at)]
        assert other.alerts.raised_in(HOUR) == {RULE.name: 1}
        (digest,) = other.alerts.due_digests("9999")  # kept for this member's digest
        assert (digest.hour, digest.suppressed) == (HOUR, 1)
    finally:
        other.close()
    # The judge's restore and the alerts' share one marker per (epoch, member).
    budget = FleetBudget(rclient, KEYS)
    assert budget.restore(state, "epoch-2", "one", NOW) == 0  # nothing of the judge's here
    assert rclient.hgetall(KEYS.restored("epoch-2", "one")) == {b"alerts": b"1", b"judge": b"1"}
