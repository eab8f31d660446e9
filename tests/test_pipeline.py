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
from tests.daemon_helpers import demo_observations

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
    assert result.scored == 75
    assert result.skipped == 5
    assert result.partial >= 1  # the root-less trace is left to the pass that holds its root
    assert state.watermark() == NOW - timedelta(seconds=20)
    state.close()
