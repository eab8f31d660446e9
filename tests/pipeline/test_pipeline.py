"""One pass over strange input: it finishes, counts, and moves on."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from observer.mapping import MappingRules
from observer.pipeline import Pipeline
from observer.signals import SignalParams
from observer.state import State
from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import demo_counts, demo_observations

NOW = datetime(2026, 11, 29, tzinfo=UTC)


class ListSource:
    """Observations from a list, in pages, newest first (as the API pages them)."""

    def __init__(self, observations: list[dict[str, Any]], page: int = 50) -> None:
        self.observations = observations
        self.page = page

    def pages(self, start: datetime, end: datetime) -> Iterator[list[dict[str, Any]]]:
        for offset in range(0, len(self.observations), self.page):
            yield self.observations[offset : offset + self.page]


def test_garbage_observations_do_not_stop_the_pass(tmp_path: Path) -> None:
    good = sorted(demo_observations(), key=lambda o: o["startTime"], reverse=True)
    garbage: list[dict[str, Any]] = [
        {},
        {"traceId": None, "startTime": "2026-11-28T10:00:00Z"},
        {"traceId": "x" * 32, "isRootObservation": True, "startTime": "yesterday"},
        {"traceId": "y" * 32, "isRootObservation": True, "startTime": 12345, "output": {"a": [1]}},
        {"traceId": "z" * 32, "startTime": "2026-11-28T10:00:00Z", "type": "GENERATION"},
    ]
    metrics = Metrics()
    state = State(tmp_path / "s.sqlite")
    pipeline = Pipeline(
        ListSource(garbage[:3] + good + garbage[3:]),
        state,
        metrics,
        SignalParams(),
        MappingRules(),
        lookback_s=30 * 86400,
    )
    result = pipeline.poll(NOW)
    assert result.scored == demo_counts().scored
    assert result.skipped == 5
    assert result.partial >= 1  # the root-less trace is left to the pass that holds its root
    assert state.watermark() == NOW - timedelta(seconds=20)
    state.close()


def test_pass_results_add_up_every_counter() -> None:
    from observer.pipeline import PassResult

    total = PassResult(NOW, NOW)
    total.add(
        PassResult(
            NOW,
            NOW,
            observations=10,
            scored=2,
            partial=1,
            scores=16,
            skip_reasons={"no_generation": 1},
        )
    )
    total.add(
        PassResult(
            NOW,
            NOW,
            observations=5,
            rescored=1,
            skipped=1,
            partial=2,
            skip_reasons={"no_generation": 2, "own_trace": 1},
        )
    )
    assert (total.observations, total.scored, total.rescored, total.skipped) == (15, 2, 1, 1)
    assert (total.partial, total.scores) == (3, 16)
    assert total.skip_reasons == {"no_generation": 3, "own_trace": 1}
