"""What every command shares: its options, the settings it reads, its logging."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from observer.times import parse_time

if TYPE_CHECKING:
    from observer import app
    from observer.config import Settings

F = TypeVar("F", bound=Callable[..., Any])

# ctx.meta's key: show the traceback of an unexpected error (--debug, or log.level debug).
DEBUG = "observer.debug"
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C
DEMO_STATE = "observer-demo.sqlite"


def config_option(func: F) -> F:
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        envvar="OBSERVER_CONFIG",
        help="TOML config file (env: OBSERVER_CONFIG). Every key can also be set "
        "from the environment as OBSERVER_<SECTION>__<KEY>.",
    )(func)


def settings_of(config_path: str | None) -> Settings:
    """The settings, at debug level under --debug; a debug level also asks for tracebacks."""
    from observer.config import load_settings

    settings = load_settings(config_path)
    meta = click.get_current_context().meta
    if meta.get(DEBUG) and settings.log.level != "debug":
        log = settings.log.model_copy(update={"level": "debug"})
        settings = settings.model_copy(update={"log": log})
    meta[DEBUG] = settings.log.level == "debug"
    return settings


def stderr_line(line: str) -> None:
    sys.stderr.write(line + "\n")


def state_option(func: F) -> F:
    return click.option(
        "--state",
        "state_path",
        type=click.Path(dir_okay=False),
        default=None,
        envvar="OBSERVER_STATE__PATH",
        help="SQLite state file (default: state.path of the config, observer.sqlite).",
    )(func)


def dry_run_option(lead: str) -> Callable[[F], F]:
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


def start_logging(settings: Settings) -> None:
    from observer.telemetry.logging import configure_logging

    configure_logging(settings.log.format, settings.log.level, log_content=settings.log.log_content)


def quiet_logging(settings: Settings) -> None:
    """Reading commands: their output is the report; the log says only what went wrong
    (everything at log.level debug, or under --debug)."""
    from observer.telemetry.logging import configure_logging

    configure_logging(settings.log.format, "debug" if settings.log.level == "debug" else "warning")


def moment(value: str) -> datetime:
    moment = parse_time(value)
    if moment is None:
        raise click.BadParameter(f"not an ISO-8601 time: {value!r}")
    return moment


def written(parts: app.Parts) -> int:
    """How many scores the JSON lines sink wrote (the dry run's, the demo's)."""
    from observer.sinks.jsonl import JsonlScoreSink

    sink = parts.dispatcher.sink
    return sink.written if isinstance(sink, JsonlScoreSink) else 0


FILE_OPTION = click.option(
    "--file",
    "file_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read observations from this file instead of Langfuse: a JSON list, JSON lines, "
    "or an object with `observations` or `data`.",
)


JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
