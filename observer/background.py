"""Background threads: one scheduler for time, one worker shape for queues.

Every periodic job (the poll, housekeeping, the judge's agreement read and canary,
a fleet member's keeper and follower) is an apscheduler job on a `Schedule`; every
part that works through a queue or is woken by an event (the score dispatcher, each
notifier's lane, the judge's workers, a fleet member's reader and worker) is a
`Worker`: a loop around one bounded `step`, woken or on an interval. Both are
stopped by a `Deadline` that the whole shutdown shares.

apscheduler's own thread pool is `concurrent.futures`', whose workers the
interpreter joins at exit: a poll stuck in a 30 s request would hold a stopping
daemon past its grace period. The `Schedule` hands apscheduler a pool
(`DaemonThreads`, through apscheduler's public `BasePoolExecutor`) that runs each
job in a daemon thread of its own, so a stop joins the jobs in flight by the
deadline and abandons the rest (the state file stays consistent: every write is
one SQLite transaction).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from apscheduler.executors.pool import BasePoolExecutor  # type: ignore[import-untyped]
from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]
from apscheduler.util import undefined  # type: ignore[import-untyped]

log = structlog.get_logger("observer")


class DaemonThreads(Executor):
    """A `concurrent.futures` pool whose every task is a daemon thread of its own."""

    def __init__(self) -> None:
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()

        def run() -> None:
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(*args, **kwargs))
                    except BaseException as error:
                        future.set_exception(error)
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        thread = threading.Thread(target=run, name="observer-job", daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()
        return future

    def join(self, deadline: Deadline) -> bool:
        """Every task in flight joined by `deadline`: True when none is left running."""
        with self._lock:
            running = list(self._threads)
        for thread in running:
            thread.join(max(deadline.left(), STOP_MOMENT_S))
        return not any(thread.is_alive() for thread in running)


class _DaemonThreadExecutor(BasePoolExecutor):  # type: ignore[misc]
    """apscheduler's pool executor over `DaemonThreads` (its __init__ is abstract)."""

    def __init__(self, threads: DaemonThreads) -> None:
        super().__init__(threads)


@dataclass(frozen=True)
class Periodic:
    """A job run every `interval_s` on a `Schedule` (the first run at its start)."""

    name: str
    run: Callable[[], object]
    interval_s: float
    crash_event: str


class Schedule:
    """The periodic jobs of a process: `every(...)` adds one, `start()` runs them,
    `stop(deadline)` ends the schedule and joins the jobs in flight by the deadline.

    A job never runs twice at once (a run still going when the next is due is
    skipped, and late runs are coalesced into one); a job's error is logged as
    its `crash_event` and the next run tries again."""

    def __init__(self) -> None:
        self.threads = DaemonThreads()
        self._scheduler = BackgroundScheduler(
            timezone=UTC, executors={"default": _DaemonThreadExecutor(self.threads)}
        )
        self._started = False

    def every(
        self,
        name: str,
        job: Callable[[], object],
        interval_s: float,
        *,
        crash_event: str,
        at_once: bool = False,
    ) -> None:
        def run() -> None:
            try:
                job()
            except Exception:  # the job runs again at its next time
                log.exception(crash_event, job=name)

        self._scheduler.add_job(
            run,
            "interval",
            seconds=interval_s,
            # Not at once: one interval after the start (apscheduler's default; None pauses).
            next_run_time=datetime.now(UTC) if at_once else undefined,
            max_instances=1,
            coalesce=True,
            # However late (a busy machine, a long pause): the job still runs, once.
            # apscheduler's default of 1 s skipped it, and a fleet keeper skipped in a
            # row lets its lease lapse.
            misfire_grace_time=None,
            id=name,
        )

    def add(self, job: Periodic) -> None:
        """`job` every its interval, the first run at the start."""
        self.every(job.name, job.run, job.interval_s, crash_event=job.crash_event, at_once=True)

    def start(self) -> None:
        self._scheduler.start()
        self._started = True

    def stop(self, deadline: Deadline) -> bool:
        """No job starts any more; True when every job in flight ended by `deadline`."""
        if self._started:
            self._scheduler.shutdown(wait=False)
            self._started = False
        return self.threads.join(deadline)


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
            if not more:  # no wait while a step said more is ready; a `wake()` cuts it short
                self.wake_event.wait(self.interval_s)
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
