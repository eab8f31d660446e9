"""The canary judged on the daemon's schedule (observer.judge.canary_run): the real judge
client against the OpenAI stub over HTTP, a real state file, a clock the test moves."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openai
import pytest

from observer.alerts.engine import evaluate
from observer.alerts.rules import default_window_rules
from observer.judge.canary import Case, read_cases
from observer.judge.canary_run import CanaryRun
from observer.judge.client import JudgeClient
from observer.judge.identity import judge_of
from observer.signals import SignalParams, compute
from observer.state import State
from observer.telemetry.metrics import Metrics
from tests.fakes.clock import SimulatedClock
from tests.fakes.openai_stub import VERDICTS_SCHEMA, OpenAIStub, default_judge

START = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
RULE = next(r for r in default_window_rules() if r.name == "judge_canary_low")


def case_line(key: str, answer: str, label: str) -> bytes:
    source = {"chunk_id": "refunds#1", "text": "Annual plans are refunded within 14 days."}
    return json.dumps(
        {"trace_id": key, "question": "Refunds?", "answer": answer, "sources": [source],
         "label": label}
    ).encode()  # fmt: skip


# Two answers the sources hold, two that say a number they do not.
CASES = read_cases(
    [
        case_line("good-1", "Annual plans are refunded within 14 days. [1]", "faithful"),
        case_line("good-2", "You have 14 days for a refund. [1]", "faithful"),
        case_line("bad-1", "Annual plans are refunded within 30 days. [1]", "unfaithful"),
        case_line("bad-2", "You have 60 days for a refund. [1]", "unfaithful"),
    ],
    "canary.jsonl",
)


def drifted(schema: str, request: dict[str, Any]) -> str:
    """The stub's judge with every verdict turned over: a model that changed under us."""
    answer = default_judge(schema, request)
    if schema != VERDICTS_SCHEMA:
        return answer
    verdicts = json.loads(answer)
    for v in verdicts["verdicts"]:
        v["supported"] = not v["supported"]
    return json.dumps(verdicts)


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


@pytest.fixture
def state(tmp_path: Path) -> Iterator[State]:
    opened = State(tmp_path / "state.sqlite")
    yield opened
    opened.close()


def canary(
    stub: OpenAIStub,
    state: State,
    clock: SimulatedClock,
    metrics: Metrics,
    cases: tuple[Case, ...] = CASES,
    **kw: Any,
) -> CanaryRun:
    client = JudgeClient(
        openai.OpenAI(base_url=stub.url + "/v1", api_key="sk-test", max_retries=0),
        "stub-judge",
        max_retries=0,
    )
    options: dict[str, Any] = {
        "every": timedelta(hours=24),
        "share_tokens": 200_000,
        "faithful_at": 1.0,
        "clock": clock,
    }
    return CanaryRun(
        cases,
        lambda record: client.judge(record, compute(record, SignalParams())),
        judge_of("stub-judge"),
        state.judge,
        metrics,
        state.history.add_samples,
        **{**options, **kw},
    )


def samples(state: State, name: str) -> list[tuple[float, float]]:
    rows = state.history.rows(0, 4e9, {name}, traces=False)
    return [(r.at, r.values[name]) for r in rows if name in r.values]


def chat_requests(stub: OpenAIStub) -> int:
    return len(stub.requests)


def test_a_run_sets_the_metrics_a_sample_and_counts_its_tokens_apart(
    stub: OpenAIStub, state: State
) -> None:
    clock, metrics = SimulatedClock(START), Metrics()
    run = canary(stub, state, clock, metrics)
    run.step()
    assert metrics.value("observer_judge_canary", measure="agreement") == 1.0
    assert metrics.value("observer_judge_canary", measure="kappa") == 1.0
    assert math.isnan(metrics.value("observer_judge_canary", measure="flip_rate"))
    assert metrics.value("observer_judge_canary_cases", verdict="judged") == 4
    assert metrics.value("observer_judge_canary_runs_total", result="done") == 1
    assert samples(state, "judge_canary_agreement") == [(START.timestamp(), 1.0)]
    assert samples(state, "judge_canary_flip_rate") == []  # no run before it
    spent = state.judge.canary_spent("2026-12-04")
    assert spent > 0 and spent == metrics.total("observer_judge_tokens_total")
    assert state.judge.budget("2026-12-04T09", "2026-12-04") == (0, 0)  # not the traces'


def test_the_next_run_waits_a_day_and_the_figures_are_written_hourly(
    stub: OpenAIStub, state: State
) -> None:
    clock, metrics = SimulatedClock(START), Metrics()
    run = canary(stub, state, clock, metrics)
    run.step()
    calls = chat_requests(stub)
    assert calls == 2 * len(CASES)  # claims, then verdicts, per case
    clock.set(START + timedelta(minutes=30))
    run.step()
    clock.set(START + timedelta(minutes=61))
    run.step()
    clock.set(START + timedelta(hours=23))
    run.step()
    assert chat_requests(stub) == calls  # no second run within the day
    written = [at for at, _ in samples(state, "judge_canary_agreement")]
    assert written == [START.timestamp(), (START + timedelta(minutes=61)).timestamp(),
                       (START + timedelta(hours=23)).timestamp()]  # fmt: skip
    clock.set(START + timedelta(hours=24))
    run.step()
    assert chat_requests(stub) == 2 * calls
    assert metrics.value("observer_judge_canary", measure="flip_rate") == 0.0


def test_a_drifting_judge_flips_the_canary_and_the_default_rule_fires(
    stub: OpenAIStub, state: State
) -> None:
    clock, metrics = SimulatedClock(START), Metrics()
    run = canary(stub, state, clock, metrics)
    run.step()
    stub.judge = drifted
    clock.set(START + timedelta(days=1))
    run.step()
    assert metrics.value("observer_judge_canary", measure="agreement") == 0.0
    assert metrics.value("observer_judge_canary", measure="flip_rate") == 1.0
    assert run.last is not None and run.last.figures.flips == ("good-1", "good-2", "bad-1", "bad-2")
    rows = state.history.rows(0, 4e9, {"judge_canary_agreement"}, traces=False)
    verdict = evaluate(RULE, rows, {}, clock().timestamp())
    assert verdict.states[()].status == "firing"
    # The day before, the same rule saw a healthy canary.
    before = evaluate(RULE, rows, {}, START.timestamp())
    assert before.states[()].status == "ok"


def test_the_flip_rate_counts_against_the_run_kept_before_a_restart(
    stub: OpenAIStub, state: State
) -> None:
    clock = SimulatedClock(START)
    canary(stub, state, clock, Metrics()).step()
    stub.judge = drifted
    clock.set(START + timedelta(hours=2))
    metrics = Metrics()
    restarted = canary(stub, state, clock, metrics)
    # The kept run is shown at once, and not run again before its day is over.
    assert metrics.value("observer_judge_canary", measure="agreement") == 1.0
    restarted.step()
    assert len(stub.requests) == 2 * len(CASES)
    clock.set(START + timedelta(days=1))
    restarted.step()
    assert metrics.value("observer_judge_canary", measure="flip_rate") == 1.0


def test_a_run_that_would_pass_its_share_waits_for_the_next_day(
    stub: OpenAIStub, state: State
) -> None:
    clock, metrics = SimulatedClock(START), Metrics()
    # Earlier runs today took the share but a little.
    state.judge.canary_ran("2026-12-04", 195_000, None)
    run = canary(stub, state, clock, metrics)
    run.step()
    clock.set(START + timedelta(hours=3))
    run.step()
    assert stub.requests == []
    assert metrics.value("observer_judge_canary_runs_total", result="over_budget") == 1
    clock.set(datetime(2026, 12, 5, 0, 1, tzinfo=UTC))
    run.step()
    assert metrics.value("observer_judge_canary_runs_total", result="done") == 1


def test_a_run_cut_by_a_shutdown_keeps_the_run_before_and_counts_its_tokens(
    stub: OpenAIStub, state: State
) -> None:
    clock, metrics = SimulatedClock(START), Metrics()
    canary(stub, state, clock, metrics).step()
    kept = state.judge.canary_last()
    spent = state.judge.canary_spent("2026-12-04")
    asked: list[int] = []

    def stopping() -> bool:
        asked.append(1)
        return len(asked) > 2  # two cases judged, then the stop

    clock.set(START + timedelta(days=1))
    canary(stub, state, clock, metrics, should_stop=stopping).step()
    assert metrics.value("observer_judge_canary_runs_total", result="stopped") == 1
    assert state.judge.canary_last() == kept
    assert state.judge.canary_spent("2026-12-05") > 0  # what the two cases cost
    assert state.judge.canary_spent("2026-12-04") == spent


def test_a_judge_that_gives_no_verdict_keeps_the_run_before_and_tries_in_an_hour(
    stub: OpenAIStub, state: State
) -> None:
    clock, metrics = SimulatedClock(START), Metrics()
    run = canary(stub, state, clock, metrics)
    run.step()
    kept = state.judge.canary_last()

    def down(_schema: str, _request: dict[str, Any]) -> str:
        raise RuntimeError("the endpoint is down")

    stub.judge = down
    clock.set(START + timedelta(days=1))
    run.step()
    assert metrics.value("observer_judge_canary_runs_total", result="no_verdict") == 1
    assert state.judge.canary_last() == kept
    clock.advance(30 * 60)
    run.step()
    assert metrics.value("observer_judge_canary_runs_total", result="no_verdict") == 1
    stub.judge = default_judge
    clock.advance(31 * 60)
    run.step()
    assert metrics.value("observer_judge_canary_runs_total", result="done") == 2


def test_a_member_that_does_not_evaluate_runs_nothing(stub: OpenAIStub, state: State) -> None:
    evaluating = False
    run = canary(stub, state, SimulatedClock(START), Metrics(), active=lambda: evaluating)
    run.step()
    assert stub.requests == [] and state.judge.canary_last() is None
    evaluating = True
    run.step()
    assert state.judge.canary_last() is not None


def test_the_shipped_canary_under_the_stubs_judge(stub: OpenAIStub, state: State) -> None:
    """The stub checks numbers only: the negation and the unsupported addition pass it,
    as a judge that reads no further would let them (docs/judge.md#a-canary)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "canary.jsonl"
    cases = read_cases(example.read_bytes().splitlines(), "canary.jsonl")
    metrics = Metrics()
    run = canary(stub, state, SimulatedClock(START), metrics, cases=cases)
    run.step()
    assert run.last is not None
    assert run.last.figures.disagreements == ("canary-en-04", "canary-zh-06")
    assert metrics.value("observer_judge_canary", measure="agreement") == pytest.approx(10 / 12)
