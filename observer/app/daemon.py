"""The daemon: poll and push until SIGTERM/SIGINT, then stop, join, close in the grace.

`Daemon` holds the loop's parts (`tick`, `housekeeping`, `shutdown(deadline)`), each
callable on its own: tests drive one tick with a fake clock; `run_daemon` schedules them.

With `[fleet]` the parts are built in mode "member" (observer.app.parts: Redis
connected first, unreachable: exit 3 naming the variable) and the member does the
polling and scoring on its own threads (observer.fleet.member); `tick` then only
checks the server, once.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import FrameType

import structlog

from observer.app.exits import EXIT_OK
from observer.app.parts import Parts, start_http
from observer.background import Deadline, background_scheduler
from observer.config import ConfigError
from observer.errors import AuthRejected, RemoteError
from observer.sources.langfuse import Stopped
from observer.state import StateError, StateGone
from observer.telemetry.http import HttpServer

log = structlog.get_logger("observer.app")


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
    """The daemon's loop, its parts apart: `start()` the threads, `tick()` one poll,
    `housekeeping()`, `shutdown(deadline)`; `run_daemon` schedules them until a signal.

    `tick` and `housekeeping` never raise (the loop never dies on a strange trace or a
    bug); `tick` returns at once while a tick is in flight or after the stop. With a
    fleet member among the parts, its own threads read and score: `tick` then only
    checks the server, once."""

    def __init__(self, parts: Parts, clock: Callable[[], datetime] | None = None) -> None:
        self.parts = parts
        self.clock = clock or parts.clock  # "now" for each pass (a test's fake clock)
        self.server: HttpServer | None = None
        self.refused: list[str] = []  # why the server cannot be used (too old), once checked
        self._busy = threading.Lock()

    def start(self) -> None:
        """The HTTP port, the dispatcher, the fleet member, the rules' evaluator and the
        judge's workers.

        Raises ConfigError when the HTTP port cannot be opened (before anything runs)."""
        parts = self.parts
        self.server = start_http(parts.settings, parts.metrics, parts.health)
        parts.dispatcher.start()
        if parts.receiver is not None:
            parts.receiver.start()
        if parts.member is not None:
            parts.member.start()
        parts.evaluator.start()
        if parts.judge is not None:
            parts.judge.start()
        for check in parts.judge_checks:
            check.start()
            check.wake()  # the first look at start, then on its schedule

    def tick(self) -> None:
        """One poll: the traces settled since the watermark scored, the pass recorded."""
        parts = self.parts
        if parts.stop.is_set() or not self._busy.acquire(blocking=False):
            return
        try:
            parts.health.beat()
            try:
                # On the poll thread, so a hanging health request never outlives a SIGTERM.
                parts.passes.check()
            except ConfigError as error:
                log.error("server_refused", error=str(error))
                self.refused.append(str(error))
                parts.stop.set()
                return
            if parts.member is not None:
                return  # the fleet member's own threads read and score
            if parts.settings.otlp.on and parts.settings.otlp.poller == "off":
                return  # the OTLP receiver alone: nothing is read from Langfuse
            if parts.health.not_ready_because and not self._state_writable_again():
                return  # no new traces while nothing can be recorded
            parts.passes.tick(self.clock())
        except Stopped:
            pass
        except StateError as error:
            # Disk full or read-only, deleted or replaced: the outbox keeps what it holds;
            # new traces wait.
            gone = isinstance(error, StateGone)
            parts.health.not_ready_because = (
                str(error) if gone else "the state file cannot be written"
            )
            log.error("state_unwritable", error=str(error), action="polling paused")
        except AuthRejected as error:
            log.error("poll_failed", kind="auth", error=str(error))
        except RemoteError as error:
            log.warning("poll_failed", kind="unreachable", error=str(error))
        except Exception:  # the loop never dies on a strange trace or a bug
            log.exception("poll_crashed")
        finally:
            self._busy.release()

    def _state_writable_again(self) -> bool:
        try:
            self.parts.state.check_writable(self.clock())
            # A full disk's WAL keeps the space it took until truncated: give it back.
            self.parts.state.checkpoint()
        except StateError as error:
            log.error("state_unwritable", error=str(error), action="polling paused")
            return False
        self.parts.health.not_ready_because = None
        log.info("state_writable_again", action="polling resumed")
        return True

    def housekeeping(self) -> None:
        """Fingerprints and history past their keeping pruned; the dispatcher nudged."""
        parts = self.parts
        member = parts.member
        watermark = parts.state.watermark() if member is None else member.watermark()
        if watermark is not None:
            keep = timedelta(seconds=parts.settings.source.overlap_s) + timedelta(days=1)
            pruned = parts.state.prune_traces(watermark - keep)
            if pruned:
                log.info("fingerprints_pruned", count=pruned)
        history = parts.alerts.prune(self.clock())
        if history:
            log.info("history_pruned", rows=history)
        parts.dispatcher.notify()

    def shutdown(self, deadline: Deadline) -> tuple[bool, int]:
        """Stop every part by `deadline`, in an order where none is closed under a thread
        that still uses it: whether the outbox was flushed, and how many scores it holds.

        The pass in flight sees `stop` between pages and hands back the rest; the fleet
        member leaves; in-flight judging gets half of what is left; the outbox is flushed
        until a reserve before the deadline, which the evaluator, the notifiers and
        telemetry share. A thread still inside a request at the deadline is abandoned
        (each is a daemon thread), and the state file is then left open under it: no
        transaction is cut, and the process ends by the deadline."""
        parts = self.parts
        parts.stop.set()
        reserve = min(3.0, parts.settings.run.shutdown_grace_s / 4)
        # Spans no longer taken (503, the sender retries elsewhere or later); what is in
        # assembly is the poller's backstop's after a restart.
        received = parts.receiver is None or parts.receiver.stop(deadline.before(reserve))
        ended = self._busy.acquire(timeout=deadline.before(reserve).left())
        if not ended:
            log.warning("poll_abandoned", reason="still inside a request at the grace's end")
        ended = ended and received
        if parts.member is not None:  # no new entries; the lease given up for the next reader
            ended = parts.member.shutdown(deadline.before(reserve)) and ended
        if parts.judge is not None:
            halfway = Deadline(time.monotonic() + max(0.0, deadline.left() - reserve) / 2)
            if not parts.judge.shutdown(halfway):
                log.warning("judge_abandoned", pending=parts.judge.pending())
            ended = parts.judge.ended and ended
        for check in parts.judge_checks:  # a read in flight writes one sample; a canary stops
            ended = check.stop(deadline.before(reserve)) and ended
        flushed, sent = parts.dispatcher.shutdown(deadline.before(reserve))
        ended = parts.evaluator.shutdown(deadline) and sent and ended
        parts.alerts.shutdown(deadline)
        ended = parts.alerts.ended and ended
        parts.telemetry.shutdown(deadline.left())
        left = parts.state.outbox_size()  # a read: the state stays open under a late thread
        if ended:
            parts.close()
        else:
            parts.leave_open()
        if self.server is not None:
            self.server.stop()
        return flushed, left


def run_daemon(parts: Parts) -> int:
    """Poll and push until SIGTERM/SIGINT; then drain, flush, persist, exit 0 in the grace.

    Raises ConfigError when the HTTP port cannot be opened (before anything runs), or
    when the Langfuse server is too old (after the shutdown).
    """
    settings = parts.settings
    daemon = Daemon(parts)
    daemon.start()
    scheduler = background_scheduler()
    scheduler.add_job(
        daemon.tick,
        "interval",
        seconds=settings.source.poll_interval_s,
        next_run_time=datetime.now(UTC),
        max_instances=1,
        coalesce=True,
        id="poll",
    )
    scheduler.add_job(
        daemon.housekeeping,
        "interval",
        seconds=settings.run.housekeeping_interval_s,
        max_instances=1,
        coalesce=True,
        id="housekeeping",
    )
    with signals_set(parts.stop):
        scheduler.start()
        log.info(
            "observer_started",
            poll_interval_s=settings.source.poll_interval_s,
            state=str(parts.state.path),
        )
        parts.stop.wait()
        deadline = Deadline.within(settings.run.shutdown_grace_s)
        scheduler.shutdown(wait=False)
        flushed, left = daemon.shutdown(deadline)
    log.info("observer_stopped", flushed=flushed, outbox_left=left)
    if daemon.refused:
        raise ConfigError(daemon.refused[0])
    return EXIT_OK
