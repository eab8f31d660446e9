"""Clocks that move only when a test says so: ``FakeLangfuse(clock=SimulatedClock(t0))``,
and ``StepClock`` for what waits on a monotonic clock (the request budget)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

__all__ = ["SimulatedClock", "StepClock"]


class SimulatedClock:
    """Call it for "now"; ``advance`` and ``set`` move it. Thread-safe, always UTC-aware."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("a SimulatedClock starts at an aware datetime")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        """Move forward by ``seconds`` (not backwards: Langfuse's clock is monotonic enough)."""
        if seconds < 0:
            raise ValueError("a SimulatedClock only moves forward")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, moment: datetime) -> None:
        if moment.tzinfo is None:
            raise ValueError("set an aware datetime")
        with self._lock:
            self._now = moment.astimezone(UTC)


class StepClock:
    """A monotonic ``time`` and a ``sleep`` that moves it (the sleeps kept in ``slept``), and
    the wall clock in step with it from ``wall_start`` (``wall``, for the fake Langfuse): a
    rate limiter's waits, taken at once."""

    def __init__(self, wall_start: datetime = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)) -> None:
        self.now = 0.0
        self.slept: list[float] = []
        self._wall_start = wall_start

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def wall(self) -> datetime:
        return self._wall_start + timedelta(seconds=self.now)
