"""The `observer` command line. Thin: parse arguments, call the core, print.

Exit codes: 0 success; 1 `--strict` and some input was bad, or the trace
`explain` was asked for is not there; 2 bad usage, bad configuration or a bad
file; 3 Langfuse unreachable; 4 Langfuse rejected the keys.

The errors that mean 1 or 2 (ConfigError, StateError, ExplainError) are turned
into `observer: <message>` on stderr and the exit code in one place, the group
every command runs under (`_Commands.invoke`); the commands let them rise.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from observer import __version__
from observer.times import iso, parse_duration, parse_time

if TYPE_CHECKING:  # each command imports what it needs: `observer --help` stays quick
    from rich.console import Console
    from rich.table import Table

    from observer import app
    from observer.alerts.service import AlertService
    from observer.config import Settings
    from observer.judge.outcome import JudgeResult
    from observer.pipeline import PassResult
    from observer.records import RecordError
    from observer.resolver.core import ResolverFindings
    from observer.signals import SignalParams
    from observer.sinks.jsonl import JsonlScoreSink
    from observer.sources.langfuse import LangfuseSource
    from observer.summary import Summary
    from observer.telemetry.metrics import Metrics

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
    from observer.config import load_settings

    return load_settings(config_path)


def _closed_pipe_exit() -> None:
    """`observer ... | head` ends quietly with 0, the Unix convention for a reader that left."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's last flush cannot fail
    except (OSError, ValueError, io.UnsupportedOperation):
        pass
    raise SystemExit(0)


def _Console(**kwargs: Any) -> Console:
    """A rich Console that ends quietly on a closed pipe (rich itself exits 1 there)."""
    from rich.console import Console

    class QuietOnClosedPipe(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            _closed_pipe_exit()

    return QuietOnClosedPipe(**kwargs)


EXIT_BAD_INPUT = 2  # bad configuration, state file or input file (app.EXIT_CONFIG)
EXIT_NOT_FOUND = 1  # the trace `explain` was asked for is not there

# The errors a user can fix, by exit code: (module, class) so that none is imported
# to be caught (`observer --help` and `observer score` stay quick). The first match wins.
_USER_ERRORS = (
    ("observer.explain", "TraceNotFound", EXIT_NOT_FOUND),
    ("observer.explain", "ExplainError", EXIT_BAD_INPUT),
    ("observer.config", "ConfigError", EXIT_BAD_INPUT),
    ("observer.state.db", "StateError", EXIT_BAD_INPUT),
)


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
            _closed_pipe_exit()
        except Exception as error:
            code = user_error_exit(error)
            if code is None:
                raise
            click.echo(f"observer: {error}", err=True)
            raise SystemExit(code) from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="observer")
def main() -> None:
    """Trust signals for RAG answers traced in Langfuse."""


def bad_line_json(number: int, error: RecordError) -> str:
    """`{"line": N, "column": C, "error": ...}`: C is within input line N, when known."""
    report: dict[str, Any] = {"line": number}
    if error.column is not None:
        report["column"] = error.column
    report["error"] = str(error)
    return json.dumps(report, ensure_ascii=False)


def score_lines(
    lines: Iterable[bytes],
    params: SignalParams,
    emit: Callable[[dict[str, Any]], None] | None,
    report_error: Callable[[int, RecordError], None],
    summary: Summary,
) -> None:
    """Score RagRecord JSON lines; a bad line is reported and skipped."""
    from observer.output import signals_json
    from observer.records import RecordError, parse_record
    from observer.signals import compute

    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = parse_record(line)
        except RecordError as error:
            summary.bad_lines += 1
            report_error(number, error)
            continue
        try:
            signals = compute(record, params)
        except Exception as error:  # a strange record must never stop the stream
            summary.bad_lines += 1
            report_error(
                number,
                RecordError(f"internal error while scoring: {type(error).__name__}: {error}"),
            )
            continue
        summary.add(signals)
        if emit is not None:
            emit(signals_json(signals))


@main.command()
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
    and skipped.
    """
    from observer.output import dumps_line
    from observer.summary import Summary, summary_table

    params = _settings(config_path).signal_params()
    out = sys.stdout.buffer

    def emit(obj: dict[str, Any]) -> None:
        out.write(dumps_line(obj))

    def report_error(number: int, error: RecordError) -> None:
        sys.stderr.write(bad_line_json(number, error) + "\n")

    summary = Summary()
    score_lines(source, params, None if show_summary else emit, report_error, summary)
    out.flush()
    if show_summary:
        _Console().print(
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


def _pass_table(title: str, result: PassResult, parts: app.Parts, extra: dict[str, str]) -> Table:
    from rich.table import Table

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
    metrics = parts.metrics
    table.add_row("scores queued", f"{result.scores:,}")
    if parts.judge is not None:
        from observer.judge.outcome import JUDGE_SCORE_NAMES

        judged = sum(
            int(metrics.value("observer_judged_traces_total", result=result))
            for result in ("judged", "abstained")
        )
        errors = int(metrics.value("observer_judged_traces_total", result="error"))
        table.add_row(
            "traces judged", f"{judged:,}" + (f" ({errors:,} judge errors)" if errors else "")
        )
        # Labelled `name`: Metrics.value's own first parameter, so asked of the registry.
        judge_scores = sum(
            metrics.registry.get_sample_value("observer_scores_enqueued_total", {"name": n}) or 0.0
            for n in JUDGE_SCORE_NAMES
        )
        table.add_row("judge scores queued", f"{int(judge_scores):,}")
    # Delivered counts the judge's scores, and any the outbox held from an earlier run.
    delivered = int(metrics.value("observer_scores_pushed_total"))
    note = " (the judge's included)" if parts.judge is not None else ""
    table.add_row("scores delivered", f"{delivered:,}{note}")
    dropped = sum(
        parts.metrics.value("observer_scores_dropped_total", reason=r) for r in ("rejected",)
    )
    if dropped:
        table.add_row("scores refused by Langfuse", f"{int(dropped):,}")
    for key, value in extra.items():
        table.add_row(key, value)
    return table


@main.command()
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
    if dry_run is not None:  # no score post, so no server version to require
        with (
            _dry_run(settings, state_path, dry_run) as (scratch, sink),
            app.build(settings, state_path=scratch, sink=sink) as parts,
        ):
            _run_once_command(parts, dry_run)
    with app.build(settings, state_path=state_path) as parts:
        if not once:
            raise SystemExit(app.run_daemon(parts))
        app.require_supported_server(settings)  # batch score posts need v4.59+
        _run_once_command(parts, None)


def _run_once_command(parts: app.Parts, dry_run: str | None) -> NoReturn:
    from observer import app

    with _progress_line("run --once", parts.metrics):
        outcome = app.run_once(parts)
    if outcome.passed is not None:
        extra = {} if dry_run is None else _dry_run_rows(parts, dry_run)
        title = "observer run --once" + (" --dry-run" if dry_run is not None else "")
        # With the scores on stdout, the table goes to stderr.
        console = _Console(stderr=dry_run == "-")
        console.print(_pass_table(title, outcome.passed, parts, extra))
    if outcome.error:
        click.echo(f"observer: {outcome.error}", err=True)
    raise SystemExit(outcome.exit_code)


@contextmanager
def _dry_run(
    settings: Settings, state_path: str | None, target: str
) -> Iterator[tuple[Path, JsonlScoreSink]]:
    """A copy of the state file in a scratch directory, and the sink writing to `target`."""
    import tempfile

    from observer.dryrun import scores_sink, scratch_state

    real = Path(state_path or settings.state.path)
    with tempfile.TemporaryDirectory(prefix="observer-dry-run-") as scratch:
        yield scratch_state(real, Path(scratch)), scores_sink(target)


def _dry_run_rows(parts: app.Parts, target: str) -> dict[str, str]:
    from observer.sinks.jsonl import JsonlScoreSink

    sink = parts.dispatcher.sink
    written = sink.written if isinstance(sink, JsonlScoreSink) else 0
    where = "stdout" if target == "-" else target
    return {
        "dry run": f"{written:,} scores written to {where}; nothing pushed to Langfuse, "
        "the state file untouched"
    }


@contextmanager
def _progress_line(title: str, metrics: Metrics) -> Iterator[None]:
    """On a terminal, one line on stderr kept current while the work runs: pages,
    observations, traces and scores, read from the metrics (a first pass at 25
    requests a minute can take minutes). Elsewhere, nothing."""
    if not sys.stderr.isatty():
        yield
        return
    import threading

    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    def line() -> str:
        pages = metrics.value("observer_source_requests_total", result="ok")
        observations = metrics.value("observer_observations_read_total")
        traces = metrics.total("observer_traces_total")
        queued = metrics.total("observer_scores_enqueued_total")
        delivered = metrics.value("observer_scores_pushed_total")
        return (
            f"{pages:,.0f} pages, {observations:,.0f} observations, {traces:,.0f} traces, "
            f"{queued:,.0f} scores queued, {delivered:,.0f} delivered"
        )

    done = threading.Event()
    with Progress(
        SpinnerColumn(),
        TextColumn(f"[bold]{title}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=_Console(stderr=True),
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


def _moment(value: str) -> datetime:
    moment = parse_time(value)
    if moment is None:
        raise click.BadParameter(f"not an ISO-8601 time: {value!r}")
    return moment


@main.command()
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


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C


def _backfill_command(
    parts: app.Parts, begin: datetime, finish: datetime, chunk_hours: float, dry_run: str | None
) -> NoReturn:
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from observer import app

    total_s = (finish - begin).total_seconds()
    reached = begin
    with Progress(
        TextColumn("[bold]backfill"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[note]}"),
        console=_Console(stderr=True),
    ) as bar:
        task = bar.add_task("backfill", total=total_s, note="")
        seen = {"scored": 0, "traces": 0}

        def progress(at: datetime, result: PassResult) -> None:
            nonlocal reached
            reached = at
            seen["scored"] += result.scored + result.rescored
            seen["traces"] += result.traces
            bar.update(
                task,
                completed=(at - begin).total_seconds(),
                note=f"{seen['traces']:,} traces, {seen['scored']:,} scored",
            )

        with app.signals_set(parts.stop):
            outcome = app.backfill(parts, begin, finish, timedelta(hours=chunk_hours), progress)
    stopped = outcome.error == "stopped"
    if outcome.passed is not None:
        extra = {} if dry_run is None else _dry_run_rows(parts, dry_run)
        if stopped:
            extra["window done"] = f"{iso(begin)} .. {iso(reached)} (stopped there)"
        title = "observer backfill" + (" --dry-run" if dry_run is not None else "")
        _Console(stderr=dry_run == "-").print(_pass_table(title, outcome.passed, parts, extra))
    if stopped:
        resume = f"{_self_command()} backfill --from {iso(reached)} --to {iso(finish)}"
        click.echo(f"observer: stopped; to go on where it stopped:\n  {resume}", err=True)
        raise SystemExit(EXIT_INTERRUPTED)
    if outcome.error:
        click.echo(f"observer: {outcome.error}", err=True)
    raise SystemExit(outcome.exit_code)


@main.command()
@_config_option
@_state_option
def check(config_path: str | None, state_path: str | None) -> None:
    """Check the config, reach Langfuse, prove the keys, and show what will be read."""
    # The configuration first: a bad one exits 2 before the Langfuse client is loaded.
    settings = _settings(config_path)
    from rich.table import Table

    from observer import app
    from observer.scores import SIGNAL_SCORE_NAMES
    from observer.sources.langfuse import FIELDS

    rules = settings.mapping_rules()
    src = settings.source
    console = _Console()
    table = Table(title="observer check", show_header=False)
    table.add_column("")
    table.add_column("", overflow="fold")
    table.add_row("config", "valid")
    table.add_row("Langfuse", settings.langfuse.base_url)
    table.add_row("public key", settings.langfuse.public_key or "(not set)")
    table.add_row("reads", "GET /api/public/v2/observations, fields " + FIELDS)
    table.add_row("metadata expanded", ", ".join(rules.metadata_keys))
    table.add_row(
        "environments", ", ".join(src.environments) or "all (but langfuse-llm-as-a-judge)"
    )
    table.add_row("trace names", ", ".join(src.trace_names) or "all")
    table.add_row("tags", ", ".join(src.tags) or "any")
    table.add_row("generation", ", ".join(rules.generation_names or rules.generation_types))
    table.add_row(
        "sources",
        "the last output of " + ", ".join(rules.retriever_names) + " before the generation"
        if rules.retriever_names
        else "the last list of documents before the generation, of any type "
        "(a retriever, a reranker, a tool)",
    )
    table.add_row("hook", settings.mapping.hook or "none (default convention)")
    table.add_row(
        "polling",
        f"every {src.poll_interval_s:g} s, settle {src.settle_s:g} s, "
        f"overlap {src.overlap_s:g} s re-read "
        + (f"every {src.sweep_interval_s:g} s, " if src.sweep_interval_s else "every pass, ")
        + f"first look back {src.lookback_s:g} s, "
        f"at most {src.requests_per_minute:g} requests/min, {src.page_limit} per page",
    )
    from observer.judge.outcome import JUDGE_SCORE_NAMES
    from observer.resolver.scores import RESOLVER_SCORE_NAMES

    names = list(SIGNAL_SCORE_NAMES)
    names += RESOLVER_SCORE_NAMES if settings.resolver.kind else ()
    names += JUDGE_SCORE_NAMES if settings.judge.enabled else ()
    table.add_row("writes", "POST /api/public/scores (" + ", ".join(names) + ")")
    outcome = app.check(settings, Path(state_path or settings.state.path))
    for key, value in outcome.rows:
        table.add_row(key, value)
    if outcome.reachable:
        from rich.markup import escape

        for key, value in _recent_summary(settings):
            table.add_row(key, escape(value))
    code = outcome.exit_code
    console.print(table)
    raise SystemExit(code)


def _recent_summary(settings: Settings) -> list[tuple[str, str]]:
    """`check`'s lines of `discover` over the last hour (a failed read is a line too)."""
    from observer import app, discover
    from observer.errors import RemoteError
    from observer.telemetry.metrics import Metrics

    try:
        source = app.build_source(settings, Metrics(), max_attempts=1)
        end = source.now()
        sample = discover.read_sample(source, end - timedelta(hours=1), end, CHECK_TRACES)
    except RemoteError as error:
        return [("traces read", f"not read: {error}")]
    rules = settings.mapping_rules()
    found = discover.discover(sample.traces, rules, discover.rules_from_settings(settings))
    return discover.check_rows(found, "the last hour" + _at_most(sample.traces, CHECK_TRACES))


# How many of the last hour's traces `check` reads for its summary.
CHECK_TRACES = 200


def _at_most(traces: dict[str, Any], limit: int) -> str:
    return f", the newest {limit}" if len(traces) >= limit else ""


def _langfuse_read(settings: Settings, read: Callable[[LangfuseSource], T]) -> T:
    """Run `read` on the source `run` would build; exit 2, 3 or 4 as `run --once` does."""
    from observer import app
    from observer.errors import RemoteError
    from observer.telemetry.metrics import Metrics

    try:
        source = app.build_source(
            settings, Metrics(), max_attempts=min(2, settings.source.max_attempts)
        )
        return read(source)
    except RemoteError as error:
        click.echo(f"observer: Langfuse {settings.langfuse.base_url}: {error}", err=True)
        raise SystemExit(app.exit_code(error)) from None


def _since(text: str, now: datetime) -> datetime:
    from observer.discover import since_start

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


@main.command("explain")
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
    from observer.explain import (
        explain,
        explanation_json,
        explanation_lines,
        fetch_trace,
        trace_from_file,
    )

    settings = _settings(config_path)
    _quiet_logging(settings)

    def fetch(source: LangfuseSource) -> list[dict[str, Any]]:
        end = source.now()
        return fetch_trace(
            source, trace_id, _since(since, end), end, f"at {settings.langfuse.base_url}"
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


@main.command("discover")
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
    from observer import discover

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
    window += _at_most(sample.traces, limit)
    found = discover.discover(
        sample.traces, settings.mapping_rules(), discover.rules_from_settings(settings)
    )
    found = replace(found, partial=sample.partial)
    if as_json:
        click.echo(json.dumps(discover.discovery_json(found, window), ensure_ascii=False, indent=2))
    else:
        click.echo("\n".join(discover.discovery_lines(found, window)))


def _quiet_logging(settings: Settings) -> None:
    """Reading commands: their output is the report; the log says only what went wrong."""
    from observer.telemetry.logging import configure_logging

    configure_logging(settings.log.format, "warning")


@main.command()
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
    from observer.telemetry.logging import configure_logging

    settings = _settings(config_path)
    configure_logging(settings.log.format, "warning")
    outcome, parts = app.demo(settings, Path(out), Path(state_path))
    with parts:
        _demo_report(parts, outcome, out, state_path, serve)


def _demo_report(
    parts: app.Parts, outcome: app.OnceResult, out: str, state_path: str, serve: bool
) -> NoReturn:
    from observer import app
    from observer.sinks.jsonl import JsonlScoreSink
    from observer.summary import summary_table

    console = _Console()
    sink = parts.dispatcher.sink
    written = sink.written if isinstance(sink, JsonlScoreSink) else 0
    if outcome.passed is not None:
        if written:
            extra = {"scores written to": f"{out} ({written:,} scores)"}
        else:
            extra = {
                "scores written": "none: every trace is unchanged since the last run on "
                f"this state, which wrote its scores ({out} left as it was)"
            }
        console.print(
            _pass_table("observer demo: bundled Langfuse traces", outcome.passed, parts, extra)
        )
    console.print(
        summary_table(
            parts.summary, title=f"signals of the {parts.summary.records} answer traces read"
        )
    )
    console.print(_demo_next_steps(out, state_path))
    if serve and outcome.exit_code == app.EXIT_OK:
        app.serve_until_stopped(
            parts,
            lambda url: console.print(
                f"\nserving {url}/metrics, /healthz, /readyz (Ctrl-C to stop)"
            ),
        )
    if outcome.error:
        click.echo(f"observer: {outcome.error}", err=True)
    raise SystemExit(outcome.exit_code)


def _self_command() -> str:
    """How to run observer again, as this process was run: `observer` when that is on
    PATH, else the path it was started by (`.venv/bin/observer` from the checkout)."""
    import shutil

    started = Path(sys.argv[0])
    if started.name == "__main__.py" and started.parent.name == "observer":
        return f"{_shown_path(Path(sys.executable))} -m observer"
    if started.name != "observer":  # called from another program (a test runner, a script)
        started = Path(sys.executable).parent / "observer"
        if not started.exists():
            return "observer"
    on_path = shutil.which(started.name)
    if on_path and Path(on_path).resolve() == started.resolve():
        return started.name
    return _shown_path(started)


def _shown_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _demo_next_steps(out: str, state: str) -> str:
    observer = _self_command()
    return "\n".join(
        [
            "",
            "[bold]Next[/bold]",
            f"  the scores Langfuse would get:  head -3 {out}",
            f"  the alerts on the demo's history: {observer} alerts status --state {state}",
            f"  score records of your own:      {observer} score FILE.jsonl --summary",
            "  then your own Langfuse:",
            "    export LANGFUSE_PUBLIC_KEY=pk-lf-... LANGFUSE_SECRET_KEY=sk-lf-...",
            "    export LANGFUSE_BASE_URL=https://cloud.langfuse.com",
            f"    {observer} check",
            f"    {observer} run --once",
            "  and in Langfuse, open a trace: the scores sit on its answer generation",
            "  (confidence, citation_coverage, crag_grade, ungrounded ...).",
        ]
    )


def judge_json(
    signals_obj: dict[str, Any], result: JudgeResult, findings: ResolverFindings | None = None
) -> dict[str, Any]:
    """`observer score` output plus what the resolver (when configured) and the judge found."""
    resolver = (
        {}
        if findings is None
        else {
            "missing_chunks": list(findings.missing),
            "stale_chunks": list(findings.stale),
            "unverifiable_chunks": findings.unverifiable,
        }
    )
    return {
        **signals_obj,
        **resolver,
        "claims": [
            {"id": c.id, "text": c.text, "sentence": c.sentence, "citations": list(c.citations)}
            for c in result.claims
        ],
        "verdicts": [
            {"id": v.id, "supported": v.supported, "cited_support": v.cited_support}
            | ({"reason": v.reason} if v.reason else {})
            for v in result.verdicts
        ],
        "faithfulness": result.faithfulness,
        "citation_accuracy": result.citation_accuracy,
        "critical_unsupported": result.critical_unsupported,
        "abstained": result.abstained,
        "calls": result.calls,
        "tokens": result.tokens,
        "judge_error": result.error,
    }


@main.command()
@click.argument("source", type=click.File("rb"), default="-", metavar="[PATH|-]")
@_config_option
@click.option("--strict", is_flag=True, help="Exit 1 when any line was bad or could not be judged.")
def judge(source: IO[bytes], config_path: str | None, strict: bool) -> None:
    """Judge RagRecord JSON lines offline with the configured LLM (every line, no sampling).

    Writes `observer score`'s object plus claims, verdicts, faithfulness,
    citation_accuracy, critical_unsupported, abstained, calls, tokens and
    judge_error, one per record, in input order. Needs OBSERVER_JUDGE_MODEL and
    OPENAI_API_KEY (or OBSERVER_JUDGE_BASE_URL for a keyless endpoint). With a
    [resolver] configured, the cited chunks are looked up first (missing_chunks,
    stale_chunks) and the judge's funnel applies, as in the daemon.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from observer import app
    from observer.app.judge_file import FileJudge
    from observer.output import dumps_line
    from observer.telemetry.logging import configure_logging

    settings = _settings(config_path)
    configure_logging(settings.log.format, "warning")
    out = sys.stdout.buffer
    bad = failed = judged = tokens = 0
    errors: Counter[str] = Counter()
    progress = Progress(
        TextColumn("[bold]judging"),
        BarColumn(),
        TextColumn("{task.completed} done"),
        TimeElapsedColumn(),
        console=_Console(stderr=True),
        disable=not sys.stderr.isatty(),
    )

    def bad_line(number: int, error: RecordError) -> None:
        nonlocal bad
        bad += 1
        sys.stderr.write(bad_line_json(number, error) + "\n")

    with FileJudge(settings) as file_judge, progress:
        task = progress.add_task("judge", total=None)
        for each in file_judge.judge(source, bad_line):
            tokens += each.result.tokens
            if each.result.error is None:
                judged += 1
            else:
                failed += 1
                errors[each.result.error.split(":", 1)[0]] += 1
            out.write(dumps_line(judge_json(each.signals, each.result, each.findings)))
            progress.advance(task)
    out.flush()
    # The output lines say it per record; this says it at once, where a person looks.
    summary = f"observer judge: {judged + failed} records, {judged} judged"
    if failed:
        reasons = ", ".join(f"{reason} {count}" for reason, count in errors.most_common())
        summary += f", {failed} not judged ({reasons})"
    summary += f", {tokens:,} tokens"
    if bad:
        summary += f", {bad} bad lines"
    click.echo(summary, err=True)
    if failed and not judged and set(errors) == {"unreachable"}:
        endpoint = settings.judge.base_url or "the OpenAI API"
        click.echo(f"observer: the judge endpoint could not be reached ({endpoint})", err=True)
        raise SystemExit(app.EXIT_UNREACHABLE)
    if strict and (bad or failed):
        raise SystemExit(1)


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


@main.group()
def alerts() -> None:
    """Alert rules: their state, a test through each notifier, and backtests."""


def _alert_service(
    config_path: str | None, state_path: str | None
) -> tuple[Settings, AlertService]:
    from observer import app
    from observer.telemetry.logging import configure_logging

    settings = _settings(config_path)
    configure_logging(settings.log.format, "warning")
    return settings, app.open_alerts(settings, Path(state_path or settings.state.path))


def _group(group: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{k}={v}" for k, v in group) or "-"


def _when(at: float | None) -> str:
    return iso(datetime.fromtimestamp(at, UTC)) if at is not None else "-"


@alerts.command("status")
@_config_option
@_state_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def alerts_status(config_path: str | None, state_path: str | None, as_json: bool) -> None:
    """Every rule and group: value, samples, state, severity and since when.

    Evaluated now over the stored signal history, from the state the daemon
    saved; nothing is sent and nothing is saved. A rule with no data is listed
    as such. Not on a terminal, the columns are plain and never wrap.
    """
    _, service = _alert_service(config_path, state_path)
    with closing(service.state):
        statuses = service.status()
        watermark = service.state.watermark()
    rows: list[dict[str, Any]] = []
    for item in statuses:
        s = item.state
        state: str = s.status
        if s.samples == 0:
            state += " (no data)"
        elif s.samples < item.rule.min_samples:
            state += f" (under {item.rule.min_samples} samples)"
        rows.append(
            {
                "rule": item.rule.name,
                "group": dict(item.group),
                "value": s.value,
                "samples": s.samples,
                "state": state,
                "severity": s.severity,
                "since": _when(s.since) if s.since is not None else None,
            }
        )
    listed = {row["rule"] for row in rows}
    for rule in service.rules:  # no data is a state too
        if rule.name not in listed:
            rows.append(
                {
                    "rule": rule.name,
                    "group": {},
                    "value": None,
                    "samples": 0,
                    "state": "ok (no data)",
                    "severity": None,
                    "since": None,
                }
            )
    ends = _when(watermark.timestamp()) if watermark else None
    if as_json:
        document = {
            "window_rules": len(service.rules),
            "trace_rules": len(service.trace_rules),
            "watermark": ends,
            "rules": rows,
        }
        click.echo(json.dumps(document, indent=2))
        return
    header = ("rule", "group", "value", "samples", "state", "severity", "since")
    cells = [
        (
            row["rule"],
            _group(tuple(row["group"].items())),
            "-" if row["value"] is None else f"{row['value']:.4g}",
            str(row["samples"]),
            row["state"],
            row["severity"] or "-",
            row["since"] or "-",
        )
        for row in rows
    ]
    footer = (
        f"{len(service.rules)} window rules, {len(service.trace_rules)} trace rules; "
        f"windows end at the watermark {ends or '(none)'}"
    )
    if not sys.stdout.isatty():
        # For grep and scripts: aligned columns, one row a line, never wrapped.
        widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
        for line in [header, *cells]:
            click.echo(
                "  ".join(
                    cell.ljust(width) for cell, width in zip(line, widths, strict=True)
                ).rstrip()
            )
        click.echo(footer)
        return
    from rich.table import Table

    table = Table(title="observer alerts status")
    for column in header:
        table.add_column(column, overflow="fold")
    for line in cells:
        table.add_row(*line)
    console = _Console()
    console.print(table)
    console.print(footer)


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


@alerts.command("backtest")
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
    rule here before anyone is paged by it.
    """
    from rich.table import Table

    from observer import app

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
    _, service = _alert_service(config_path, state_path)
    with closing(service.state):
        span = service.state.history.span()
        results = app.backtest(service, begin, finish, step_s, rule)
    console = _Console()
    if span is None:
        console.print("the state file holds no signal history yet: nothing to replay")
    else:
        console.print(f"history held: {_when(span[0])} .. {_when(span[1])}")
    summary = Table(title=f"observer alerts backtest {iso(begin)} .. {iso(finish)}")
    for column in ("rule", "fired", "resolved", "notifications", "firing at the end"):
        summary.add_column(column)
    for result in results:
        fired = sum(1 for e in result.events if e.transition in ("firing", "no_data"))
        resolved = sum(1 for e in result.events if e.transition == "resolved")
        summary.add_row(
            result.rule.name,
            str(fired),
            str(resolved),
            str(result.notifications),
            str(fired - resolved),
        )
    console.print(summary)
    timeline = Table(title="what would have been notified")
    for column in ("at", "rule", "group", "event", "severity", "value", "samples"):
        timeline.add_column(column, overflow="fold")
    events = sorted((e for r in results for e in r.events if e.notify), key=lambda e: e.at)
    for event in events:
        timeline.add_row(
            _when(event.at),
            event.rule,
            _group(event.group),
            event.transition,
            event.severity,
            "-" if event.value is None else f"{event.value:.4g}",
            str(event.samples),
        )
    if events:
        console.print(timeline)


@main.group()
def fleet() -> None:
    """The fleet of `observer run` on Redis ([fleet], docs/operating.md#running-a-fleet)."""


@fleet.command("status")
@_config_option
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
def fleet_status_command(config_path: str | None, as_json: bool) -> None:
    """Members, the reader, the stream's length and pending entries, the watermark.

    Exit 2 without [fleet], 3 when Redis cannot be reached."""
    import json

    from rich.table import Table

    from observer import app
    from observer.config import ConfigError
    from observer.fleet import status
    from observer.fleet.connect import FleetUnreachable, connect, translated

    settings = _settings(config_path)
    if settings.fleet is None:
        raise ConfigError("no [fleet] section: this observer is not in a fleet")
    try:
        client = connect(settings)
        with translated(f"Redis (the URL in {settings.fleet.secret_env})"):
            found = status.fleet_status(client, settings.fleet.name, settings.fleet.lease_s)
    except FleetUnreachable as error:
        click.echo(f"observer: {error}", err=True)
        raise SystemExit(app.EXIT_UNREACHABLE) from None
    if as_json:
        click.echo(json.dumps(found.as_json(), indent=2))
        return
    table = Table(title="observer fleet status", show_header=False)
    for key, value in status.status_rows(found):
        table.add_row(key, value)
    _Console().print(table)


@main.command("init-langfuse")
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
    console = _Console()
    console.print(f"Langfuse {settings.langfuse.base_url}", markup=False, highlight=False)
    for line in report.lines():
        console.print(line, markup=False, highlight=False)
    raise SystemExit(report.exit_code)
