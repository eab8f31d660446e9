"""One-shot runs: `run --once` (one pass up to now) and `backfill` (a past window,
chunk by chunk).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from observer.app.exits import EXIT_AUTH, EXIT_CONFIG, EXIT_OK, EXIT_UNREACHABLE, exit_code
from observer.app.parts import Parts
from observer.background import Deadline
from observer.errors import AuthRejected, RemoteError
from observer.pipeline import PassResult
from observer.sources.langfuse import Stopped

log = structlog.get_logger("observer.app")


@dataclass
class OnceResult:
    exit_code: int
    passed: PassResult | None
    undelivered: int
    error: str | None = None
    # Scores the outbox held when the command began (an earlier run's): delivered with
    # this run's, so what it delivered is at most these and what it queued.
    waiting: int = 0


def run_once(
    parts: Parts, now: datetime | None = None, window_start: datetime | None = None
) -> OnceResult:
    """One pass up to now (every trace older than the settle delay), push, flush.

    With `window_start`, that whole window is read instead of the one after the
    watermark (the demo), and the watermark is not touched. Telemetry is flushed
    before it returns.
    """
    try:
        return _run_once(parts, now, window_start)
    finally:
        _flush_telemetry(parts)


def _flush_telemetry(parts: Parts) -> None:
    """Spans and metrics out before the process ends; a dead collector costs at most 5 s.
    The chunk store's client is closed too (a Milvus Lite file is one process's at a time)."""
    parts.telemetry.shutdown(min(5.0, parts.settings.run.shutdown_grace_s))
    parts.close_resolver()


def _run_once(parts: Parts, now: datetime | None, window_start: datetime | None) -> OnceResult:
    grace = parts.settings.run.shutdown_grace_s
    waiting = parts.state.outbox_size()  # an earlier run's, delivered with this one's
    try:
        # First contact (Langfuse, the state file's project): within
        # source.first_contact_s, before anything is read or judged.
        parts.passes.check()
    except RemoteError as error:
        if parts.stop.is_set():  # SIGTERM or Ctrl-C while Langfuse was being reached
            code = EXIT_UNREACHABLE if waiting else EXIT_OK
            return OnceResult(code, None, waiting, "stopped before it read anything", waiting)
        return OnceResult(exit_code(error), None, waiting, str(error), waiting)
    if parts.judge is not None:
        parts.judge.start()
    try:
        if window_start is None:
            # The daemon's own pass in burst: its window rules evaluated before it returns.
            result = parts.passes.tick(now, burst=True)
        else:
            now = now or parts.clock()
            result = parts.pipeline.process_window(window_start, now, now)
    except RemoteError as error:
        stop_judge(parts, Deadline.within(grace))
        parts.dispatcher.flush(grace)
        return OnceResult(exit_code(error), None, parts.state.outbox_size(), str(error), waiting)
    # SIGTERM or Ctrl-C: what is in hand delivered within the grace, then the exit.
    judging = 0.0 if parts.stop.is_set() else parts.settings.judge.timeout_s * 4
    stop_judge(parts, Deadline.within(judging + grace))
    deadline = Deadline.within(grace)
    parts.dispatcher.flush(grace)
    # Notifications got their own threads at once; they share what is left of the grace.
    parts.evaluator.shutdown(deadline)
    if not parts.alerts.shutdown(deadline):
        log.warning("alert_notifications_undelivered")
    left = parts.state.outbox_size()
    said = STOPPED_MESSAGE if result.cut_short else None
    if left:
        code = EXIT_AUTH if parts.dispatcher.auth_failed else EXIT_UNREACHABLE
        if parts.dispatcher.last_error_kind == "misdirected":
            code = EXIT_CONFIG  # the base URL is redirected away: a configuration error
        message = undelivered_message(parts, left)
        return OnceResult(code, result, left, f"{said}; {message}" if said else message, waiting)
    return OnceResult(EXIT_OK, result, 0, said, waiting=waiting)


STOPPED_MESSAGE = (
    "stopped before the end of the window: what it read is scored and delivered, and the "
    "next run reads on from there"
)


def budget_held(parts: Parts) -> bool:
    """Whether the request budget is what held delivery back: the last push was refused
    with a 429, or no push failed and requests waited for the budget's pace."""
    if parts.budget is None:
        return False
    kind = parts.dispatcher.last_error_kind
    return kind == "rate_limited" or (kind is None and parts.budget.waited_s > 0)


def undelivered_message(parts: Parts, left: int) -> str:
    """What happened to the scores still in the outbox: the request budget held them
    back, they were refused, or not sent in time."""
    kept = f"{left:,} {'score' if left == 1 else 'scores'} kept in the outbox for the next run"
    if parts.budget is not None and budget_held(parts):
        refused = (
            f" (last push: {parts.dispatcher.last_error})" if parts.dispatcher.last_error else ""
        )
        return (
            f"{kept}: the request budget held delivery back, at "
            f"{parts.budget.describe()}{refused}; the next run or the daemon goes on "
            "(docs/daemon.md, the request budget)"
        )
    if parts.dispatcher.last_error:
        return f"{kept}: Langfuse did not accept them ({parts.dispatcher.last_error})"
    grace = parts.settings.run.shutdown_grace_s
    return f"{kept}: not all sent before the grace of {grace:g} s ran out (run.shutdown_grace_s)"


def stop_judge(parts: Parts, deadline: Deadline) -> None:
    if parts.judge is not None and not parts.judge.shutdown(deadline):
        log.warning("judge_abandoned", pending=parts.judge.pending())


# -- backfill -------------------------------------------------------------------


def backfill(
    parts: Parts,
    start: datetime,
    end: datetime,
    chunk: timedelta,
    progress: Callable[[datetime, PassResult], None] = lambda _at, _result: None,
) -> OnceResult:
    """The pipeline over a past window, chunk by chunk (sized by what the chunks before
    held); the watermark is not touched.

    Stopped (or failed) in the middle of a chunk, the result counts what that chunk did
    so far, and `progress` was last told the end of the chunk before it: the chunk is
    read again from its start by the next run (what it handled is then unchanged)."""
    try:
        return _backfill(parts, start, end, chunk, progress)
    finally:
        _flush_telemetry(parts)


MAX_BACKFILL_CHUNK = timedelta(days=1)


def _backfill(
    parts: Parts,
    start: datetime,
    end: datetime,
    chunk: timedelta,
    progress: Callable[[datetime, PassResult], None],
) -> OnceResult:
    waiting = parts.state.outbox_size()  # before the dispatcher sends any of it
    try:
        parts.passes.check()  # first contact, as run --once's
    except RemoteError as error:
        return OnceResult(exit_code(error), None, waiting, str(error), waiting)
    parts.dispatcher.start()
    if parts.judge is not None:
        parts.judge.start()
    totals = PassResult(start, end)
    cursor = start
    size = chunk
    light = parts.settings.source.page_limit // 2
    result = PassResult(start, start)  # the chunk in hand; counted as it goes
    try:
        now = parts.clock()
        while cursor < end and not parts.stop.is_set():
            chunk_end = min(end, cursor + size)
            # Read on past the chunk: the children of a trace rooted just before its end.
            read_until = chunk_end + timedelta(seconds=parts.settings.source.overlap_s)
            result = PassResult(cursor, chunk_end)
            parts.pipeline.process_window(cursor, chunk_end, now, read_until, result=result)
            if result.cut_short:
                break  # a stop in the middle of the chunk: counted below, not done
            if result.deferred:
                # The outbox was full: wait for room, then read the chunk again (what was
                # recorded is unchanged the second time). Never done with a trace unscored.
                _wait_for_outbox_room(parts)
                continue
            totals.add(result)
            cursor = chunk_end
            progress(cursor, totals)
            # A chunk costs a request however little it holds: after a light one the next
            # is twice as long (an empty week is a dozen requests, not 168), after a heavy
            # one half, never below the chunk asked for nor above a day (or that chunk).
            if result.observations < light:
                size = min(size * 2, max(chunk, MAX_BACKFILL_CHUNK))
            elif result.observations > 4 * parts.settings.source.page_limit:
                size = max(size / 2, chunk)
            result = PassResult(cursor, cursor)  # counted in the totals: none in hand
        if cursor < end:
            raise Stopped()
    except (RemoteError, Stopped) as error:
        # What the chunk cut short did: its traces recorded, their scores queued.
        totals.add(result)
        totals.cut_short = result.observations > 0
        stop_judge(parts, Deadline.within(parts.settings.run.shutdown_grace_s))
        parts.dispatcher.shutdown(Deadline.within(parts.settings.run.shutdown_grace_s))
        left = parts.state.outbox_size()
        # A stop asked for while a request was retried ends it with that request's error.
        if isinstance(error, Stopped) or parts.stop.is_set():
            return OnceResult(EXIT_OK, totals, left, "stopped", waiting)
        return OnceResult(exit_code(error), totals, left, str(error), waiting)
    stop_judge(parts, Deadline.within(parts.settings.run.shutdown_grace_s))
    flushed, _ended = parts.dispatcher.shutdown(
        Deadline.within(parts.settings.run.shutdown_grace_s)
    )
    left = parts.state.outbox_size()
    if not flushed and left:
        return OnceResult(EXIT_UNREACHABLE, totals, left, undelivered_message(parts, left), waiting)
    return OnceResult(EXIT_OK, totals, 0, waiting=waiting)


def _wait_for_outbox_room(parts: Parts) -> None:
    """Until the outbox is half empty (the dispatcher sends meanwhile), or a stop."""
    room = parts.state.max_outbox // 2
    log.warning(
        "backfill_waiting",
        reason="outbox_full",
        outbox=parts.state.outbox_size(),
        until_below=room,
    )
    while parts.state.outbox_size() > room and not parts.stop.wait(0.2):
        parts.dispatcher.notify()
        if parts.dispatcher.auth_failed:
            raise AuthRejected(parts.dispatcher.last_error or "Langfuse refused the keys")
