"""The `observer` command line. Thin: parse arguments, call the core, print.

Exit codes: 0 success; 1 `--strict` and some input was bad; 2 bad usage or
bad configuration.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import IO, Any, TypeVar

import click
import tomli_w
from rich.console import Console

from observer import __version__
from observer.config import ConfigError, Settings, load_settings, masked
from observer.output import dumps_line, signals_json
from observer.records import RecordError, parse_record
from observer.signals import SignalParams, compute
from observer.summary import Summary, summary_table

F = TypeVar("F", bound=Callable[..., Any])


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
    try:
        return load_settings(config_path)
    except ConfigError as error:
        click.echo(f"observer: {error}", err=True)
        raise SystemExit(2) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="observer")
def main() -> None:
    """Trust signals for RAG answers traced in Langfuse."""


def score_lines(
    lines: Iterable[bytes],
    params: SignalParams,
    emit: Callable[[dict[str, Any]], None] | None,
    report_error: Callable[[int, str], None],
    summary: Summary,
) -> None:
    """Score RagRecord JSON lines; a bad line is reported and skipped."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = parse_record(line)
        except RecordError as error:
            summary.bad_lines += 1
            report_error(number, str(error))
            continue
        try:
            signals = compute(record, params)
        except Exception as error:  # a strange record must never stop the stream
            summary.bad_lines += 1
            report_error(number, f"internal error while scoring: {type(error).__name__}: {error}")
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
    not a valid record is reported on stderr as {"line": N, "error": "..."}
    and skipped.
    """
    params = _settings(config_path).signal_params()
    out = sys.stdout.buffer

    def emit(obj: dict[str, Any]) -> None:
        out.write(dumps_line(obj))

    def report_error(number: int, message: str) -> None:
        sys.stderr.write(json.dumps({"line": number, "error": message}, ensure_ascii=False) + "\n")

    summary = Summary()
    try:
        score_lines(source, params, None if show_summary else emit, report_error, summary)
        out.flush()
        if show_summary:
            Console().print(
                summary_table(summary, title=f"observer score: {getattr(source, 'name', '-')}")
            )
    except BrokenPipeError:  # `observer score ... | head` is fine
        sys.stderr.close()
        raise SystemExit(0) from None
    if strict and summary.bad_lines:
        raise SystemExit(1)


@main.group()
def config() -> None:
    """Inspect the configuration."""


@config.command("show")
@_config_option
def config_show(config_path: str | None) -> None:
    """Print the effective configuration as TOML, secrets masked."""
    settings = _settings(config_path)
    click.echo(tomli_w.dumps(masked(settings)), nl=False)
