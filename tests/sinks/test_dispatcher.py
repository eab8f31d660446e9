"""`observer_trace_to_score_seconds`: from a trace's last activity (kept with its scores in
the outbox) to Langfuse's acknowledgement of the last of them, observed once per trace and
delivery, through the real dispatcher, sink and SDK against the fake Langfuse."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from observer.langfuse_api import build_api
from observer.model import ScoreEvent
from observer.sinks.dispatcher import Dispatcher
from observer.sinks.langfuse_scores import LangfuseScoreSink
from observer.state import State
from observer.telemetry.metrics import Metrics
from tests.fakes.langfuse_server import FakeLangfuse

T = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
HISTOGRAM = "observer_trace_to_score_seconds"


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


class Clock:
    def __init__(self, at: datetime) -> None:
        self.now = at.timestamp()

    def __call__(self) -> float:
        return self.now


NAMES = ("confidence", "ungrounded", "rerank_top1")


def scores(trace: str, names: tuple[str, ...] = NAMES) -> list[ScoreEvent]:
    return [
        ScoreEvent(
            id=f"{trace}-{name}",
            trace_id=trace,
            observation_id="gen-1",
            name=name,
            value=0.5,
            data_type="NUMERIC",
            comment=name,
            timestamp="2026-11-28T09:58:00.000Z",
            environment="production",
        )
        for name in names
    ]


def dispatcher(
    fake: FakeLangfuse, state: State, metrics: Metrics, clock: Clock, batch_size: int
) -> Dispatcher:
    sink = LangfuseScoreSink(build_api(fake.url, fake.public_key, fake.secret_key, 10))
    return Dispatcher(state, sink, metrics, batch_size=batch_size, clock=clock)


def observed(metrics: Metrics) -> tuple[float, float]:
    return metrics.value(f"{HISTOGRAM}_count"), metrics.value(f"{HISTOGRAM}_sum")


@pytest.mark.parametrize("batch_size", [1, 2, 3, 100], ids=lambda n: f"batch_{n}")
def test_once_per_trace_however_many_batches_carry_its_scores(
    fake: FakeLangfuse, tmp_path: Path, batch_size: int
) -> None:
    state, metrics, clock = State(tmp_path / "s.sqlite"), Metrics(), Clock(T)
    try:
        for trace, quiet_s in (("a", 40.0), ("b", 100.0)):
            state.record_trace(
                trace, "f", T, scores(trace), T, activity=T - timedelta(seconds=quiet_s)
            )
        sent = dispatcher(fake, state, metrics, clock, batch_size).send_due()
    finally:
        state.close()
    assert sent == 6 and len(fake.scores) == 6
    assert observed(metrics) == (2.0, 140.0)
    assert metrics.value(f"{HISTOGRAM}_bucket", le="45.0") == 1.0
    assert metrics.value(f"{HISTOGRAM}_bucket", le="120.0") == 2.0


def test_a_failed_push_is_no_acknowledgement_and_the_retry_is(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    state, metrics, clock = State(tmp_path / "s.sqlite"), Metrics(), Clock(T)
    try:
        state.record_trace("a", "f", T, scores("a"), T, activity=T - timedelta(seconds=30))
        sending = dispatcher(fake, state, metrics, clock, 100)
        fake.fail_next(503, path_prefix="/api/public/scores")
        assert sending.send_due() == 0
        assert observed(metrics) == (0.0, 0.0)
        clock.now += 600  # past the backoff: delivered ten minutes later
        assert sending.send_due() == 3
        assert sending.send_due() == 0  # nothing left, nothing observed twice
    finally:
        state.close()
    assert observed(metrics) == (1.0, 630.0)


def test_judge_scores_and_deletions_carry_no_activity(fake: FakeLangfuse, tmp_path: Path) -> None:
    state, metrics, clock = State(tmp_path / "s.sqlite"), Metrics(), Clock(T)
    try:
        state.enqueue(scores("judged", ("faithfulness",)), basis="b")
        sending = dispatcher(fake, state, metrics, clock, 100)
        assert sending.send_due() == 1
        # A pass scores the trace (the judge's score, made on another basis, is deleted):
        # the pass's score is observed once, the deletion not at all.
        state.record_trace(
            "judged",
            "g",
            T,
            scores("judged", ("confidence",)),
            T,
            activity=T - timedelta(seconds=5),
        )
        assert sending.send_due() >= 1
    finally:
        state.close()
    assert observed(metrics) == (1.0, 5.0)


def test_a_clock_behind_the_trace_is_no_negative_latency(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    state, metrics, clock = State(tmp_path / "s.sqlite"), Metrics(), Clock(T)
    try:
        state.record_trace("a", "f", T, scores("a"), T, activity=T + timedelta(seconds=90))
        assert dispatcher(fake, state, metrics, clock, 100).send_due() == 3
    finally:
        state.close()
    assert observed(metrics) == (1.0, 0.0)
