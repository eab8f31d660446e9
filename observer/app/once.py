"""One-shot runs: `run --once` (one pass up to now) and `backfill` (a past window,
chunk by chunk). Both end through the parts' one stop (`Parts.stop`) and answer with
a `RunReport`, the values the views print: what the pass counted, what delivery and
the judge counted, and what the outbox holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from observer.app.exits import EXIT_AUTH, EXIT_CONFIG, EXIT_OK, EXIT_UNREACHABLE, exit_for
from observer.app.parts import Parts
from observer.background import Deadline
from observer.errors import AuthRejected, ConfigError
from observer.failures import FailureKind, PassOutcome, classify
from observer.pipeline import PassResult
from observer.sources import Stopped
from observer.state import StateError

# Refusals of the local files: the command names the file (a dry run's copy by the real one).
LOCAL_FILE_ERRORS = (ConfigError, StateError)

log = structlog.get_logger("observer.app")


@dataclass(frozen=True)
class RunReport:
    """What a one-shot run did, as values (the views render it; no registry is read):
    the pass's counts, then the scores delivered and refused by this process, those an
    earlier run left (`waiting`) and those still in the outbox (`left`), the judge's
    counts (None without a judge), and the request budget's line."""

    passed: PassResult
    delivered: int
    refused: int
    waiting: int
    left: int
    judged: tuple[int, int, int] | None  # (traces judged, judge errors, judge scores queued)
    budget: str | None  # the budget's pace; None: no Langfuse client built
    budget_held: bool  # the budget is what held delivery back


@dataclass
class OnceResult:
    exit_code: int
    passed: PassResult | None
    undelivered: int
    error: str | None = None
    # Scores the outbox held when the command began (an earlier run's): delivered with
    # this run's, so what it delivered is at most these and what it queued.
    waiting: int = 0
    failure: FailureKind | None = None  # what stopped it, classified (observer.failures)
    report: RunReport | None = None


def report_of(parts: Parts, passed: PassResult, waiting: int) -> RunReport:
    """The run's values, read once it stopped."""
    judge = parts.judge
    budget = parts.budget
    return RunReport(
        passed,
        parts.dispatcher.delivered,
        parts.dispatcher.refused,
        waiting,
        parts.state.outbox_size(),
        (judge.counted.judged, judge.counted.errors, judge.counted.scores) if judge else None,
        budget.describe() if budget is not None else None,
        budget_held(parts),
    )


def run_once(
    parts: Parts, now: datetime | None = None, window_start: datetime | None = None
) -> OnceResult:
    """One pass up to now (every trace older than the settle delay), push, flush, stop.

    With `window_start`, that whole window is read instead of the one after the
    watermark (the demo), and the watermark is not touched. Every part is stopped
    (telemetry flushed) before it returns; the state stays open for the report.
    """
    grace = parts.settings.run.shutdown_grace_s
    waiting = parts.state.outbox_size()  # an earlier run's, delivered with this one's
    try:
        # First contact (Langfuse, the state file's project): within
        # source.first_contact_s, before anything is read or judged.
        parts.passes.check()
    except Exception as error:
        failure = classify(error)
        if failure == "crashed" or isinstance(error, LOCAL_FILE_ERRORS):
            raise  # a bug, or a configuration or state file refused: raised as it is
        stopped = parts.stopping.is_set()
        parts.stop(Deadline.within(grace), deliver=False)
        if stopped:  # SIGTERM or Ctrl-C while Langfuse was being reached
            code = EXIT_UNREACHABLE if waiting else EXIT_OK
            return OnceResult(code, None, waiting, "stopped before it read anything", waiting)
        assert failure is not None
        return OnceResult(exit_for(failure), None, waiting, str(error), waiting, failure)
    if parts.judge is not None:
        parts.judge.start()
    if window_start is None:
        # The daemon's own pass in burst: its window rules evaluated before it returns.
        outcome = parts.passes.tick(now, burst=True)
    else:
        now = now or parts.clock()
        outcome = PassOutcome(now, parts.pipeline.process_window(window_start, now, now))
    result, failure = outcome.result, outcome.failure
    if outcome.error is not None and failure is not None:
        parts.stop(Deadline.within(grace))
        if failure == "crashed":
            raise outcome.error
        left = parts.state.outbox_size()
        return OnceResult(exit_for(failure), None, left, str(outcome.error), waiting, failure)
    assert result is not None
    # The judge's samples judged (the run's own work), then the stop within the grace;
    # after SIGTERM or Ctrl-C only what is in hand is delivered.
    if parts.judge is not None and not parts.stopping.is_set():
        parts.judge.drain(Deadline.within(parts.settings.judge.timeout_s * 4))
    parts.stop(Deadline.within(grace))
    report = report_of(parts, result, waiting)
    said = STOPPED_MESSAGE if result.cut_short else None
    if report.left:
        code = EXIT_AUTH if parts.dispatcher.auth_failed else EXIT_UNREACHABLE
        if parts.dispatcher.last_error_kind == "misdirected":
            code = EXIT_CONFIG  # the base URL is redirected away: a configuration error
        message = undelivered_message(parts, report.left)
        shown = f"{said}; {message}" if said else message
        return OnceResult(code, result, report.left, shown, waiting, report=report)
    return OnceResult(EXIT_OK, result, 0, said, waiting=waiting, report=report)


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


# -- backfill -------------------------------------------------------------------

MAX_BACKFILL_CHUNK = timedelta(days=1)


def backfill(
    parts: Parts,
    start: datetime,
    end: datetime,
    chunk: timedelta,
    progress: Callable[[datetime, PassResult], None] = lambda _at, _result: None,
) -> OnceResult:
    """The pipeline over a past window, chunk by chunk (sized by what the chunks before
    held); the watermark is not touched. Ends through the parts' one stop.

    Stopped (or failed) in the middle of a chunk, the result counts what that chunk did
    so far, and `progress` was last told the end of the chunk before it: the chunk is
    read again from its start by the next run (what it handled is then unchanged)."""
    grace = parts.settings.run.shutdown_grace_s
    waiting = parts.state.outbox_size()  # before the dispatcher sends any of it
    try:
        parts.passes.check()  # first contact, as run --once's
    except Exception as error:
        failure = classify(error)
        if failure in (None, "crashed") or isinstance(error, LOCAL_FILE_ERRORS):
            raise  # a stop, a bug, or a configuration or state file refused: as it is
        parts.stop(Deadline.within(grace), deliver=False)
        return OnceResult(exit_for(failure), None, waiting, str(error), waiting, failure)
    parts.dispatcher.start()
    if parts.judge is not None:
        parts.judge.start()
    chunks = _Chunks(parts, start, end, chunk)
    try:
        chunks.run(progress)
    except Exception as error:
        failure = classify(error)
        if failure == "crashed":
            raise
        # What the chunk cut short did: its traces recorded, their scores queued.
        totals = chunks.totals
        totals.add(chunks.result)
        totals.cut_short = chunks.result.observations > 0
        stopped = failure is None or parts.stopping.is_set()
        _flushed, left = parts.stop(Deadline.within(grace))
        # A stop asked for while a request was retried ends it with that request's error.
        report = report_of(parts, totals, waiting)
        if stopped:
            return OnceResult(EXIT_OK, totals, left, "stopped", waiting, report=report)
        code = exit_for(failure) if failure is not None else EXIT_OK
        return OnceResult(code, totals, left, str(error), waiting, failure, report)
    flushed, left = parts.stop(Deadline.within(grace))
    report = report_of(parts, chunks.totals, waiting)
    if not flushed and left:
        message = undelivered_message(parts, left)
        return OnceResult(EXIT_UNREACHABLE, chunks.totals, left, message, waiting, report=report)
    return OnceResult(EXIT_OK, chunks.totals, 0, waiting=waiting, report=report)


class _Chunks:
    """A backfill's window read chunk by chunk: `totals` of the chunks done, `result` of
    the chunk in hand (counted as it goes)."""

    def __init__(self, parts: Parts, start: datetime, end: datetime, chunk: timedelta) -> None:
        self.parts, self.end, self.chunk = parts, end, chunk
        self.totals = PassResult(start, end)
        self.cursor = start
        self.result = PassResult(start, start)

    def run(self, progress: Callable[[datetime, PassResult], None]) -> None:
        """Every chunk up to the end; raises what stopped it (Stopped for a stop)."""
        parts, size = self.parts, self.chunk
        light = parts.settings.source.page_limit // 2
        now = parts.clock()
        while self.cursor < self.end and not parts.stopping.is_set():
            parts.state.check_identity()  # deleted or replaced: StateError, as a daemon's pass
            chunk_end = min(self.end, self.cursor + size)
            # Read on past the chunk: the children of a trace rooted just before its end.
            read_until = chunk_end + timedelta(seconds=parts.settings.source.overlap_s)
            result = self.result = PassResult(self.cursor, chunk_end)
            parts.pipeline.process_window(self.cursor, chunk_end, now, read_until, result=result)
            if result.cut_short:
                break  # a stop in the middle of the chunk: counted, not done
            if result.deferred:
                # The outbox was full: wait for room, then read the chunk again (what was
                # recorded is unchanged the second time). Never done with a trace unscored.
                _wait_for_outbox_room(parts)
                continue
            self.totals.add(result)
            self.cursor = chunk_end
            progress(self.cursor, self.totals)
            # A chunk costs a request however little it holds: after a light one the next
            # is twice as long (an empty week is a dozen requests, not 168), after a heavy
            # one half, never below the chunk asked for nor above a day (or that chunk).
            if result.observations < light:
                size = min(size * 2, max(self.chunk, MAX_BACKFILL_CHUNK))
            elif result.observations > 4 * parts.settings.source.page_limit:
                size = max(size / 2, self.chunk)
            self.result = PassResult(self.cursor, self.cursor)  # in the totals: none in hand
        if self.cursor < self.end:
            raise Stopped()


def _wait_for_outbox_room(parts: Parts) -> None:
    """Until the outbox is half empty (the dispatcher sends meanwhile), or a stop."""
    room = parts.state.max_outbox // 2
    log.warning(
        "backfill_waiting",
        reason="outbox_full",
        outbox=parts.state.outbox_size(),
        until_below=room,
    )
    while parts.state.outbox_size() > room and not parts.stopping.wait(0.2):
        parts.dispatcher.notify()
        if parts.dispatcher.auth_failed:
            raise AuthRejected(parts.dispatcher.last_error or "Langfuse refused the keys")
