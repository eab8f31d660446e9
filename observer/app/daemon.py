"""The daemon: poll and push until SIGTERM/SIGINT, then the one stop within the grace.

`Daemon` holds the loop's jobs (`tick`, the poll; `housekeeping`), each callable on
its own: tests drive one tick with a fake clock; `run_daemon` puts them on the parts'
schedule (observer.background.Schedule, beside the judge's checks) and ends with
`Parts.stop(deadline)`.

With `[fleet]` the parts are built in mode "member" (observer.app.parts: Redis
connected first, unreachable: exit 3 naming the variable) and the member does the
polling and scoring on its own threads and jobs (observer.fleet.member); `tick` then only
checks the server, once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import FrameType

import structlog

from observer.app.builders import start_http
from observer.app.exits import EXIT_OK
from observer.app.parts import Parts
from observer.background import Deadline
from observer.config import ConfigError
from observer.failures import PassOutcome, classify, said
from observer.state import StateError, StateGone

log = structlog.get_logger("observer.app")

SIGNAL_CHECK_S = 0.5  # how often the main thread wakes to run a pending signal's handler


@contextmanager
def signals_set(stop: threading.Event) -> Iterator[None]:
    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("shutdown_requested", signal=signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class Daemon:
    """The daemon's jobs, apart: `start()` the threads, `tick()` one poll,
    `housekeeping()`; `run_daemon` schedules them until a signal, then the parts' one
    stop (`Parts.stop`).

    `tick` and `housekeeping` never raise (the loop never dies on a strange trace or a
    bug). With a fleet member among the parts, its own threads read and score: `tick`
    then only checks the server, once."""

    def __init__(self, parts: Parts, clock: Callable[[], datetime] | None = None) -> None:
        self.parts = parts
        self.clock = clock or parts.clock  # "now" for each pass (a test's fake clock)
        self.refused: list[str] = []  # why the server cannot be used (too old), once checked

    def start(self) -> None:
        """The HTTP port, the dispatcher, the receiver, the fleet member, the rules'
        evaluator and the judge's workers.

        Raises ConfigError when the HTTP port cannot be opened (before anything runs)."""
        parts = self.parts
        parts.http = start_http(parts.settings, parts.metrics, parts.health)
        parts.dispatcher.start()
        if parts.receiver is not None:
            parts.receiver.start()
        if parts.member is not None:
            parts.member.start(parts.schedule)
        parts.evaluator.start()
        if parts.judge is not None:
            parts.judge.start()

    def tick(self) -> None:
        """One poll: the traces settled since the watermark scored, the pass recorded; what
        stopped it said once, and a state file that cannot be written holds the polls."""
        parts = self.parts
        if parts.stopping.is_set():
            return
        parts.health.beat()
        try:
            # On the poll's thread, so a hanging health request never outlives a SIGTERM.
            parts.passes.check()
        except ConfigError as error:
            log.error("server_refused", error=str(error))
            self.refused.append(str(error))
            parts.stopping.set()
            return
        except Exception as error:  # the clock is Langfuse's: not asked again here
            said(PassOutcome(datetime.now(UTC), None, classify(error), error))
            return
        if parts.member is not None:
            return  # the fleet member's own threads read and score
        if parts.settings.otlp.alone:
            # The OTLP receiver alone: nothing is read from Langfuse, and nothing lags. The
            # rules still evaluate, those on traces up to the receiver's mark.
            parts.evaluator.after_pass(self.clock(), 0.0)
            return
        if parts.health.held("state") and not self._state_writable_again():
            return  # no new traces while nothing can be recorded
        outcome = parts.passes.tick(clock=self.clock)
        if outcome.failure == "state":
            self._hold_state(outcome.error)
        else:
            said(outcome)

    def _hold_state(self, error: BaseException | None) -> None:
        """Disk full or read-only, deleted or replaced: the outbox keeps what it holds; new
        traces wait until the state file can be written again."""
        gone = isinstance(error, StateGone)
        why = str(error) if gone else "the state file cannot be written"
        self.parts.health.hold("state", why)
        log.error("state_unwritable", error=str(error), action="polling paused")

    def _state_writable_again(self) -> bool:
        try:
            self.parts.state.check_writable(self.clock())
            # A full disk's WAL keeps the space it took until truncated: give it back.
            self.parts.state.checkpoint()
        except StateError as error:
            log.error("state_unwritable", error=str(error), action="polling paused")
            return False
        self.parts.health.release("state")
        log.info("state_writable_again", action="polling resumed")
        return True

    def housekeeping(self) -> None:
        """Fingerprints and history past their keeping pruned; the dispatcher nudged."""
        parts = self.parts
        member = parts.member
        watermark = parts.state.scored_through() if member is None else member.watermark()
        if watermark is not None:
            keep = timedelta(seconds=parts.settings.source.overlap_s) + timedelta(days=1)
            pruned = parts.state.prune_traces(watermark - keep)
            if pruned:
                log.info("fingerprints_pruned", count=pruned)
        history = parts.alerts.prune(self.clock())
        if history:
            log.info("history_pruned", rows=history)
        parts.dispatcher.notify()


def run_daemon(parts: Parts) -> int:
    """Poll and push until SIGTERM/SIGINT; then drain, flush, persist, exit 0 in the grace.

    Raises ConfigError when the HTTP port cannot be opened (before anything runs), or
    when the Langfuse server is too old (after the shutdown).
    """
    settings = parts.settings
    daemon = Daemon(parts)
    daemon.start()
    schedule = parts.schedule
    schedule.every(
        "poll",
        daemon.tick,
        settings.source.poll_interval_s,
        crash_event="poll_crashed",
        at_once=True,
    )
    schedule.every(
        "housekeeping",
        daemon.housekeeping,
        settings.run.housekeeping_interval_s,
        crash_event="housekeeping_failed",
    )
    for check in parts.judge_checks:  # the first look at start, then on its schedule
        schedule.add(check)
    with signals_set(parts.stopping):
        schedule.start()
        log.info(
            "observer_started",
            poll_interval_s=settings.source.poll_interval_s,
            state=str(parts.state.path),
        )
        # Woken now and then: a signal the kernel delivers to another thread does not
        # interrupt the main thread's wait, and Python runs its handler only on the main
        # thread once that thread runs again (a wait without end missed SIGTERM for good).
        while not parts.stopping.wait(SIGNAL_CHECK_S):
            pass
        flushed, left = parts.stop(Deadline.within(settings.run.shutdown_grace_s))
    log.info("observer_stopped", flushed=flushed, outbox_left=left)
    if daemon.refused:
        raise ConfigError(daemon.refused[0])
    return EXIT_OK
