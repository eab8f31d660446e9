"""The `observer` command line. Thin: parse arguments, call the core, print.

Exit codes (README, "Exit codes", is the contract): 0 success; 1 `--strict` and
some input was bad, the trace `explain` was asked for is not there, or an unexpected
error; 2 bad usage, bad configuration or a bad file; 3 Langfuse (or the fleet's
Redis) unreachable; 4 Langfuse rejected the keys; 130 Ctrl-C where no graceful stop
applies.

The errors a user can act on (ConfigError, StateError, ExplainError, RemoteError ...)
are turned into `observer: <message>` on stderr and the exit code in one place, the
group every command runs under (`_Commands.invoke`); the commands let them rise.
Any other error is a bug: one line says so, and its traceback shows only under
`--debug` or log level debug. What the commands do is in `observer.app` (and
`observer.app.score_file`); what they print, in `observer.views`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from observer import __version__
from observer.times import iso, parse_duration, parse_time
from observer.urls import without_credentials
from observer.views.console import closed_pipe_exit, console, self_command

if TYPE_CHECKING:  # each command imports what it needs: `observer --help` stays quick
    from observer import app
    from observer.alerts.service import AlertService
    from observer.config import Settings
    from observer.sinks.jsonl import JsonlScoreSink
    from observer.sources.langfuse import LangfuseSource
    from observer.views.lines import JudgeTally

# pydantic looks for plugins in the entry points of every installed distribution when it
# builds its first model: tens of milliseconds of every start in a large environment, for
# plugins observer does not use. A value set in the environment is left as it is.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def _config_option(func: F) -> F:
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        envvar="OBSERVER_CONFIG",
        help="TOML config file (env: OBSERVER_CONFIG). Every key can also be set "
        "from the environment as OBSERVER_<SECTION>__<KEY>.",
    )(func)


def _settings(config_path: str | None) -> Settings:
    """The settings, at debug level under --debug; a debug level also asks for tracebacks."""
    from observer.config import load_settings

    settings = load_settings(config_path)
    meta = click.get_current_context().meta
    if meta.get(_DEBUG) and settings.log.level != "debug":
        log = settings.log.model_copy(update={"level": "debug"})
        settings = settings.model_copy(update={"log": log})
    meta[_DEBUG] = settings.log.level == "debug"
    return settings


EXIT_BAD_INPUT = 2  # bad configuration, state file or input file (app.EXIT_CONFIG)
EXIT_NOT_FOUND = 1  # the trace `explain` was asked for is not there
EXIT_UNEXPECTED = 1  # an error observer did not expect: a bug (--debug: its traceback)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C

# The errors a user can fix, by exit code: (module, class) so that none is imported
# to be caught (`observer --help` and `observer score` stay quick). The first match wins.
_USER_ERRORS = (
    ("observer.app.explain", "TraceNotFound", EXIT_NOT_FOUND),
    ("observer.app.explain", "ExplainError", EXIT_BAD_INPUT),
    ("observer.errors", "ConfigError", EXIT_BAD_INPUT),
    ("observer.state.db", "StateError", EXIT_BAD_INPUT),
    ("observer.records", "NotRecords", EXIT_BAD_INPUT),
    ("observer.errors", "UnsupportedServer", EXIT_BAD_INPUT),
    ("observer.errors", "AuthRejected", 4),  # app.EXIT_AUTH
    ("observer.errors", "RemoteError", 3),  # app.EXIT_UNREACHABLE: unreachable, 5xx, refused
)
# ctx.meta's key: show the traceback of an unexpected error (--debug, or log.level debug).
_DEBUG = "observer.debug"


def user_error_exit(error: BaseException) -> int | None:
    """The exit code for an error the user can fix, or None for any other error.
    A module not imported yet cannot have raised its error, so it is not imported."""
    for module, name, code in _USER_ERRORS:
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(error, getattr(loaded, name)):
            return code
    return None


class _Commands(click.Group):
    """The group every command runs under: where errors become exit codes, once."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            closed_pipe_exit()
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's own: usage errors (2), --help, --version
        except KeyboardInterrupt:  # where no graceful stop is set up: never click's "Aborted!"
            click.echo("observer: interrupted", err=True)
            raise SystemExit(EXIT_INTERRUPTED) from None
        except Exception as error:
            code = user_error_exit(error)
            if code is None:
                # `score` reads no [log]: its variable asks for the traceback all the same.
                asked = os.environ.get("OBSERVER_LOG__LEVEL", "").strip().lower() == "debug"
                if ctx.meta.get(_DEBUG) or asked:
                    raise
                click.echo(
                    f"observer: unexpected error: {type(error).__name__}: {error}\n"
                    "  This is a bug in observer; `observer --debug ...` shows where it happened.",
                    err=True,
                )
                raise SystemExit(EXIT_UNEXPECTED) from None
            click.echo(f"observer: {error}", err=True)
            raise SystemExit(code) from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="observer")
@click.option(
    "--debug",
    is_flag=True,
    help="Log at debug level, and show the traceback of an unexpected error.",
)
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Trust signals for RAG answers traced in Langfuse."""
    ctx.meta[_DEBUG] = debug


def _stderr_line(line: str) -> None:
    sys.stderr.write(line + "\n")


@main.command(short_help="Compute the signals of RagRecord JSON lines.")
@click.argument("source", type=click.File("rb"), default="-", metavar="[PATH|-]")
@_config_option
@click.option("--strict", is_flag=True, help="Exit 1 when any input line is not a valid record.")
@click.option(
    "--summary", "show_summary", is_flag=True, help="Print a summary table instead of JSON."
)
def score(source: IO[bytes], config_path: str | None, strict: bool, show_summary: bool) -> None:
    """Compute the signals of RagRecord JSON lines (one object per line).

    Writes one JSON object per record to stdout, in input order. A line that is
    not a valid record is reported on stderr as {"line": N, "column": C,
    "error": "..."} (column only when the error has one, such as broken JSON)
    and skipped; an error already reported is counted, and said once at the end as
    {"error": "...", "more_lines": K, "last_line": N}. Exit 2 for a file of
    Langfuse observations (read by `observer discover --file`).
    """
    from observer.app.score_file import score_lines, signal_params_for
    from observer.signals.output import dumps_line
    from observer.signals.summary import Summary
    from observer.views.lines import BadLines
    from observer.views.summary import summary_table

    params = signal_params_for(config_path)
    out = sys.stdout.buffer

    def emit(obj: dict[str, Any]) -> None:
        out.write(dumps_line(obj))

    bad_lines = BadLines(_stderr_line)
    summary = Summary()
    score_lines(source, params, None if show_summary else emit, bad_lines, summary)
    out.flush()
    bad_lines.close()
    if show_summary:
        console().print(
            summary_table(summary, title=f"observer score: {getattr(source, 'name', '-')}")
        )
    if strict and summary.bad_lines:
        raise SystemExit(1)


DEMO_STATE = "observer-demo.sqlite"


def _state_option(func: F) -> F:
    return click.option(
        "--state",
        "state_path",
        type=click.Path(dir_okay=False),
        default=None,
        envvar="OBSERVER_STATE__PATH",
        help="SQLite state file (default: state.path of the config, observer.sqlite).",
    )(func)


def _dry_run_option(lead: str) -> Callable[[F], F]:
    """`--dry-run FILE`, for run --once and backfill alike."""

    def add(func: F) -> F:
        return click.option(
            "--dry-run",
            "dry_run",
            type=click.Path(dir_okay=False, allow_dash=True),
            default=None,
            metavar="FILE",
            help=f"{lead} as usual but write the scores to FILE (JSON lines; - for stdout) "
            "instead of Langfuse, on a copy of the state file.",
        )(func)

    return add


def _logging(settings: Settings) -> None:
    from observer.telemetry.logging import configure_logging

    configure_logging(settings.log.format, settings.log.level, log_content=settings.log.log_content)


@main.command(short_help="Run the daemon (--once: one pass, then exit).")
@_config_option
@_state_option
@click.option("--once", is_flag=True, help="One pass up to now, push, flush, exit.")
@_dry_run_option("With --once: score")
def run(config_path: str | None, state_path: str | None, once: bool, dry_run: str | None) -> None:
    """Run the daemon: poll Langfuse, score every RAG trace, push scores.

    With --once: poll until caught up with every trace older than the settle
    delay, push and flush, then exit (0; 3 when Langfuse is unreachable or
    scores stay undelivered; 4 when Langfuse rejects the keys).
    """
    from observer import app

    if dry_run is not None and not once:
        raise click.UsageError("--dry-run needs --once (or use backfill --dry-run)")
    settings = _settings(config_path)
    _logging(settings)
    # SIGTERM and Ctrl-C from here on stop a one-shot run gracefully (docs/daemon.md).
    stop = threading.Event()
    if dry_run is not None:  # no score post, so no server version to require
        with (
            app.signals_set(stop),
            _dry_run(settings, state_path, dry_run) as (scratch, sink),
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

    with progress_line("run --once", parts.metrics):
        outcome = app.run_once(parts)
    if outcome.passed is not None:
        extra = {} if dry_run is None else _dry_run_rows(parts, dry_run)
        title = "observer run --once" + (" --dry-run" if dry_run is not None else "")
        # With the scores on stdout, the table goes to stderr.
        table = pass_table(title, outcome.passed, parts, extra, outcome.waiting, dry_run)
        console(stderr=dry_run == "-").print(table)
    if outcome.error:
        click.echo(f"observer: {outcome.error}", err=True)
    raise SystemExit(outcome.exit_code)


@contextmanager
def _dry_run(
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


def _written(parts: app.Parts) -> int:
    """How many scores the JSON lines sink wrote (the dry run's, the demo's)."""
    from observer.sinks.jsonl import JsonlScoreSink

    sink = parts.dispatcher.sink
    return sink.written if isinstance(sink, JsonlScoreSink) else 0


def _dry_run_rows(parts: app.Parts, target: str) -> dict[str, str]:
    from observer.views.passes import dry_run_rows

    return dry_run_rows(_written(parts), target)


def _moment(value: str) -> datetime:
    moment = parse_time(value)
    if moment is None:
        raise click.BadParameter(f"not an ISO-8601 time: {value!r}")
    return moment


@main.command(short_help="Score the traces of a past window.")
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
@_dry_run_option("Score")
@_config_option
@_state_option
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

    begin = _moment(start)
    finish = _moment(end) if end else app.now_utc()
    if finish <= begin:
        raise click.BadParameter("--to must be after --from")
    if chunk_hours <= 0:
        raise click.BadParameter("--chunk-hours must be positive")
    settings = _settings(config_path)
    _logging(settings)
    if dry_run is None:
        with app.build(settings, state_path=state_path) as parts:
            _backfill_command(parts, begin, finish, chunk_hours, None)
    with (
        _dry_run(settings, state_path, dry_run) as (scratch, sink),
        app.build(settings, state_path=scratch, sink=sink) as parts,
    ):
        _backfill_command(parts, begin, finish, chunk_hours, dry_run)


def _backfill_command(
    parts: app.Parts, begin: datetime, finish: datetime, chunk_hours: float, dry_run: str | None
) -> NoReturn:
    from observer import app
    from observer.views.passes import backfill_bar, pass_table, window_done

    with backfill_bar(begin, finish, parts.metrics) as progress, app.signals_set(parts.stop):
        outcome = app.backfill(parts, begin, finish, timedelta(hours=chunk_hours), progress.update)
    stopped = outcome.error == "stopped"
    if outcome.passed is not None:
        extra = {} if dry_run is None else _dry_run_rows(parts, dry_run)
        if stopped:
            extra["window done"] = window_done(begin, progress.reached, outcome.passed)
        title = "observer backfill" + (" --dry-run" if dry_run is not None else "")
        table = pass_table(title, outcome.passed, parts, extra, outcome.waiting, dry_run)
        console(stderr=dry_run == "-").print(table)
    if stopped:
        resume = f"{self_command()} backfill --from {iso(progress.reached)} --to {iso(finish)}"
        click.echo(f"observer: stopped; to go on where it stopped:\n  {resume}", err=True)
        raise SystemExit(EXIT_INTERRUPTED)
    if outcome.error:
        click.echo(f"observer: {outcome.error}", err=True)
    raise SystemExit(outcome.exit_code)


@main.command(short_help="Check the config, Langfuse and the keys; what will be read.")
@_config_option
@_state_option
def check(config_path: str | None, state_path: str | None) -> None:
    """Check the config, reach Langfuse, prove the keys, and show what will be read."""
    # The configuration first: a bad one exits 2 before the Langfuse client is loaded.
    settings = _settings(config_path)
    from observer import app
    from observer.app.checks import recent_sample
    from observer.views.check import check_table
    from observer.views.discover import recent_rows

    outcome = app.check(settings, Path(state_path or settings.state.path))
    found = outcome.rows + (recent_rows(recent_sample(settings)) if outcome.reachable else [])
    console().print(check_table(settings, found))
    raise SystemExit(outcome.exit_code)


def _langfuse_read(settings: Settings, read: Callable[[LangfuseSource], T]) -> T:
    """Run `read` on the source `run` would build, after the same first contact; exit 2,
    3 or 4 as `run --once` does."""
    from observer import app
    from observer.app.contact import langfuse_ready
    from observer.errors import RemoteError
    from observer.telemetry.metrics import Metrics

    try:
        langfuse_ready(settings, app.build_api(settings), None, posting=False)
        source = app.build_source(
            settings, Metrics(), max_attempts=min(2, settings.source.max_attempts)
        )
        return read(source)
    except RemoteError as error:
        shown = without_credentials(settings.langfuse.base_url)
        said = str(error) if shown in str(error) else f"Langfuse {shown}: {error}"
        click.echo(f"observer: {said}", err=True)
        raise SystemExit(app.exit_code(error)) from None


def _since(text: str, now: datetime) -> datetime:
    from observer.app.discover import since_start

    try:
        return since_start(text, now)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--since") from None


_FILE_OPTION = click.option(
    "--file",
    "file_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read observations from this file instead of Langfuse: a JSON list, JSON lines, "
    "or an object with `observations` or `data`.",
)
_JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


@main.command("explain", short_help="What observer makes of one trace, and why, rule by rule.")
@click.argument("trace_id")
@_FILE_OPTION
@click.option(
    "--since",
    default="30d",
    show_default=True,
    help="Look this far back in Langfuse (30m, 2d, or an ISO-8601 time).",
)
@_JSON_OPTION
@_config_option
def explain_command(
    trace_id: str, file_path: Path | None, since: str, as_json: bool, config_path: str | None
) -> None:
    """What observer makes of one trace, and why: rule by rule, then the record, its
    signals and scores with their comments, or the skip and where it stopped.

    Exit 1 when the trace is not found, 2 for a bad file or configuration, 3 when
    Langfuse is unreachable, 4 when it rejects the keys.
    """
    from observer.app.explain import explain, fetch_trace, trace_from_file
    from observer.views.explain import explanation_json, explanation_lines

    settings = _settings(config_path)
    _quiet_logging(settings)

    def fetch(source: LangfuseSource) -> list[dict[str, Any]]:
        end = source.now()
        return fetch_trace(
            source,
            trace_id,
            _since(since, end),
            end,
            f"at {without_credentials(settings.langfuse.base_url)}",
        )

    if file_path is not None:
        observations = trace_from_file(file_path, trace_id)
    else:
        observations = _langfuse_read(settings, fetch)
    explained = explain(trace_id, observations, settings.mapping_rules(), settings.signal_params())
    if as_json:
        click.echo(json.dumps(explanation_json(explained), ensure_ascii=False, indent=2))
    else:
        click.echo("\n".join(explanation_lines(explained)))


@main.command("discover", short_help="How observer reads recent traces, per trace name.")
@click.option(
    "--since",
    default=None,
    help="Traces this far back (1h, 30m, 2d, or an ISO-8601 time) [default: 1h; "
    "with --file: the whole file].",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="At most this many traces, the newest.",
)
@_FILE_OPTION
@_JSON_OPTION
@_config_option
def discover_command(
    since: str | None,
    limit: int,
    file_path: Path | None,
    as_json: bool,
    config_path: str | None,
) -> None:
    """How observer reads a sample of recent traces, per trace name: answers, scored,
    skipped and why, where the question, answer and sources were found; and, when
    the default convention cannot read them, a [mapping] tried on the sample.

    Exit 2 for a bad file or configuration, 3 when Langfuse is unreachable, 4 when
    it rejects the keys.
    """
    from observer.app import discover
    from observer.views.discover import discovery_json, discovery_lines, newest_note

    settings = _settings(config_path)
    _quiet_logging(settings)
    if file_path is not None:
        start = _since(since, datetime.now(UTC)) if since else None
        sample = discover.sample_from_file(file_path, start, limit)
        window = str(file_path) + (f" since {iso(start)}" if start else "")
    else:

        def read(source: LangfuseSource) -> tuple[discover.Sample, str]:
            end = source.now()
            start = _since(since or "1h", end)
            if start >= end:
                raise click.BadParameter("must be in the past", param_hint="--since")
            found = discover.read_sample(source, start, end, limit)
            return found, f"{iso(start)} .. {iso(end)}"

        sample, window = _langfuse_read(settings, read)
    window += newest_note(len(sample.traces), limit)
    found = discover.discover(
        sample.traces, settings.mapping_rules(), discover.rules_from_settings(settings)
    )
    found = replace(found, partial=sample.partial)
    if as_json:
        click.echo(json.dumps(discovery_json(found, window), ensure_ascii=False, indent=2))
    else:
        click.echo("\n".join(discovery_lines(found, window)))


def _quiet_logging(settings: Settings) -> None:
    """Reading commands: their output is the report; the log says only what went wrong
    (everything at log.level debug, or under --debug)."""
    from observer.telemetry.logging import configure_logging

    configure_logging(settings.log.format, "debug" if settings.log.level == "debug" else "warning")


@main.command(short_help="The daemon on bundled traces: no Langfuse account needed.")
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
@_config_option
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

    settings = _settings(config_path)
    _quiet_logging(settings)
    outcome, parts = app.demo(settings, Path(out), Path(state_path))
    with parts:
        _demo_report(parts, outcome, out, state_path, serve)


def _demo_report(
    parts: app.Parts, outcome: app.OnceResult, out: str, state_path: str, serve: bool
) -> NoReturn:
    from observer import app
    from observer.views.demo import demo_report

    shown = console()
    for each in demo_report(parts, outcome, _written(parts), out, state_path):
        shown.print(each, soft_wrap=isinstance(each, str))  # a pipe gets each command whole
    if serve and outcome.exit_code == app.EXIT_OK:
        app.serve_until_stopped(
            parts,
            lambda url: shown.print(f"\nserving {url}/metrics, /healthz, /readyz (Ctrl-C to stop)"),
        )
    if outcome.error:
        click.echo(f"observer: {outcome.error}", err=True)
    raise SystemExit(outcome.exit_code)


class _JudgeCommands(click.Group):
    """`observer judge FILE` judges a file (the command `file`); `observer judge agreement`
    compares the judge with people: a first word that names no command is the file's."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["file", *args]
        return super().parse_args(ctx, args)


@main.group(cls=_JudgeCommands, short_help="Judge records offline, or compare with people.")
def judge() -> None:
    """The LLM judge: judge a file of records, or compare it with people's labels.

    `observer judge FILE` is `observer judge file FILE`.
    """


@judge.command("agreement", short_help="The judge against people's labels in Langfuse.")
@click.option(
    "--since", default="7d", show_default=True, help="Labels made this long ago up to now."
)
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
@_config_option
def judge_agreement_command(since: str, as_json: bool, config_path: str | None) -> None:
    """How far the judge agrees with the people who label answers in Langfuse.

    Pairs people's scores named judge.human_score (source ANNOTATION) with the
    judge's faithfulness scores on the same traces: pairs, Cohen's kappa,
    precision and recall on unfaithful answers, the disagreements with their
    Langfuse links, per judge model and prompt. A figure with nothing to
    compute it from is null, never 0 or 1.
    """
    from observer.app.judge_agreement import judge_agreement
    from observer.views.judge import agreement_lines

    settings = _settings(config_path)
    _quiet_logging(settings)
    try:
        window = parse_duration(since)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--since") from None
    end = datetime.now(UTC)
    found, link, empty = judge_agreement(settings, end - window, end)
    if as_json:
        extra = {"empty": empty.as_dict()} if empty is not None else {}
        click.echo(json.dumps({**found.as_dict(link), **extra}, indent=2))
        return
    for line in agreement_lines(found, link, empty):
        click.echo(line)


@judge.command("canary", short_help="Judge the canary now, against its labels.")
@click.argument("path", type=click.Path(path_type=Path), required=False, metavar="[PATH]")
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
@_config_option
def judge_canary_command(path: Path | None, as_json: bool, config_path: str | None) -> None:
    """Judge every case of a canary file once now and compare with its labels.

    PATH defaults to judge.canary_file. A canary is JSON lines of RagRecords, each
    with a "label" ("faithful" or "unfaithful") and an optional "why"; the daemon
    judges it on a schedule (judge.canary_every_h) and holds the judge's pages when
    its agreement falls. Prints the agreement, kappa and each disagreement with its
    why. Needs the judge's model and key, as `observer judge`.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from observer.app.judge_canary import canary_cases, judge_canary
    from observer.views.judge import canary_lines
    from observer.views.lines import JudgeTally

    settings = _settings(config_path)
    _quiet_logging(settings)
    cases = canary_cases(settings, path)
    progress = Progress(
        TextColumn("[bold]canary"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console(stderr=True),
        disable=not sys.stderr.isatty(),
    )
    tally = JudgeTally()
    with progress:
        task = progress.add_task("canary", total=len(cases))

        def each(_case: Any, result: Any) -> None:
            tally.add(result)
            progress.advance(task)

        found, tokens = judge_canary(settings, cases, each)
    if as_json:
        click.echo(json.dumps({**found.as_dict(cases), "tokens": tokens}, indent=2))
    else:
        for line in canary_lines(found, cases):
            click.echo(line)
        click.echo(f"tokens used: {tokens:,}")
    _exit_if_unreachable(settings, tally)


@judge.command("file", short_help="Judge RagRecord JSON lines offline with the LLM.")
@click.argument("source", type=click.File("rb"), default="-", metavar="[PATH|-]")
@_config_option
@click.option("--strict", is_flag=True, help="Exit 1 when any line was bad or could not be judged.")
def judge_file(source: IO[bytes], config_path: str | None, strict: bool) -> None:
    """Judge RagRecord JSON lines offline with the configured LLM (every line, no sampling).

    Writes `observer score`'s object plus claims, verdicts, faithfulness,
    citation_accuracy, critical_unsupported, abstained, calls, tokens and
    judge_error, one per record, in input order. Needs OBSERVER_JUDGE_MODEL and
    OPENAI_API_KEY (or OBSERVER_JUDGE_BASE_URL for a keyless endpoint). With a
    [resolver] configured, the cited chunks are looked up first (missing_chunks,
    stale_chunks) and the judge's funnel applies, as in the daemon.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from observer.app.judge_file import FileJudge
    from observer.signals.output import dumps_line
    from observer.views.lines import BadLines, JudgeTally, judge_json

    settings = _settings(config_path)
    _quiet_logging(settings)
    out = sys.stdout.buffer
    tally = JudgeTally()
    progress = Progress(
        TextColumn("[bold]judging"),
        BarColumn(),
        TextColumn("{task.completed} done"),
        TimeElapsedColumn(),
        console=console(stderr=True),
        disable=not sys.stderr.isatty(),
    )

    bad_lines = BadLines(_stderr_line)
    with FileJudge(settings) as file_judge, progress:
        task = progress.add_task("judge", total=None)
        for each in file_judge.judge(source, bad_lines):
            tally.add(each.result)
            out.write(dumps_line(judge_json(each.signals, each.result, each.findings)))
            progress.advance(task)
    out.flush()
    bad_lines.close()
    tally.bad_lines = bad_lines.count
    # The output lines say it per record; this says it at once, where a person looks.
    click.echo(tally.line(), err=True)
    _exit_if_unreachable(settings, tally)
    if strict and (tally.bad_lines or tally.failed):
        raise SystemExit(1)


def _exit_if_unreachable(settings: Settings, tally: JudgeTally) -> None:
    """Exit 3, naming the endpoint, when no call of the judge reached it."""
    from observer import app

    if tally.none_reached():
        endpoint = without_credentials(settings.judge.base_url) or "the OpenAI API"
        click.echo(f"observer: the judge endpoint could not be reached ({endpoint})", err=True)
        raise SystemExit(app.EXIT_UNREACHABLE)


@main.group()
def config() -> None:
    """Inspect the configuration."""


@config.command("show")
@_config_option
def config_show(config_path: str | None) -> None:
    """Print the effective configuration as TOML, secrets masked."""
    import tomli_w

    from observer.config import masked

    settings = _settings(config_path)
    click.echo(tomli_w.dumps(masked(settings)), nl=False)


@main.group(short_help="Alert rules: their state, test alerts, backtests.")
def alerts() -> None:
    """Alert rules: their state, a test through each notifier, and backtests."""


def _alert_service(
    config_path: str | None, state_path: str | None
) -> AbstractContextManager[AlertService]:
    """The rules over the state file, which closes with the block."""
    from observer import app

    settings = _settings(config_path)
    _quiet_logging(settings)
    return app.open_alerts(settings, Path(state_path or settings.state.path))


@alerts.command("status", short_help="Every rule and group: value, samples, state.")
@_config_option
@_state_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def alerts_status(config_path: str | None, state_path: str | None, as_json: bool) -> None:
    """Every rule and group: value, samples, state, severity and since when.

    Evaluated now over the stored signal history, from the state the daemon
    saved; nothing is sent and nothing is saved. A rule with no data is listed
    as such. Not on a terminal, the columns are plain and never wrap.
    """
    from observer import app
    from observer.views import alerts as view

    with _alert_service(config_path, state_path) as service:
        report = app.alert_status(service)
    if as_json:
        click.echo(json.dumps(view.status_document(report), indent=2))
        return
    if not sys.stdout.isatty():
        for line in view.status_plain(report):
            click.echo(line)
        return
    shown = console()
    for item in view.status_rich(report, shown.width):
        shown.print(item, highlight=False, markup=False)  # wrapped between words


@alerts.command("test")
@_config_option
@click.option("--notifier", "name", default=None, help="Only this notifier (default: all).")
def alerts_test(config_path: str | None, name: str | None) -> None:
    """Send a test alert through each notifier; exit 1 when one fails."""
    from observer import app
    from observer.config import ConfigError
    from observer.telemetry.logging import configure_logging

    settings = _settings(config_path)
    configure_logging(settings.log.format, "error")
    results = app.test_notifiers(settings, name)
    if not results:
        raise ConfigError("no notifier configured ([[alerts.notifiers]])")
    for result in results:
        each, failure = result
        click.echo(f"{each}: " + (result.sent if failure is None else f"FAILED: {failure}"))
    if any(failure is not None for _, failure in results):
        raise SystemExit(1)


@alerts.command("backtest", short_help="Replay the rules over the stored history.")
@click.option("--from", "start", required=True, help="ISO-8601 start.")
@click.option("--to", "end", default=None, help="ISO-8601 end (default now).")
@click.option("--rule", default=None, help="Only this window rule (default: all).")
@click.option(
    "--step", default="1m", show_default=True, help="Evaluate every this long (event time)."
)
@_config_option
@_state_option
def alerts_backtest(
    start: str,
    end: str | None,
    rule: str | None,
    step: str,
    config_path: str | None,
    state_path: str | None,
) -> None:
    """Replay the rules over the stored history: when each would have fired and resolved.

    The same engine as the daemon, from a clean state; nothing is sent. Try a
    rule here before anyone is paged by it. Not on a terminal, the columns are
    plain and never wrap.
    """
    from observer import app
    from observer.views import alerts as view

    begin = _moment(start)
    finish = _moment(end) if end else app.now_utc()
    if finish <= begin:
        raise click.BadParameter("--to must be after --from")
    try:
        step_s = parse_duration(step).total_seconds()
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    if step_s <= 0:
        raise click.BadParameter("--step must be longer than 0s")
    with _alert_service(config_path, state_path) as service:
        span = service.state.history.span()
        results = app.backtest(service, begin, finish, step_s, rule)
        regressions = app.backtest_regressions(service, begin, finish, step_s, rule)
        incidents = app.backtest_incidents(service, results, regressions, finish)
    held = "the state file holds no signal history yet: nothing to replay"
    if span is not None:
        held = f"history held: {view.when(span[0])} .. {view.when(span[1])}"
    after = [
        *view.backtest_triage(results),
        *view.regression_lines(regressions),
        *view.backtest_incidents(incidents),
    ]
    if not sys.stdout.isatty():  # plain columns, never wrapped, as `alerts status`
        for line in [held, *view.backtest_plain(results, begin, finish), *after]:
            click.echo(line)
        return
    shown = console()
    shown.print(held)
    for table in view.backtest_tables(results, begin, finish, shown.width):
        shown.print(table)
    for line in after:
        shown.print(line, highlight=False, markup=False)


@main.group(short_help="The fleet of `observer run` on Redis.")
def fleet() -> None:
    """The fleet of `observer run` on Redis ([fleet], docs/operating.md#running-a-fleet)."""


@fleet.command("status", short_help="Members, reader, stream length, pending, watermark.")
@_config_option
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
def fleet_status_command(config_path: str | None, as_json: bool) -> None:
    """Members, the reader, the stream's length and pending entries, the watermark.

    Exit 2 without [fleet], 3 when Redis cannot be reached."""
    from observer import app
    from observer.fleet.connect import FleetUnreachable
    from observer.fleet.status import read_status, status_rows
    from observer.views.console import two_columns

    try:
        found = read_status(_settings(config_path))
    except FleetUnreachable as error:
        click.echo(f"observer: {error}", err=True)
        raise SystemExit(app.EXIT_UNREACHABLE) from None
    if as_json:
        click.echo(json.dumps(found.as_json(), indent=2))
        return
    console().print(two_columns("observer fleet status", status_rows(found)))


@fleet.command("dead", short_help="Entries that failed fleet.max_deliveries times.")
@_config_option
@click.option("--replay", is_flag=True, help="Put every dead entry back into the stream.")
@click.option("--limit", default=100, show_default=True, help="Entries shown (or replayed).")
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
def fleet_dead_command(config_path: str | None, replay: bool, limit: int, as_json: bool) -> None:
    """Entries that failed fleet.max_deliveries times, with their traces and why.

    With --replay they go back into the stream, to be scored again (fix what made them
    fail first: an entry that fails again comes back here). Exit 2 without [fleet],
    3 when Redis cannot be reached."""
    from observer import app
    from observer.fleet.connect import FleetUnreachable
    from observer.fleet.status import dead_entries

    try:
        found, replayed = dead_entries(_settings(config_path), limit=limit, replay=replay)
    except FleetUnreachable as error:
        click.echo(f"observer: {error}", err=True)
        raise SystemExit(app.EXIT_UNREACHABLE) from None
    if as_json:
        rows = [
            {
                "trace_id": d.trace_id,
                "reason": d.reason,
                "deliveries": d.deliveries,
                "member": d.member,
                "dead_id": d.dead_id,
            }
            for d in found
        ]
        click.echo(json.dumps({"dead": rows, "replayed": replayed}, indent=2))
        return
    if not found:
        click.echo("no dead entries")
        return
    for d in found:
        click.echo(f"{d.trace_id}  {d.deliveries} deliveries, last on {d.member}: {d.reason}")
    if replay:
        click.echo(f"{replayed} {'entry' if replayed == 1 else 'entries'} put back into the stream")
    else:
        click.echo("`observer fleet dead --replay` puts them back into the stream")


@main.command(
    "init-langfuse", short_help="Create observer's score configs and dashboard in Langfuse."
)
@_config_option
def init_langfuse_command(config_path: str | None) -> None:
    """Create observer's score configs and its Langfuse dashboard (safe to run again).

    A score config for every score observer writes (type, range, categories) and
    a dashboard "observer: answer quality". Says what it created, what existed,
    and what the server refused. Exit 0 all there; 1 something refused or
    differing; 2 bad configuration; 3 Langfuse unreachable; 4 keys rejected.
    """
    from observer import app
    from observer.langfuse_setup import init_langfuse

    settings = _settings(config_path)
    api = app.build_api(settings)
    report = init_langfuse(api)
    shown = console()
    url = without_credentials(settings.langfuse.base_url)
    shown.print(f"Langfuse {url}", markup=False, highlight=False)
    for line in report.lines():
        shown.print(line, markup=False, highlight=False)
    raise SystemExit(report.exit_code)
