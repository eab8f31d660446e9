"""The daemon: poll and push until SIGTERM/SIGINT, then stop, join, close in the grace.

`Daemon` holds the loop's parts (`tick`, `housekeeping`, `shutdown(deadline)`), each
callable on its own: tests drive one tick with a fake clock; `run_daemon` schedules them.

With `[fleet]` (docs/operating.md) `run_daemon` connects to Redis first (unreachable: exit 3
naming the variable) and the daemon's `member` does the polling and scoring on its own
threads (observer.fleet.member); `tick` then only checks the server, once.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import TYPE_CHECKING

import structlog

from observer.alerts.evaluator import AlertEvaluator
from observer.app.checks import require_supported_server
from observer.app.exits import EXIT_OK, EXIT_UNREACHABLE
from observer.app.once import stop_judge
from observer.app.parts import Parts, start_http
from observer.config import ConfigError
from observer.errors import AuthRejected, RemoteError
from observer.scheduling import background_scheduler
from observer.sources.langfuse import LangfuseSource, Stopped
from observer.state import StateError
from observer.telemetry.http import HttpServer

if TYPE_CHECKING:
    from observer.fleet.member import Member

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
    bug); `tick` returns at once while a tick is in flight or after the stop."""

    def __init__(self, parts: Parts, clock: Callable[[], datetime] | None = None) -> None:
        self.parts = parts
        self.clock = clock or parts.clock
        # Window rules on their own thread: a catch-up after a gap never holds a pass.
        self.evaluator = parts.evaluator = AlertEvaluator(
            parts.alerts, interval_s=parts.settings.source.poll_interval_s
        )
        self.server: HttpServer | None = None
        self.member: Member | None = None  # with [fleet]: this process's part of the fleet
        self.refused: list[str] = []  # why the server cannot be used (too old), once checked
        self._busy = threading.Lock()
        self._checked = not isinstance(parts.source, LangfuseSource)

    def start(self) -> None:
        """The HTTP port, the dispatcher, the rules' evaluator and the judge's workers.

        Raises ConfigError when the HTTP port cannot be opened (before anything runs)."""
        parts = self.parts
        self.server = start_http(parts.settings, parts.metrics, parts.health)
        parts.dispatcher.start()
        if self.member is not None:
            self.member.start()
        self.evaluator.start()
        if parts.judge is not None:
            parts.judge.start()

    def tick(self) -> None:
        """One poll: the traces settled since the watermark scored, the pass recorded."""
        parts = self.parts
        if parts.stop.is_set() or not self._busy.acquire(blocking=False):
            return
        try:
            parts.health.beat()
            if not self._checked:
                # Batch score posts need v4.59+: refused before anything is read, on the
                # poll thread, so a hanging health request never outlives a SIGTERM.
                try:
                    require_supported_server(parts.settings)
                except ConfigError as error:
                    log.error("server_refused", error=str(error))
                    self.refused.append(str(error))
                    parts.stop.set()
                    return
                self._checked = True
            if self.member is not None:
                return  # the fleet member's own threads read and score
            if parts.health.not_ready_because and not self._state_writable_again():
                return  # no new traces while nothing can be recorded
            moment = self.clock()
            result = parts.pipeline.poll(moment)
            parts.health.langfuse_answered()
            watermark = parts.state.watermark()
            lag = (moment - watermark).total_seconds() if watermark is not None else 0.0
            self.evaluator.after_pass(moment, max(0.0, lag))  # a small insert and a nudge
            log.info(
                "poll_completed",
                sweep=result.sweep,
                observations=result.observations,
                scored=result.scored,
                rescored=result.rescored,
                unchanged=result.unchanged,
                unsettled=result.unsettled,
                skipped=result.skipped,
                scores=result.scores,
                outbox=parts.state.outbox_size(),
            )
        except Stopped:
            pass
        except StateError as error:
            # Disk full or read-only: what is in the outbox stays; new traces wait.
            parts.health.not_ready_because = "the state file cannot be written"
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
        except StateError:
            return False
        self.parts.health.not_ready_because = None
        log.info("state_writable_again", action="polling resumed")
        return True

    def housekeeping(self) -> None:
        """Fingerprints and history past their keeping pruned; the dispatcher nudged."""
        parts = self.parts
        watermark = parts.state.watermark() if self.member is None else self.member.watermark()
        if watermark is not None:
            keep = timedelta(seconds=parts.settings.source.overlap_s) + timedelta(days=1)
            pruned = parts.state.prune_traces(watermark - keep)
            if pruned:
                log.info("fingerprints_pruned", count=pruned)
        history = parts.alerts.prune(self.clock())
        if history:
            log.info("history_pruned", rows=history)
        parts.dispatcher.notify()

    def shutdown(self, deadline: float) -> tuple[bool, int]:
        """Stop, join, close, in that order, by `deadline` (time.monotonic()): whether the
        outbox was flushed, and how many scores it still holds.

        A pass in flight sees `stop` between pages and hands back the rest; one stuck
        inside a request is abandoned (its thread is a daemon), and the state is not
        closed under it."""
        parts = self.parts
        parts.stop.set()
        joined = self._busy.acquire(timeout=max(0.0, deadline - time.monotonic()))
        if not joined:
            log.warning("poll_abandoned", reason="still inside a request at the grace's end")
        if self.member is not None:  # no new entries; the lease given up for the next reader
            joined = self.member.shutdown(deadline - 1.0) and joined
        # In-flight judging gets half of what is left; unjudged samples are not retried.
        stop_judge(parts, max(0.1, (deadline - time.monotonic()) / 2))
        flushed = parts.dispatcher.shutdown(max(0.5, deadline - time.monotonic()))
        evaluated = self.evaluator.shutdown(max(0.1, deadline - time.monotonic()))
        parts.alerts.shutdown(max(0.5, deadline - time.monotonic()))
        parts.telemetry.shutdown(max(0.5, deadline - time.monotonic()))
        left = parts.state.outbox_size()
        if joined and evaluated:
            parts.close()
        else:
            parts.leave_open()
        if self.server is not None:
            self.server.stop()
        return flushed, left


def run_daemon(parts: Parts, clock: Callable[[], datetime] | None = None) -> int:
    """Poll and push until SIGTERM/SIGINT; then drain, flush, persist, exit 0 in the grace.

    Raises ConfigError when the HTTP port cannot be opened (before anything runs), or
    when the Langfuse server is too old (after the shutdown).
    """
    settings = parts.settings
    daemon = Daemon(parts, clock)
    if settings.fleet is not None:
        from observer.fleet.connect import FleetUnreachable, connect
        from observer.fleet.member import Member

        try:
            daemon.member = Member(parts, connect(settings))
        except FleetUnreachable as error:
            log.error("fleet_unreachable", error=str(error))
            sys.stderr.write(f"observer: {error}\n")
            return EXIT_UNREACHABLE
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
        deadline = time.monotonic() + settings.run.shutdown_grace_s
        scheduler.shutdown(wait=False)
        flushed, left = daemon.shutdown(deadline)
    log.info("observer_stopped", flushed=flushed, outbox_left=left)
    if daemon.refused:
        raise ConfigError(daemon.refused[0])
    return EXIT_OK
