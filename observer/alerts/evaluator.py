"""The window rules' own thread: the poll loop tells it where to evaluate, and moves on.

    poll thread:  pass -> record_pass -> evaluator.notify(now) -> next pass (never waits)
    evaluator:    while not stopped: wait(interval or a nudge); tick()
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

`shutdown(timeout_s)` is idempotent: it stops the loop (a tick in progress
stops between rules), joins the thread within the budget and closes the
reader; False when the thread did not end in time (the state file must then
stay open under it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

import structlog

from observer.alerts.service import AlertService, StepResult
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
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader: HistoryReader | None = None
        self._beat = clock()
        self._behind = False
        self._shutdown_result: bool | None = None
        # A fleet evaluates on one member at a time (observer.fleet.alerts): `active` says
        # whether this one does; `after_tick` hands the alert state on after each tick.
        self.active: Callable[[], bool] = lambda: True
        self.after_tick: Callable[[], None] = lambda: None

    # -- the poll loop's side -------------------------------------------------

    def notify(self, now: datetime) -> None:
        """A pass ended at `now`: evaluate up to it. Never blocks."""
        with self._lock:
            if self._target is None or now > self._target:
                self._target = now
        self._wake.set()

    def after_pass(self, now: datetime, lag_s: float) -> None:
        """The pass's own samples into the history (one small write), then `notify(now)`."""
        try:
            self.service.record_pass(now, lag_s)
        except Exception:  # alerting must never stop scoring
            log.exception("alert_samples_failed")
        self.notify(now)

    # -- liveness -------------------------------------------------------------

    def heartbeat_age_s(self) -> float:
        """Seconds since the loop last beat (at every tick, and between ticks)."""
        return max(0.0, self.clock() - self._beat)

    def alive(self, within_s: float) -> bool:
        """The loop beat within `within_s` (a wedged evaluator is not)."""
        return self.heartbeat_age_s() <= within_s

    @property
    def behind(self) -> bool:
        """A catch-up is in progress: points are left for the next ticks."""
        return self._behind

    # -- the loop -------------------------------------------------------------

    def start(self) -> None:
        """Open the history reader, send what a killed process left in the outbox, and
        start the thread (once)."""
        if self._thread is not None:
            return
        self._reader = self.service.state.history.reader()
        self.service.resume_delivery()
        self._thread = threading.Thread(target=self._run, name="observer-alerts", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        more = False
        while not self._stop.is_set():
            if not more:
                self._wake.wait(self.interval_s)
                self._wake.clear()
            if self._stop.is_set():
                break
            # Back-to-back ticks of a catch-up do not each retry a receiver that is down.
            more = self.tick(resume=not more)
        self._beat = self.clock()

    def tick(self, *, resume: bool = True) -> bool:
        """One bounded evaluation up to the last target; True when points are left for the
        next tick. `resume`: start again the notifier lanes a failed delivery stopped.
        Never raises."""
        self._beat = self.clock()
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
                rows=reader.rows if reader is not None else None,
                should_stop=self._stop.is_set,
                resume=resume,
            )
        except Exception:  # the loop never dies; the next tick tries again
            log.exception("alert_evaluation_failed")
            return False
        finally:
            self._beat = self.clock()
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

    def shutdown(self, timeout_s: float) -> bool:
        """Stop the loop and join it within `timeout_s`; True when it ended. Idempotent."""
        if self._shutdown_result is not None:
            return self._shutdown_result
        self._stop.set()
        self._wake.set()
        joined = True
        if self._thread is not None:
            self._thread.join(timeout=max(0.0, timeout_s))
            joined = not self._thread.is_alive()
        if joined and self._reader is not None:
            self._reader.close()
            self._reader = None
        if not joined:
            log.warning("alert_evaluation_abandoned", reason="a tick outlasted the grace")
        self._shutdown_result = joined
        return joined
