"""Background threads: apscheduler's jobs in daemon threads, and the one worker shape.

Every part that works on a thread of its own (the score dispatcher, each
notifier's lane, the judge's workers, the window rules' evaluator) is a
`Worker`: a loop around one bounded `step`, woken or on an interval, stopped by
a `Deadline` that the whole shutdown shares.

apscheduler's thread pool is `concurrent.futures`, whose workers the
interpreter joins at exit: a poll stuck in a 30 s request would hold a
stopping daemon past its grace period. Here each run is its own daemon
thread, so shutdown abandons it instead (the state file stays consistent:
every write is one SQLite transaction).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import structlog
from apscheduler.executors.base import BaseExecutor, run_job  # type: ignore[import-untyped]
from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]

log = structlog.get_logger("observer")


class DaemonThreadExecutor(BaseExecutor):  # type: ignore[misc]
    def _do_submit_job(self, job: Any, run_times: Any) -> None:
        def target() -> None:
            try:
                events = run_job(job, job._jobstore_alias, run_times, self._logger.name)
            except BaseException as error:
                self._run_job_error(job.id, error, error.__traceback__)
            else:
                self._run_job_success(job.id, events)

        threading.Thread(target=target, name=f"observer-job-{job.id}", daemon=True).start()


def background_scheduler() -> Any:
    """A BackgroundScheduler in UTC whose jobs never keep the process alive."""
    return BackgroundScheduler(timezone=UTC, executors={"default": DaemonThreadExecutor()})


# -- one worker shape --------------------------------------------------------------


@dataclass(frozen=True)
class Deadline:
    """A moment on the monotonic clock by which a shutdown ends: every part of a stop
    is handed the same one, so their waits never add up past the grace."""

    at: float

    @classmethod
    def within(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + max(0.0, seconds))

    def left(self) -> float:
        """Seconds until the deadline, never below 0."""
        return max(0.0, self.at - time.monotonic())

    def before(self, seconds: float) -> Deadline:
        """A deadline `seconds` earlier (what is kept for the parts stopped after)."""
        return Deadline(self.at - seconds)

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at


STOP_MOMENT_S = 0.05


def next_wait(more: bool, interval_s: float) -> float:
    """How long a worker waits before its next step: none while work is ready (a step
    said so), else the interval, cut short by a `wake()`."""
    return 0.0 if more else interval_s


class Worker:
    """One daemon thread that runs `step` whenever woken, or every `interval_s`.

    `step()` does one bounded piece of work and returns whether more is ready now.
    The thread never dies of a step's error (logged as `crash_event`, tried again at
    the next step). `stop(deadline)` sets `stopping` (which a long step checks between
    its pieces), wakes the thread and joins it by the deadline: True when it ended, so
    that whatever it uses may be closed; False when a step is still running (inside a
    request), and what it uses must stay open. Idempotent.

    Several workers may share one `wake` event (a pool over one queue)."""

    def __init__(
        self,
        name: str,
        step: Callable[[], bool],
        *,
        interval_s: float,
        crash_event: str,
        wake: threading.Event | None = None,
        stopping: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be above 0")
        self.name = name
        self.step = step
        self.interval_s = interval_s
        self.crash_event = crash_event
        self.wake_event = wake or threading.Event()
        self.stopping = stopping or threading.Event()
        self.clock = clock
        self._beat = clock()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """The thread, once (again after a stop, none)."""
        with self._lock:
            if self._thread is None and not self.stopping.is_set():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def wake(self) -> None:
        """Run a step now. Never blocks."""
        self.wake_event.set()

    def heartbeat_age_s(self) -> float:
        """Seconds since the loop last beat (before and after every step)."""
        return max(0.0, self.clock() - self._beat)

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def _run(self) -> None:
        more = False
        while not self.stopping.is_set():
            wait = next_wait(more, self.interval_s)
            if wait > 0:
                self.wake_event.wait(wait)
                self.wake_event.clear()
            if self.stopping.is_set():
                break
            self._beat = self.clock()
            try:
                more = self.step()
            except Exception:  # the thread never dies; the next step tries again
                log.exception(self.crash_event, worker=self.name)
                more = False
            self._beat = self.clock()

    def stop(self, deadline: Deadline) -> bool:
        """Stop and join by `deadline`; True when the thread ended (or never ran)."""
        self.stopping.set()
        self.wake_event.set()
        thread = self._thread
        if thread is None:
            return True
        # A thread between steps ends at once when woken: past the deadline it still
        # gets that moment, so an idle worker is never reported as abandoned.
        thread.join(max(deadline.left(), STOP_MOMENT_S))
        return not thread.is_alive()
