"""Alerts that cannot stall the daemon: the evaluator's thread, bounded catch-up, the outbox.

The daemon's liveness probe restarts a pod whose poll loop has not beaten for
`stale_after_s`. Before issue 15 the poll loop evaluated every rule at every
minute of a gap itself: four hours of points, each over its whole window.
Here the poll loop only nudges the evaluator, which works a gap off in
bounded ticks that resume after a restart, and notifications wait in the
state file until a receiver took them. Clocks are fakes; nothing sleeps
longer than a few milliseconds.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from observer.alerts.delivery import Delivery
from observer.alerts.engine import AlertEvent, Row, evaluation_points, replay
from observer.alerts.evaluator import AlertEvaluator
from observer.alerts.notifiers.webhook import WebhookNotifier
from observer.alerts.rules import Expression, WindowRule, check_window_rule
from observer.alerts.service import AlertService, Options, RuleSet, StepResult
from observer.background import Deadline
from observer.health import Health
from observer.state import State
from observer.telemetry.metrics import Metrics
from tests.fakes.receiver import Answer, Receiver
from tests.waiting import wait_until

T = 1_764_000_000.0  # the watermark after the gap (a minute boundary)
GAP_S = 4 * 3600.0
RULE = check_window_rule(
    WindowRule(
        name="ungrounded_rate_high",
        expression=Expression("ungrounded"),
        aggregate="rate",
        op=">",
        threshold=0.05,
        window_s=900.0,
        min_samples=5,
        for_s=120.0,
        repeat_s=4 * 3600.0,
        group_by=("environment",),
    )
)


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def moment(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)


def stream(
    start: float,
    end: float,
    every_s: float = 4.0,
    bad: Callable[[float], bool] = lambda at: False,
    environment: str = "production",
    query_type: str = "none",
    prefix: str = "t",
) -> list[Row]:
    """One trace every `every_s`; a fifth of them ungrounded where `bad(at)`."""
    rows = []
    at, i = start + every_s, 0
    while at <= end:
        rows.append(
            Row(
                at=at,
                values={"ungrounded": bad(at) and i % 5 == 0},
                trace_id=f"{prefix}{i}",
                project_id="proj",
                environment=environment,
                query_type=query_type,
            )
        )
        at += every_s
        i += 1
    return rows


def bad_stretches(at: float) -> bool:
    """Half an hour bad, half an hour good, all through the gap: alerts fire and resolve."""
    return int((at - (T - GAP_S)) // 1800) % 2 == 0


def service_on(
    state: State,
    metrics: Metrics | None = None,
    delivery: Delivery | None = None,
    rules: tuple[WindowRule, ...] = (RULE,),
) -> AlertService:
    return AlertService(
        state,
        metrics or Metrics(),
        RuleSet(rules, ()),
        delivery=delivery,
        notifiers={"hook": "webhook"} if delivery is not None else {},
        options=Options(base_url="https://langfuse.example.com"),
    )


@pytest.fixture
def gap(tmp_path: Path) -> Path:
    """A state file evaluated up to four hours ago; the watermark now at T."""
    path = tmp_path / "state.sqlite"
    state = State(path)
    state.history.put_many(stream(T - GAP_S - 3600.0, T, bad=bad_stretches))
    state.set_watermark(moment(T - GAP_S))
    service_on(state).evaluate(moment(T - GAP_S))
    state.set_watermark(moment(T))
    state.close()
    return path


def reference(path: Path) -> list[AlertEvent]:
    """The catch-up as `engine.replay` does it: every point of the gap, in one go."""
    state = State(path)
    try:
        stored = state.alerts.load()[RULE.name]
        rows = state.history.rows(0, T + 1)
    finally:
        state.close()
    points = evaluation_points(T - GAP_S, T, 60.0, RULE.for_s + 60.0)
    assert len(points) == 240
    return replay(RULE, rows, stored, points).events


def health_on(clock: Clock) -> Health:
    return Health(
        stale_after_s=90.0,
        langfuse_within_s=None,
        max_lag_s=3600.0,
        lag_s=lambda: 0.0,
        outbox=lambda: 0,
        max_outbox=1,
        clock=clock,
    )


def charged(service: AlertService, clock: Clock, seconds_per_point: float) -> list[StepResult]:
    """Each evaluation step costs `seconds_per_point` per point on the fake clock."""
    steps: list[StepResult] = []
    step = service.evaluate_step

    def costly(*args: Any, **kwargs: Any) -> StepResult:
        result = step(*args, **kwargs)
        clock.advance(seconds_per_point * result.points)
        steps.append(result)
        return result

    service.evaluate_step = costly  # type: ignore[method-assign]
    return steps


# -- the heartbeat --------------------------------------------------------------------------------


def test_the_heartbeat_stays_fresh_while_a_four_hour_catch_up_runs(gap: Path) -> None:
    """A point costs half a second: 240 of them inline in a poll pass is 2 minutes without a
    beat (the probe restarts the pod); in the evaluator's ticks the loop beats between."""
    expected = reference(gap)
    inline = tmp_copy(gap)
    clock = Clock()
    health = health_on(clock)

    # Before: the poll loop evaluated the rules itself (`alert_after_pass` -> `evaluate`).
    state = State(inline)
    old = service_on(state)
    charged(old, clock, 0.5)
    health.beat()
    old.evaluate(moment(T))
    assert health.live()[0] is False  # 120 s without a beat: restarted mid-evaluation
    state.close()

    # After: the poll loop records its samples and nudges; the evaluator works off the gap.
    state = State(gap)
    service = service_on(state)
    steps = charged(service, clock, 0.5)
    evaluator = AlertEvaluator(service, max_points=60, clock=clock)

    def poll_pass() -> None:
        health.beat()
        evaluator.after_pass(moment(T), 0.0)
        clock.advance(1.0)
        assert health.live()[0], health.live()[1]

    poll_pass()
    while True:
        more = evaluator.tick()  # what the evaluator's thread runs, between the poll passes
        poll_pass()
        if not more:
            break
    state.close()
    assert [s.points for s in steps] == [60, 60, 60, 60]  # the gap over four bounded ticks
    assert [s.behind for s in steps] == [True, True, True, False]
    events = [e for s in steps for e in s.events]
    assert events == expected  # the same as evaluating every point in one go
    assert {"firing", "resolved"} <= {e.transition for e in events}


def tmp_copy(path: Path) -> Path:
    copy = path.with_name("copy.sqlite")
    shutil.copy(path, copy)
    return copy


def test_the_poll_loop_never_waits_for_the_evaluator(gap: Path) -> None:
    """The evaluator's thread stuck in a step: every pass still returns at once and the
    heartbeat stays fresh; the evaluator's own liveness shows it stuck."""
    clock = Clock()
    health = health_on(clock)
    state = State(gap)
    service = service_on(state)
    release = threading.Event()
    inside = threading.Event()
    step = service.evaluate_step

    def stuck(*args: Any, **kwargs: Any) -> StepResult:
        inside.set()
        release.wait(120)  # until the test releases it: longer than any busy machine's run
        return step(*args, **kwargs)

    service.evaluate_step = stuck  # type: ignore[method-assign]
    evaluator = AlertEvaluator(service, interval_s=0.01, max_points=60, clock=clock)
    evaluator.start()
    try:
        health.beat()
        evaluator.after_pass(moment(T), 0.0)
        assert inside.wait(60)
        slowest = 0.0
        for _ in range(10):  # five minutes of passes while the evaluation does not move
            clock.advance(30.0)
            started = time.monotonic()
            health.beat()
            evaluator.after_pass(moment(T), 0.0)
            slowest = max(slowest, time.monotonic() - started)
            assert health.live()[0]
        # Every pass returned while the step was still stuck (a pass that waited for it
        # would have returned only after the release): none waited. The wall clock bound
        # is far below the stuck step, and above what a busy machine takes for a pass's
        # own small write (67 ms seen against the 50 ms this was).
        assert evaluator.last is None
        assert slowest < 1.0
        assert evaluator.heartbeat_age_s() > 120.0  # its own heartbeat: stuck for 5 min
        release.set()
        wait_until(
            lambda: evaluator.last is not None and not evaluator.behind,
            "the evaluator done with the gap once released",
        )
        assert evaluator.heartbeat_age_s() <= 1.0
    finally:
        release.set()
        assert evaluator.shutdown(Deadline.within(5))
        assert evaluator.shutdown(Deadline.within(5))  # idempotent
        state.close()
    state = State(gap)
    try:
        assert state.alerts.progress()[RULE.name] == T
    finally:
        state.close()


def test_an_error_in_a_tick_does_not_end_the_evaluator(gap: Path) -> None:
    state = State(gap)
    service = service_on(state)
    step = service.evaluate_step
    calls: list[int] = []

    def flaky(*args: Any, **kwargs: Any) -> StepResult:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in one tick")
        return step(*args, **kwargs)

    service.evaluate_step = flaky  # type: ignore[method-assign]
    evaluator = AlertEvaluator(service, max_points=240)
    evaluator.notify(moment(T))
    assert evaluator.tick() is False  # logged, not raised
    assert evaluator.tick() is False  # the next tick does the work
    assert service.state.alerts.progress()[RULE.name] == T
    state.close()


def test_a_catch_up_cut_short_by_a_restart_resumes_where_it_stopped(gap: Path) -> None:
    expected = reference(gap)
    events: list[AlertEvent] = []
    state = State(gap)
    evaluator = AlertEvaluator(service_on(state), max_points=60)
    evaluator.notify(moment(T))
    assert evaluator.tick() is True
    assert evaluator.last is not None
    events.extend(evaluator.last.events)
    assert state.alerts.progress()[RULE.name] == T - GAP_S + 60 * 60.0
    state.close()  # the process is killed here
    state = State(gap)
    evaluator = AlertEvaluator(service_on(state), max_points=100)
    evaluator.notify(moment(T))
    while True:
        more = evaluator.tick()
        assert evaluator.last is not None
        events.extend(evaluator.last.events)
        if not more:
            break
    state.close()
    assert events == expected


def test_evaluate_catches_up_in_one_call_as_run_once_needs(gap: Path) -> None:
    expected = reference(gap)
    state = State(gap)
    try:
        assert service_on(state).evaluate(moment(T)) == expected
    finally:
        state.close()


# -- observer_alerts_active -------------------------------------------------------------------


def active(metrics: Metrics) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["environment"], s.labels["query_type"], s.labels["severity"]): s.value
        for family in metrics.registry.collect()
        if family.name == "observer_alerts_active"
        for s in family.samples
    }


def test_alerts_active_is_capped_and_a_resolved_group_leaves_no_series(tmp_path: Path) -> None:
    rule = check_window_rule(
        WindowRule(
            name="ungrounded_rate_high",
            expression=Expression("ungrounded"),
            aggregate="rate",
            op=">",
            threshold=0.05,
            window_s=300.0,
            min_samples=5,
            group_by=("environment", "query_type"),
        )
    )
    metrics = Metrics(max_query_types=2)
    state = State(tmp_path / "s.sqlite")
    start = T - 300.0
    kinds = ("alpha", "beta", "gamma", "delta")
    for index, kind in enumerate(kinds):
        state.history.put_many(
            stream(start, T, 10.0, bad=lambda at: True, query_type=kind, prefix=f"{index}-")
        )
    state.set_watermark(moment(T))
    service = service_on(state, metrics, rules=(rule,))
    service.evaluate(moment(T))
    firing = active(metrics)
    assert sum(firing.values()) == 4
    assert len([k for k in firing if k[1] != "other"]) == 2  # max_query_types
    assert firing[("production", "other", "page")] == 2.0
    # Ten minutes later only alpha is still bad: the other series are gone, not 0.
    later = T + 600.0
    for index, kind in enumerate(kinds):
        bad = kind == "alpha"
        state.history.put_many(
            stream(T, later, 10.0, bad=lambda at, b=bad: b, query_type=kind, prefix=f"{index}+")
        )
    state.set_watermark(moment(later))
    service.evaluate(moment(later))
    assert active(metrics) == {("production", metrics.alert_query_type("alpha"), "page"): 1.0}
    # A new process exports what still fires before its first evaluation.
    fresh = Metrics(max_query_types=2)
    service_on(state, fresh, rules=(rule,))
    assert list(active(fresh).values()) == [1.0]
    state.close()


# -- the notification outbox ------------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


def webhook_delivery(
    receiver: Receiver, metrics: Metrics, state: State, **options: Any
) -> Delivery:
    options = {"base_s": 0.01, "max_backoff_s": 0.02, **options}
    return Delivery(
        {"hook": WebhookNotifier("hook", receiver.url, timeout_s=5)},
        metrics,
        state.alerts,
        **options,
    )


class KilledBeforeSending(Delivery):
    """A process killed between deciding and sending: its lanes never run."""

    def wake(self, names: Any = None) -> None:
        pass

    def resume(self) -> None:
        pass


def firing_soon(tmp_path: Path) -> Path:
    """A state file whose next evaluation fires `RULE` (for = 0 s) in production."""
    path = tmp_path / "state.sqlite"
    state = State(path)
    state.history.put_many(stream(T - 900.0, T, 4.0, bad=lambda at: True))
    state.set_watermark(moment(T))
    state.close()
    return path


FOR_NOW = (
    check_window_rule(
        WindowRule(
            name="ungrounded_rate_high",
            expression=Expression("ungrounded"),
            aggregate="rate",
            op=">",
            threshold=0.05,
            window_s=900.0,
            min_samples=5,
            group_by=("environment",),
        )
    ),
)


def test_a_notification_decided_before_a_kill_is_delivered_once_after_the_restart(
    tmp_path: Path, receiver: Receiver
) -> None:
    path = firing_soon(tmp_path)
    metrics = Metrics()
    state = State(path)
    killed = KilledBeforeSending(
        {"hook": WebhookNotifier("hook", receiver.url)}, metrics, state.alerts
    )
    events = service_on(state, metrics, killed, FOR_NOW).evaluate(moment(T))
    assert [e.transition for e in events] == ["firing"]
    assert state.alerts.waiting("hook") == 1  # decided, and in the outbox with the decision
    state.close()  # killed: nothing was sent
    assert receiver.requests == []

    state = State(path)
    service = service_on(state, metrics, webhook_delivery(receiver, metrics, state), FOR_NOW)
    evaluator = AlertEvaluator(service)
    evaluator.start()  # what the killed process left goes out at once
    try:
        (request,) = receiver.wait_for(1)
        assert service.flush(Deadline.within(5))
        evaluator.notify(moment(T + 30.0))
        evaluator.tick()  # the alert still fires: nothing new to say
        assert service.flush(Deadline.within(5))
    finally:
        assert evaluator.shutdown(Deadline.within(5))
        assert service.shutdown(Deadline.within(5))
    body = request.json()
    assert (body["rule"], body["state"], body["severity"]) == (
        "ungrounded_rate_high",
        "firing",
        "page",
    )
    assert len(receiver.requests) == 1  # once
    assert state.alerts.waiting() == 0
    state.close()


def test_a_notifier_that_failed_all_its_retries_gets_it_at_the_next_evaluation(
    tmp_path: Path, receiver: Receiver
) -> None:
    path = firing_soon(tmp_path)
    metrics = Metrics()
    state = State(path)
    service = service_on(state, metrics, webhook_delivery(receiver, metrics, state), FOR_NOW)
    receiver.fail(4, status=503)  # every attempt of the first round
    assert [e.transition for e in service.evaluate(moment(T))] == ["firing"]
    receiver.wait_for(4)
    assert service.flush(Deadline.within(5)) is False  # kept in the outbox, not given up
    assert state.alerts.waiting("hook") == 1
    # The next evaluation (30 s later, well before `repeat`) tries it again.
    assert service.evaluate(moment(T + 30.0)) == []
    assert service.flush(Deadline.within(5))
    requests = receiver.requests
    assert len(requests) == 5
    assert len({r.headers["webhook-id"] for r in requests}) == 1  # the same message
    assert state.alerts.waiting() == 0
    count = metrics.value
    assert count("observer_alert_notifications_total", notifier="hook", result="sent") == 1
    assert count("observer_alert_notifications_total", notifier="hook", result="failed") == 1
    assert count("observer_alert_notifications_total", notifier="hook", result="dropped") == 0
    service.shutdown(Deadline.within(5))
    state.close()


def test_a_resolve_decided_while_the_page_waits_goes_out_after_it(
    tmp_path: Path, receiver: Receiver
) -> None:
    path = firing_soon(tmp_path)
    metrics = Metrics()
    state = State(path)
    service = service_on(state, metrics, webhook_delivery(receiver, metrics, state), FOR_NOW)
    receiver.default = Answer(503, b"down")
    service.evaluate(moment(T))
    receiver.wait_for(4)
    service.flush(Deadline.within(5))
    # Twenty minutes of good traces while the receiver is down: the alert resolves.
    state.history.put_many(stream(T, T + 1200.0, 4.0, prefix="good"))
    state.set_watermark(moment(T + 1200.0))
    receiver.default = Answer()
    transitions = [e.transition for e in service.evaluate(moment(T + 1200.0))]
    assert transitions == ["resolved"]
    assert service.flush(Deadline.within(5))
    states = [r.json()["state"] for r in receiver.requests if r.json()]
    assert states[-2:] == ["firing", "resolved"]
    assert state.alerts.waiting() == 0
    service.shutdown(Deadline.within(5))
    state.close()
