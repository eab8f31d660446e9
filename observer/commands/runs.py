"""The commands that run the pipeline: `run` (the daemon, or `--once`), `backfill`, `demo`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

import click

from observer.commands.common import (
    DEMO_STATE,
    EXIT_INTERRUPTED,
    config_option,
    dry_run_option,
    moment,
    quiet_logging,
    settings_of,
    start_logging,
    state_option,
    written,
)
from observer.times import iso
from observer.views.console import console, self_command

if TYPE_CHECKING:
    from observer import app
    from observer.config import Settings
    from observer.sinks.jsonl import JsonlScoreSink

T = TypeVar("T")


@click.command(short_help="Run the daemon (--once: one pass, then exit).")
@config_option
@state_option
@click.option("--once", is_flag=True, help="One pass up to now, push, flush, exit.")
@dry_run_option("With --once: score")
def run(config_path: str | None, state_path: str | None, once: bool, dry_run: str | None) -> None:
    """Run the daemon: poll Langfuse, score every RAG trace, push scores.

    With --once: poll until caught up with every trace older than the settle
    delay, push and flush, then exit (0; 3 when Langfuse is unreachable or
    scores stay undelivered; 4 when Langfuse rejects the keys).
    """
    from observer import app

    if dry_run is not None and not once:
        raise click.UsageError("--dry-run needs --once (or use backfill --dry-run)")
    settings = settings_of(config_path)
    start_logging(settings)
    # SIGTERM and Ctrl-C from here on stop a one-shot run gracefully (docs/daemon.md).
    stop = threading.Event()
    if dry_run is not None:  # no score post, so no server version to require
        with (
            app.signals_set(stop),
            dry_run_files(settings, state_path, dry_run) as (scratch, sink),
            app.build(settings, state_path=scratch, sink=sink, stop=stop) as parts,
        ):
            _run_once_command(parts, dry_run)
    if once:
        with app.signals_set(stop), app.build(settings, state_path=state_path, stop=stop) as parts:
            _run_once_command(parts, None)
    mode: app.Mode = "solo" if settings.fleet is None else "member"
    with _daemon_parts(settings, mode, state_path) as parts:
        raise SystemExit(app.run_daemon(parts))


@contextmanager
def _daemon_parts(
    settings: Settings, mode: app.Mode, state_path: str | None
) -> Iterator[app.Parts]:
    """The daemon's parts; a fleet's Redis that cannot be reached exits 3, named."""
    from observer import app
    from observer.fleet.connect import FleetUnreachable

    try:
        parts = app.build(settings, mode=mode, state_path=state_path)
    except FleetUnreachable as error:
        import structlog

        structlog.get_logger("observer.app").error("fleet_unreachable", error=str(error))
        click.echo(f"observer: {error}", err=True)
        raise SystemExit(app.EXIT_UNREACHABLE) from None
    with parts:
        yield parts


def _run_once_command(parts: app.Parts, dry_run: str | None) -> NoReturn:
    from observer import app
    from observer.views.passes import pass_table, progress_line

    with progress_line("run --once", parts.pipeline, parts.dispatcher):
        outcome = app.run_once(parts)
    if outcome.report is not None:
        extra = {} if dry_run is None else dry_run_rows_of(parts, dry_run)
        title = "observer run --once" + (" --dry-run" if dry_run is not None else "")
        # With the scores on stdout, the table goes to stderr.
        table = pass_table(title, outcome.report, extra, dry_run)
        console(stderr=dry_run == "-").print(table)
    if outcome.error:
        click.echo(f"observer: {outcome.error}", err=True)
    raise SystemExit(outcome.exit_code)


@contextmanager
def dry_run_files(
    settings: Settings, state_path: str | None, target: str
) -> Iterator[tuple[Path, JsonlScoreSink]]:
    """A copy of the state file in a scratch directory, and the sink writing to `target`."""
    import tempfile

    from observer.app.dryrun import scores_sink, scratch_state
    from observer.config import ConfigError

    real = Path(state_path or settings.state.path)
    with tempfile.TemporaryDirectory(prefix="observer-dry-run-") as scratch:
        copy = scratch_state(real, Path(scratch))
        try:
            yield copy, scores_sink(target)
        except ConfigError as error:  # another project's state file: named by its own path
            raise ConfigError(str(error).replace(str(copy), str(real))) from None


def dry_run_rows_of(parts: app.Parts, target: str) -> dict[str, str]:
    from observer.views.passes import dry_run_rows

    return dry_run_rows(written(parts), target)


@click.command(short_help="Score the traces of a past window.")
@click.option("--from", "start", required=True, help="ISO-8601 start (inclusive).")
@click.option("--to", "end", default=None, help="ISO-8601 end (exclusive; default now).")
@click.option(
    "--chunk-hours",
    type=float,
    default=1.0,
    show_default=True,
    help="Read the window this many hours at a time at first; a chunk that held little "
    "doubles the next one.",
)
@dry_run_option("Score")
@config_option
@state_option
def backfill(
    start: str,
    end: str | None,
    chunk_hours: float,
    dry_run: str | None,
    config_path: str | None,
    state_path: str | None,
) -> None:
    """Score the traces of a past window (same pipeline, same score ids).

    Traces already scored and unchanged push nothing; the daemon's watermark
    is not touched. Stopped (Ctrl-C, SIGTERM), it delivers what it scored,
    prints the command that resumes where it stopped and exits 130.
    """
    from observer import app

    begin = moment(start)
    finish = moment(end) if end else app.now_utc()
    if finish <= begin:
        raise click.BadParameter("--to must be after --from")
    if chunk_hours <= 0:
        raise click.BadParameter("--chunk-hours must be positive")
    settings = settings_of(config_path)
    start_logging(settings)
    if dry_run is None:
        with app.build(settings, state_path=state_path) as parts:
            _backfill_command(parts, begin, finish, chunk_hours, None)
    with (
        dry_run_files(settings, state_path, dry_run) as (scratch, sink),
        app.build(settings, state_path=scratch, sink=sink) as parts,
    ):
        _backfill_command(parts, begin, finish, chunk_hours, dry_run)


def _backfill_command(
    parts: app.Parts, begin: datetime, finish: datetime, chunk_hours: float, dry_run: str | None
) -> NoReturn:
    from observer import app
    from observer.views.passes import backfill_bar, pass_table, window_done

    with backfill_bar(begin, finish, parts.pipeline) as progress, app.signals_set(parts.stopping):
        outcome = app.backfill(parts, begin, finish, timedelta(hours=chunk_hours), progress.update)
    stopped = outcome.error == "stopped"
    if outcome.passed is not None and outcome.report is not None:
        extra = {} if dry_run is None else dry_run_rows_of(parts, dry_run)
        if stopped:
            extra["window done"] = window_done(begin, progress.reached, outcome.passed)
        title = "observer backfill" + (" --dry-run" if dry_run is not None else "")
        table = pass_table(title, outcome.report, extra, dry_run)
        console(stderr=dry_run == "-").print(table)
    if stopped:
        resume = f"{self_command()} backfill --from {iso(progress.reached)} --to {iso(finish)}"
        click.echo(f"observer: stopped; to go on where it stopped:\n  {resume}", err=True)
        raise SystemExit(EXIT_INTERRUPTED)
    if outcome.error:
        click.echo(f"observer: {outcome.error}", err=True)
    raise SystemExit(outcome.exit_code)


@click.command(short_help="The daemon on bundled traces: no Langfuse account needed.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default="observer-demo-scores.jsonl",
    show_default=True,
    help="Where the scores are written (JSON lines).",
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(dir_okay=False),
    default=DEMO_STATE,
    show_default=True,
    help="The demo's own state file, apart from a real daemon's state.path.",
)
@config_option
@click.option(
    "--serve",
    is_flag=True,
    help="Then serve /metrics, /healthz and /readyz on the [http] port until Ctrl-C.",
)
def demo(out: str, state_path: str, config_path: str | None, serve: bool) -> None:
    """The daemon on bundled example traces: no Langfuse account or key needed.

    Runs the real pipeline (mapping, signals, dispatcher, state) over example
    traces shaped like Langfuse observations, writes the scores Langfuse would
    receive to --out and prints a summary. With --serve, the metrics of that
    run stay up for Prometheus and Grafana to look at.
    """
    from observer import app

    settings = settings_of(config_path)
    quiet_logging(settings)
    outcome, parts = app.demo(settings, Path(out), Path(state_path))
    with parts:
        _demo_report(parts, outcome, out, state_path, serve)


def _demo_report(
    parts: app.Parts, outcome: app.OnceResult, out: str, state_path: str, serve: bool
) -> NoReturn:
    from observer import app
    from observer.views.demo import demo_report

    shown = console()
    for each in demo_report(parts, outcome, written(parts), out, state_path):
        shown.print(each, soft_wrap=isinstance(each, str))  # a pipe gets each command whole
    if serve and outcome.exit_code == app.EXIT_OK:
        app.serve_until_stopped(
            parts,
            lambda url: shown.print(f"\nserving {url}/metrics, /healthz, /readyz (Ctrl-C to stop)"),
        )
    if outcome.error:
        click.echo(f"observer: {outcome.error}", err=True)
    raise SystemExit(outcome.exit_code)
