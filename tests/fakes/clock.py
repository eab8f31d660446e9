"""A clock that moves only when a test says so: ``FakeLangfuse(clock=SimulatedClock(t0))``."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

__all__ = ["SimulatedClock"]


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
