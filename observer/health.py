"""What the daemon's probes answer (`/healthz`, `/readyz`), from heartbeats and holds.

- live: the poll loop's heartbeat is fresh (stale: a wedged loop, restart me);
- ready: Langfuse answered recently, a pass completed recently, the lag is under its
  bound, the outbox is not full, and no hold is taken: a hold names its cause
  (`hold("state", why)`, `hold("redis", why)`) and is released by that name by the
  part that sees the cause go (observer.telemetry.http serves both).

`observer demo --serve` serves a finished run that reads no Langfuse: there
`heartbeat_of` names the serving loop, which beats while it serves, and
`langfuse_not_used` says why readiness does not ask for Langfuse (the body's
`langfuse` key); lag and outbox are judged as always.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(eq=False, repr=False, kw_only=True)
class Health:
    """What the probes answer, from heartbeats the daemon records. Thread-safe enough:
    each field is one float written by one thread.

    `stale_after_s` None: never stale; `langfuse_within_s` None or `langfuse_not_used`
    set: readiness does not ask for Langfuse; `pass_within_s` None: nor for a completed
    pass."""

    stale_after_s: float | None
    langfuse_within_s: float | None
    max_lag_s: float
    lag_s: Callable[[], float]
    outbox: Callable[[], int]
    max_outbox: int
    clock: Callable[[], float] = time.monotonic
    heartbeat_of: str = "the poll loop"
    langfuse_not_used: str | None = None
    pass_within_s: float | None = None

    def __post_init__(self) -> None:
        self._beat = self.clock()
        self._started = self._beat
        self._langfuse: float | None = None
        self._pass: float | None = None
        self._holds: dict[str, str] = {}  # name -> why, in the order they were taken

    def hold(self, name: str, why: str) -> None:
        """Not ready, for `why`, until `release(name)`: one hold a cause (the state file,
        the fleet's Redis), taken and released by name by whoever sees the cause."""
        self._holds[name] = why

    def release(self, name: str) -> bool:
        """The hold `name` released; whether there was one."""
        return self._holds.pop(name, None) is not None

    def held(self, name: str) -> str | None:
        """Why the hold `name` is taken, or None."""
        return self._holds.get(name)

    @property
    def holds(self) -> tuple[str, ...]:
        """The names of the holds taken."""
        return tuple(self._holds)

    def beat(self) -> None:
        """The loop `heartbeat_of` names is alive (the poll loop: per pass and per page)."""
        self._beat = self.clock()

    def langfuse_answered(self) -> None:
        self._langfuse = self.clock()

    def pass_completed(self) -> None:
        self._pass = self.clock()

    def live(self) -> tuple[bool, dict[str, Any]]:
        age = self.clock() - self._beat
        fresh = self.stale_after_s is None or age <= self.stale_after_s
        body: dict[str, Any] = {
            "status": "ok" if fresh else "stale",
            "heartbeat_age_s": round(age, 1),
            "heartbeat_of": self.heartbeat_of,
        }
        if not fresh:
            body["reason"] = f"{self.heartbeat_of} has not beaten for {age:.0f} s"
        return fresh, body

    def ready(self) -> tuple[bool, dict[str, Any]]:
        reasons: list[str] = []
        now = self.clock()
        body: dict[str, Any] = {}
        if self.langfuse_not_used is not None:
            body["langfuse"] = self.langfuse_not_used
        elif self.langfuse_within_s is not None:
            if self._langfuse is None:
                reasons.append("Langfuse has not answered yet")
            else:
                ago = now - self._langfuse
                body["langfuse_answered_s_ago"] = round(ago, 1)
                if ago > self.langfuse_within_s:
                    reasons.append(f"Langfuse has not answered for {ago:.0f} s")
        if self.pass_within_s is not None and self.langfuse_not_used is None:
            ago = now - (self._pass if self._pass is not None else self._started)
            body["pass_completed_s_ago"] = None if self._pass is None else round(ago, 1)
            if ago > self.pass_within_s:
                reasons.append(f"no pass has completed for {ago:.0f} s")
        lag = self.lag_s()
        body["lag_s"] = round(lag, 1)
        if lag > self.max_lag_s:
            reasons.append(f"lag {lag:.0f} s is above {self.max_lag_s:g} s")
        size = self.outbox()
        body["outbox"] = size
        if size >= self.max_outbox:
            reasons.append(f"the outbox is full ({size} scores)")
        reasons.extend(self._holds.values())
        body["status"] = "ready" if not reasons else "not ready"
        if reasons:
            body["reasons"] = reasons
        return not reasons, body
