"""A pass's table (run --once, backfill, demo), and what keeps a long pass visible:
the progress line of run --once and the bar of backfill."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from observer.times import iso
from observer.views.console import console
from observer.views.words import counted

if TYPE_CHECKING:
    from rich.table import Table

    from observer.app.once import RunReport
    from observer.pipeline import PassResult, Pipeline
    from observer.sinks.dispatcher import Dispatcher


def pass_table(
    title: str, report: RunReport, extra: dict[str, str], written_to: str | None = None
) -> Table:
    """What a pass read, scored, skipped, queued and delivered; `extra` rows at the end.

    The rows add up: delivered is at most queued (the judge's too) and what waited from
    an earlier run, and what is not delivered is left in the outbox or was refused.
    `written_to`: the file (`-`: stdout) a dry run or the demo wrote the scores to
    instead of Langfuse, said where "delivered" would be."""
    from rich.table import Table

    result = report.passed
    table = Table(title=title, show_header=False)
    table.add_column("")
    table.add_column("", overflow="fold")
    table.add_row("window", f"{iso(result.start)} .. {iso(result.end)}")
    table.add_row("observations read", f"{result.observations:,}")
    table.add_row("traces scored", f"{result.scored:,}")
    if result.rescored:
        table.add_row("traces re-scored (changed)", f"{result.rescored:,}")
    table.add_row("traces unchanged (nothing pushed)", f"{result.unchanged:,}")
    if result.unsettled:
        table.add_row("traces still changing (next pass)", f"{result.unsettled:,}")
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(result.skip_reasons.items()))
    table.add_row("traces skipped", f"{result.skipped:,}" + (f" ({reasons})" if reasons else ""))
    if result.deferred:
        table.add_row("traces deferred (outbox full)", f"{result.deferred:,}")
    table.add_row("scores queued", f"{result.scores:,}")
    if report.judged is not None:
        judged, errors, judge_scores = report.judged
        table.add_row(
            "traces judged", f"{judged:,}" + (f" ({errors:,} judge errors)" if errors else "")
        )
        table.add_row("judge scores queued", f"{judge_scores:,}")
    if report.waiting:
        table.add_row(
            "scores waiting from an earlier run", f"{report.waiting:,} (in the outbox at start)"
        )
    # Delivered counts the judge's scores, and those the outbox held from an earlier run.
    notes = ["the judge's included"] if report.judged is not None else []
    if report.waiting:
        notes.append("the earlier run's included")
    note = f" ({'; '.join(notes)})" if notes else ""
    if written_to is None:
        table.add_row("scores delivered", f"{report.delivered:,}{note}")
    else:  # nothing went to Langfuse: said where the scores went instead
        where = "stdout" if written_to == "-" else written_to
        table.add_row("scores written", f"{report.delivered:,} to {where}{note}")
    if report.refused:
        table.add_row("scores refused by Langfuse", f"{report.refused:,}")
    if report.left:
        table.add_row("scores left in the outbox", f"{report.left:,} (the next run delivers them)")
    if report.budget is not None:
        held = (
            f"; held delivery back: {counted(report.left, 'score')} left in the outbox"
            if report.left and report.budget_held
            else ""
        )
        table.add_row("request budget", report.budget + held)
    for key, value in extra.items():
        table.add_row(key, value)
    return table


def window_done(begin: datetime, reached: datetime, result: PassResult) -> str:
    """A stopped backfill's row: how far it got, and whether the chunk after was cut
    short (what it did is in the counts; the backfill that goes on reads it again)."""
    cut = "; the chunk after it was cut short: what it did is counted above"
    cut = cut if result.cut_short else ""
    return f"{iso(begin)} .. {iso(reached)} (stopped there{cut})"


def dry_run_rows(written: int, target: str) -> dict[str, str]:
    """The dry run's row: how many scores went where, and that nothing else did."""
    where = "stdout" if target == "-" else target
    return {
        "dry run": f"{counted(written, 'score')} written to {where}, as Langfuse would get "
        "them; nothing pushed to Langfuse, the state file untouched"
    }


@contextmanager
def progress_line(title: str, pipeline: Pipeline, dispatcher: Dispatcher) -> Iterator[None]:
    """On a terminal, one line on stderr kept current while the work runs: pages,
    observations, traces and scores, the pass's own counts (a first pass at 25 requests a
    minute can take minutes). Elsewhere, nothing."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    def line() -> str:
        counting = pipeline.counting
        pages, observations, traces, queued = (
            (counting.pages, counting.observations, counting.traces, counting.scores)
            if counting is not None
            else (0, 0, 0, 0)
        )
        return (
            f"{counted(pages, 'page')}, {counted(observations, 'observation')}, "
            f"{counted(traces, 'trace')}, {counted(queued, 'score')} queued, "
            f"{dispatcher.delivered:,.0f} delivered"
        )

    done = threading.Event()
    with Progress(
        SpinnerColumn(),
        TextColumn(f"[bold]{title}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(title, total=None, note=line())

        def refresh() -> None:
            while not done.wait(0.25):
                bar.update(task, note=line())

        ticker = threading.Thread(target=refresh, name="observer-progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()


@dataclass
class BackfillProgress:
    """How far a backfill got: `reached` is the end of the last chunk done."""

    reached: datetime
    update: Callable[[datetime, PassResult], None]


def _backfill_note(done: list[PassResult], pipeline: Pipeline) -> str:
    """Traces and scores so far: the chunks done (their totals, the last told, then the
    chunk that was in hand when they were told) and the chunk in hand, as the pipeline
    counts them (in the middle of a chunk too: a chunk can be a day of traces). The chunk
    in hand is counted only until it is in the totals: the pipeline keeps it as its
    `counting` until the next chunk begins."""
    hand = pipeline.counting
    fresh = hand is not None and hand.end > hand.start and all(hand is not d for d in done[1:])
    now = done[:1] + ([hand] if fresh and hand is not None else [])
    traces = sum(r.traces for r in now)
    scored = sum(r.scored + r.rescored for r in now)
    queued = sum(r.scores for r in now)
    return f"{counted(traces, 'trace')}, {scored:,.0f} scored, {counted(queued, 'score')} queued"


@contextmanager
def backfill_bar(
    begin: datetime, finish: datetime, pipeline: Pipeline
) -> Iterator[BackfillProgress]:
    """On a terminal, a bar on stderr over the window's time, with an ETA and the traces,
    scored traces and scores so far (the pipeline's counts, read four times a second); the
    log lines go above it (observer.telemetry.logging writes to the current `sys.stderr`, which the
    bar's console holds while it is drawn). Elsewhere, nothing: no bar, no last frame in a
    log file."""
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    shown = sys.stderr.isatty()
    with Progress(
        TextColumn("[bold]backfill"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[note]}"),
        console=console(stderr=True),
        disable=not shown,
    ) as bar:
        task = bar.add_task("backfill", total=(finish - begin).total_seconds(), note="")

        told: list[PassResult] = []

        def update(at: datetime, totals: PassResult) -> None:
            progress.reached = at
            # The totals, and the chunk they now hold (still the pipeline's `counting`).
            told[:] = [totals] + ([pipeline.counting] if pipeline.counting is not None else [])
            note = _backfill_note(told, pipeline)
            bar.update(task, completed=(at - begin).total_seconds(), note=note)

        progress = BackfillProgress(begin, update)
        done = threading.Event()

        def refresh() -> None:
            while not done.wait(0.25):
                bar.update(task, note=_backfill_note(told, pipeline))

        ticker = threading.Thread(target=refresh, name="observer-progress", daemon=True)
        if shown:
            ticker.start()
        try:
            yield progress
        finally:
            done.set()
            if shown:
                ticker.join()
