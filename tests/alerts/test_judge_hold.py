"""A drifting judge holds its pages (docs/judge.md#a-drifting-judge): while
judge_error_rate_high fires, faithfulness_low is held (nobody paged for it), the judge's
own alert goes to the `judge` route (the eval owner); once the judge is healthy again,
what still fires is told."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from observer.alerts.delivery import Delivery
from observer.alerts.notifiers.webhook import WebhookNotifier
from observer.alerts.rules import (
    Route,
    TraceRule,
    WindowRule,
    default_trace_rules,
    default_window_rules,
)
from observer.alerts.service import AlertService, Options, RuleSet
from observer.background import Deadline
from observer.state import State
from observer.state.rows import Row
from observer.telemetry.metrics import Metrics
from tests.fakes.receiver import Receiver

T = 1_800_000_000.0
RULES = {r.name: r for r in default_window_rules()}


def moment(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)


def judged(
    start: float, end: float, *, errors: bool, faithfulness: float, prefix: str
) -> list[Row]:
    """A judged answer every 20 s: a judge error, or its faithfulness."""
    rows = []
    at, i = start, 0
    while at < end:
        values: dict[str, Any] = (
            {"judge_error": True} if errors and i % 2 == 0 else
            {"judge_error": False, "faithfulness": faithfulness}
        )  # fmt: skip
        rows.append(Row(at, values, f"{prefix}{i}", "p1", "production", "billing"))
        at += 20
        i += 1
    return rows


@pytest.fixture
def receivers() -> Iterator[tuple[Receiver, Receiver]]:
    with Receiver() as oncall, Receiver() as evals:
        yield oncall, evals


def wired(
    tmp_path: Path,
    receivers: dict[str, Receiver],
    rules: tuple[WindowRule, ...],
    trace_rules: tuple[TraceRule, ...] = (),
    routes: tuple[Route, ...] = (),
) -> tuple[State, Delivery, AlertService]:
    """A state file and the alert service over it, each notifier a webhook to a receiver."""
    state = State(tmp_path / "state.sqlite")
    metrics = Metrics()
    notifiers = {name: WebhookNotifier(name, r.url) for name, r in receivers.items()}
    delivery = Delivery(notifiers, metrics, state.alerts, base_s=0.01, max_backoff_s=0.02)
    service = AlertService(
        state,
        metrics,
        RuleSet(rules, trace_rules, routes=routes),
        delivery=delivery,
        notifiers={name: "webhook" for name in receivers},
        options=Options(base_url="https://langfuse.example.com"),
    )
    return state, delivery, service


def bodies(receiver: Receiver) -> list[dict[str, Any]]:
    return [r.json() for r in receiver.requests]


def test_a_failing_judge_holds_faithfulness_low_and_tells_the_eval_owner(
    tmp_path: Path, receivers: tuple[Receiver, Receiver]
) -> None:
    oncall, evals = receivers
    rules = tuple(
        dataclasses.replace(RULES[name], notify=("oncall",))
        for name in ("judge_error_rate_high", "faithfulness_low")
    )
    state, delivery, service = wired(
        tmp_path, {"oncall": oncall, "evals": evals}, rules, routes=(Route("judge", ("evals",)),)
    )
    try:
        # An hour of a judge failing half the time, its other verdicts low.
        state.history.put_many(judged(T - 3600, T, errors=True, faithfulness=0.5, prefix="a"))
        state.set_watermark(moment(T))
        service.evaluate(moment(T))
        (told,) = evals.wait_for(1)
        assert told.json()["rule"] == "judge_error_rate_high"
        assert told.json()["layer"] == "judge" and told.json()["state"] == "firing"
        assert oncall.requests == []  # faithfulness_low fired, and is held
        held = state.alerts.load()["faithfulness_low"]
        assert all(s.status == "firing" and s.held for s in held.values())

        # The judge recovers; its verdicts are still low: faithfulness_low is told now.
        state.history.put_many(judged(T, T + 3600, errors=False, faithfulness=0.5, prefix="b"))
        state.set_watermark(moment(T + 3600))
        service.evaluate(moment(T + 3600))
        (page,) = oncall.wait_for(1)
        assert page.json()["rule"] == "faithfulness_low" and page.json()["state"] == "firing"
        assert "held while the judge was unhealthy" in page.json()["description"]
        # The judge's own alert lowers to a warning, then resolves, on its route.
        *_, resolve = evals.wait_for(3)
        assert (resolve.json()["rule"], resolve.json()["state"]) == (
            "judge_error_rate_high",
            "resolved",
        )
        assert all(b["layer"] == "judge" for b in bodies(evals))
    finally:
        delivery.shutdown(Deadline.within(5))
        state.close()


def test_a_held_alert_that_ends_before_the_judge_recovers_is_never_told(
    tmp_path: Path, receivers: tuple[Receiver, Receiver]
) -> None:
    oncall, _ = receivers
    rules = (RULES["judge_error_rate_high"], RULES["faithfulness_low"])
    state, delivery, service = wired(tmp_path, {"oncall": oncall}, rules)
    try:
        state.history.put_many(judged(T - 3600, T, errors=True, faithfulness=0.5, prefix="a"))
        state.set_watermark(moment(T))
        service.evaluate(moment(T))
        # Still failing, but the answers it can judge are faithful now.
        state.history.put_many(judged(T, T + 3600, errors=True, faithfulness=1.0, prefix="b"))
        state.set_watermark(moment(T + 3600))
        service.evaluate(moment(T + 3600))
        oncall.wait_for(1)
        told = [b["rule"] for b in bodies(oncall)]
        assert "faithfulness_low" not in told  # held, then over: nobody paged, no resolve
        assert "judge_error_rate_high" in told
    finally:
        delivery.shutdown(Deadline.within(5))
        state.close()


def test_critical_claim_unsupported_is_held_while_the_judge_is_unhealthy(
    tmp_path: Path, receivers: tuple[Receiver, Receiver]
) -> None:
    from observer.state.rows import AlertState

    oncall, _ = receivers
    state, delivery, service = wired(
        tmp_path, {"oncall": oncall}, (RULES["judge_error_rate_high"],), default_trace_rules()
    )
    group = (("environment", "production"), ("query_type", "billing"))
    try:
        state.alerts.commit("judge_error_rate_high", {group: AlertState(status="firing")}, T)
        service.scored(Row(T, {"critical_unsupported": True}, "held-1", "p1"))
        assert state.alerts.waiting() == 0 and oncall.requests == []
        state.alerts.commit("judge_error_rate_high", {}, T + 60)  # the judge is healthy
        service.scored(Row(T + 60, {"critical_unsupported": True}, "told-1", "p1"))
        (request,) = oncall.wait_for(1)
        assert request.json()["rule"] == "critical_claim_unsupported"
    finally:
        delivery.shutdown(Deadline.within(5))
        state.close()


def test_alerts_status_says_an_alert_is_held() -> None:
    from observer.alerts.service import RuleStatus
    from observer.app import AlertStatus
    from observer.state.rows import AlertState
    from observer.views.alerts import status_rows

    held = AlertState(status="firing", severity="page", samples=90, value=0.5, held=True)
    rule = RULES["faithfulness_low"]
    status = RuleStatus(rule, (("environment", "production"),), held, T)
    (row,) = status_rows(AlertStatus([status], {}, [], T, (rule,), 0))
    assert row["state"] == "firing (held: the judge is unhealthy)"


def test_a_canary_that_flips_holds_faithfulness_low_and_tells_the_judge_route_once(
    tmp_path: Path, receivers: tuple[Receiver, Receiver]
) -> None:
    """The issue's case: the judge starts disagreeing (the canary's verdicts flip), and
    faithfulness_low is held; the eval owner is told once, the RAG on-call not at all."""
    from datetime import timedelta

    from tests.fakes.clock import SimulatedClock
    from tests.fakes.openai_stub import OpenAIStub
    from tests.judge.test_canary_run import canary, drifted

    oncall, evals = receivers
    rules = tuple(
        dataclasses.replace(RULES[name], notify=("oncall",))
        for name in ("judge_canary_low", "faithfulness_low")
    )
    state, delivery, service = wired(
        tmp_path, {"oncall": oncall, "evals": evals}, rules, routes=(Route("judge", ("evals",)),)
    )

    clock = SimulatedClock(moment(T) - timedelta(days=1))
    try:
        with OpenAIStub() as stub:
            run = canary(stub, state, clock, Metrics())
            run.step()  # yesterday: the canary as labelled
            stub.judge = drifted  # the provider changed the model overnight
            clock.set(moment(T))
            run.step()
        state.history.put_many(judged(T - 3600, T, errors=False, faithfulness=0.5, prefix="a"))
        for minutes in (0, 5, 10):  # the evaluator's next ticks
            state.set_watermark(moment(T + 60 * minutes))
            service.evaluate(moment(T + 60 * minutes))
        held = state.alerts.load()["faithfulness_low"]
        assert held and all(s.status == "firing" and s.held for s in held.values())
        delivery.shutdown(Deadline.within(5))  # whatever was queued is delivered first
        (told,) = bodies(evals)
        assert (told["rule"], told["state"], told["layer"]) == (
            "judge_canary_low",
            "firing",
            "judge",
        )
        assert oncall.requests == []
    finally:
        delivery.shutdown(Deadline.within(5))
        state.close()


def test_a_low_agreement_read_in_the_same_tick_holds_faithfulness_low(
    tmp_path: Path, receivers: tuple[Receiver, Receiver]
) -> None:
    """The agreement is a sample of the daemon, read after the trace rows: it is evaluated
    first all the same, or the page it should hold goes out in the same tick."""
    oncall, _ = receivers
    rules = (RULES["faithfulness_low"], RULES["judge_agreement_low"])
    state, delivery, service = wired(tmp_path, {"oncall": oncall}, rules)
    try:
        state.history.put_many(judged(T - 3600, T, errors=False, faithfulness=0.5, prefix="a"))
        state.history.add_samples(T - 60, {"judge_kappa": 0.1, "judge_pairs": 40})
        state.set_watermark(moment(T))
        service.evaluate(moment(T))
        delivery.shutdown(Deadline.within(5))
        assert [b["rule"] for b in bodies(oncall)] == ["judge_agreement_low"]
        assert all(s.held for s in state.alerts.load()["faithfulness_low"].values())
    finally:
        delivery.shutdown(Deadline.within(5))
        state.close()
