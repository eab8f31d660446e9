"""The daemon: poll and push until SIGTERM/SIGINT, then stop, join, close in the grace."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import FrameType

import structlog

from observer.alerts.evaluator import AlertEvaluator
from observer.app.checks import require_supported_server
from observer.app.exits import EXIT_OK
from observer.app.once import stop_judge
from observer.app.parts import Parts, start_http
from observer.config import ConfigError
from observer.errors import AuthRejected, RemoteError
from observer.scheduling import background_scheduler
from observer.sources.langfuse import LangfuseSource, Stopped
from observer.state import StateError

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


def run_daemon(parts: Parts, clock: Callable[[], datetime] | None = None) -> int:
    """Poll and push until SIGTERM/SIGINT; then drain, flush, persist, exit 0 in the grace.

    Raises ConfigError when the HTTP port cannot be opened (before anything runs).
    """
    settings = parts.settings
    clock = clock or parts.clock
    server = start_http(settings, parts.metrics, parts.health)
    parts.dispatcher.start()
    # Window rules on their own thread: a catch-up after a gap never holds a pass.
    evaluator = parts.evaluator = AlertEvaluator(
        parts.alerts, interval_s=settings.source.poll_interval_s
    )
    evaluator.start()
    if parts.judge is not None:
        parts.judge.start()
    busy = threading.Lock()
    refused: list[str] = []  # why the server cannot be used (too old), once checked
    checked = not isinstance(parts.source, LangfuseSource)

    def poll_tick() -> None:
        nonlocal checked
        if parts.stop.is_set() or not busy.acquire(blocking=False):
            return
        try:
            parts.health.beat()
            if not checked:
                # Batch score posts need v4.59+: refused before anything is read, on the
                # poll thread, so a hanging health request never outlives a SIGTERM.
                try:
                    require_supported_server(settings)
                except ConfigError as error:
                    log.error("server_refused", error=str(error))
                    refused.append(str(error))
                    parts.stop.set()
                    return
                checked = True
            if parts.health.not_ready_because and not state_writable_again():
                return  # no new traces while nothing can be recorded
            moment = clock()
            result = parts.pipeline.poll(moment)
            parts.health.langfuse_answered()
            watermark = parts.state.watermark()
            lag = (moment - watermark).total_seconds() if watermark is not None else 0.0
            evaluator.after_pass(moment, max(0.0, lag))  # a small insert and a nudge
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
            busy.release()

    def state_writable_again() -> bool:
        try:
            parts.state.check_writable(clock())
        except StateError:
            return False
        parts.health.not_ready_because = None
        log.info("state_writable_again", action="polling resumed")
        return True

    def housekeeping() -> None:
        watermark = parts.state.watermark()
        if watermark is not None:
            keep = timedelta(seconds=settings.source.overlap_s) + timedelta(days=1)
            pruned = parts.state.prune_traces(watermark - keep)
            if pruned:
                log.info("fingerprints_pruned", count=pruned)
        history = parts.alerts.prune(clock())
        if history:
            log.info("history_pruned", rows=history)
        parts.dispatcher.notify()

    scheduler = background_scheduler()
    scheduler.add_job(
        poll_tick,
        "interval",
        seconds=settings.source.poll_interval_s,
        next_run_time=datetime.now(UTC),
        max_instances=1,
        coalesce=True,
        id="poll",
    )
    scheduler.add_job(
        housekeeping,
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
        # Stop, join, close, in that order, within the grace. A pass in flight sees
        # `stop` between pages and hands back the rest; one stuck inside a request is
        # abandoned (its thread is a daemon), and the state is not closed under it.
        scheduler.shutdown(wait=False)
        joined = busy.acquire(timeout=max(0.0, deadline - time.monotonic()))
        if not joined:
            log.warning("poll_abandoned", reason="still inside a request at the grace's end")
        # In-flight judging gets half of what is left; unjudged samples are not retried.
        stop_judge(parts, max(0.1, (deadline - time.monotonic()) / 2))
        flushed = parts.dispatcher.shutdown(max(0.5, deadline - time.monotonic()))
        evaluated = evaluator.shutdown(max(0.1, deadline - time.monotonic()))
        parts.alerts.shutdown(max(0.5, deadline - time.monotonic()))
        parts.telemetry.shutdown(max(0.5, deadline - time.monotonic()))
        left = parts.state.outbox_size()
        if joined and evaluated:
            parts.close()
        else:
            parts.leave_open()
        if server is not None:
            server.stop()
    log.info("observer_stopped", flushed=flushed, outbox_left=left)
    if refused:
        raise ConfigError(refused[0])
    return EXIT_OK
