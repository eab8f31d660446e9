"""The window rules' own thread: the poll loop tells it where to evaluate, and moves on.

    poll thread:  pass -> record_pass -> evaluator.notify(now) -> next pass (never waits)
    evaluator:    an observer.background.Worker: wait(interval or a nudge); tick()
                  tick = AlertService.evaluate_step(target, max_points)  (bounded)

A nudge only sets the target (the pass's clock moment: the clock for the
daemon's own samples; the rules on traces read the watermark the pass saved).
Each tick works off at most `max_points` evaluation points per rule, saves
each rule's state, the point it reached and its notifications in one
transaction, and returns; while points are left (a catch-up after a gap) the
next tick follows at once, so a four-hour gap is worked off in a few ticks,
none long, and a restart resumes where the last one stopped. Between nudges
a tick still runs every `interval_s`: digests fall due, and notifier lanes a
failure stopped start again.

The thread never dies of an error (logged, tried again at the next tick). It
reads the history through a connection of its own (`HistoryReader`), so the
writers' lock is held only for its small writes. Its liveness is its own:
`heartbeat_age_s()` (beaten at every tick; at most about `interval_s` plus
one tick while healthy) and `behind` (a catch-up is in progress). The poll
loop's heartbeat, what `/healthz` reads, no longer waits for any evaluation.

`shutdown(deadline)` is idempotent: it stops the loop (a tick in progress
stops between rules), joins the thread by the deadline and closes the
reader; False when the thread did not end in time (the state file must then
stay open under it).

In a fleet it evaluates only while `active()` says this member does, and
calls `after_tick()` after each tick (the member hands the alert state on):
both given at construction.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

import structlog

from observer.alerts.service import AlertService, StepResult
from observer.background import Deadline, Worker
from observer.state.history import HistoryReader

log = structlog.get_logger("observer.alerts.evaluator")

# Evaluation points per rule and tick: an hour of event time at the 60 s step.
MAX_POINTS = 60


class AlertEvaluator:
    def __init__(
        self,
        service: AlertService,
        *,
        interval_s: float = 30.0,
        max_points: int = MAX_POINTS,
        clock: Callable[[], float] = time.monotonic,
        active: Callable[[], bool] = lambda: True,
        after_tick: Callable[[], None] = lambda: None,
    ) -> None:
        if interval_s <= 0 or max_points < 1:
            raise ValueError("interval_s must be above 0 and max_points at least 1")
        self.service = service
        self.interval_s = interval_s
        self.max_points = max_points
        self.clock = clock
        self.last: StepResult | None = None  # what the last tick did
        self._target: datetime | None = None
        self._lock = threading.Lock()
        self._reader: HistoryReader | None = None
        self._behind = False
        self._shutdown_result: bool | None = None
        # A fleet evaluates on one member at a time (observer.fleet.alerts): `active` says
        # whether this one does; `after_tick` hands the alert state on after each tick.
        self.active = active
        self.after_tick = after_tick
        self._more = False
        self._worker = Worker(
            "observer-alerts",
            self._step,
            interval_s=interval_s,
            crash_event="alert_evaluation_failed",
            clock=clock,
        )
        self._stop = self._worker.stopping

    # -- the poll loop's side -------------------------------------------------

    def notify(self, now: datetime) -> None:
        """A pass ended at `now`: evaluate up to it. Never blocks."""
        with self._lock:
            if self._target is None or now > self._target:
                self._target = now
        self._worker.wake()

    def after_pass(self, now: datetime, lag_s: float) -> None:
        """The pass's own samples into the history (one small write), then `notify(now)`."""
        try:
            self.service.record_pass(now, lag_s)
        except Exception:  # alerting must never stop scoring
            log.exception("alert_samples_failed")
        self.notify(now)

    def catch_up(self) -> None:
        """Every tick up to the last target, on the caller's thread (a one-shot run)."""
        self.open()
        more = self.tick()
        while more and not self._stop.is_set():
            more = self.tick(resume=False)

    # -- liveness -------------------------------------------------------------

    def heartbeat_age_s(self) -> float:
        """Seconds since the loop last beat (at every tick, and between ticks)."""
        return self._worker.heartbeat_age_s()

    @property
    def behind(self) -> bool:
        """A catch-up is in progress: points are left for the next ticks."""
        return self._behind

    # -- the loop -------------------------------------------------------------

    def open(self) -> None:
        """The history reader, and what a killed process left in the outbox sent."""
        if self._reader is None:
            self._reader = self.service.state.history.reader()
            self.service.resume_delivery()

    def start(self) -> None:
        """`open()`, and the thread (once)."""
        self.open()
        self._worker.start()

    def _step(self) -> bool:
        # Back-to-back ticks of a catch-up do not each retry a receiver that is down.
        self._more = self.tick(resume=not self._more)
        return self._more

    def tick(self, *, resume: bool = True) -> bool:
        """One bounded evaluation up to the last target; True when points are left for the
        next tick. `resume`: start again the notifier lanes a failed delivery stopped.
        Never raises."""
        with self._lock:
            target = self._target
        if target is None:
            return False  # no pass has ended yet: nothing is known to evaluate
        if not self.active():
            return False  # another member of the fleet evaluates
        reader = self._reader
        try:
            step = self.service.evaluate_step(
                target,
                max_points=self.max_points,
                rows=reader,
                should_stop=self._stop.is_set,
                resume=resume,
            )
        except Exception:  # the loop never dies; the next tick tries again
            log.exception("alert_evaluation_failed")
            return False
        self.last = step
        self._behind = step.behind
        try:
            self.after_tick()
        except Exception:
            log.exception("alert_state_handover_failed")
        if step.behind:
            log.info(
                "alert_evaluation_behind",
                points=step.points,
                points_left=step.left,
                evaluated_to=step.evaluated_to,
            )
        return step.behind

    def shutdown(self, deadline: Deadline) -> bool:
        """Stop the loop and join it by `deadline`; True when it ended. Idempotent."""
        if self._shutdown_result is not None:
            return self._shutdown_result
        joined = self._worker.stop(deadline)
        if joined and self._reader is not None:
            self._reader.close()
            self._reader = None
        if not joined:
            log.warning("alert_evaluation_abandoned", reason="a tick outlasted the grace")
        self._shutdown_result = joined
        return joined
