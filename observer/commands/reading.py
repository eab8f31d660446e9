"""The commands that read and tell: `check`, `explain`, `discover`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from observer.commands.common import (
    FILE_OPTION,
    JSON_OPTION,
    config_option,
    quiet_logging,
    settings_of,
    state_option,
)
from observer.times import iso
from observer.urls import without_credentials
from observer.views.console import console

if TYPE_CHECKING:
    from observer.config import Settings
    from observer.sources.langfuse import LangfuseSource

T = TypeVar("T")


@click.command(short_help="Check the config, Langfuse and the keys; what will be read.")
@config_option
@state_option
def check(config_path: str | None, state_path: str | None) -> None:
    """Check the config, reach Langfuse, prove the keys, and show what will be read."""
    # The configuration first: a bad one exits 2 before the Langfuse client is loaded.
    settings = settings_of(config_path)
    from observer import app
    from observer.app.checks import recent_sample
    from observer.views.check import check_table
    from observer.views.discover import recent_rows

    outcome = app.check(settings, Path(state_path or settings.state.path))
    found = outcome.rows + (recent_rows(recent_sample(settings)) if outcome.reachable else [])
    console().print(check_table(settings, found))
    raise SystemExit(outcome.exit_code)


def langfuse_read(settings: Settings, read: Callable[[LangfuseSource], T]) -> T:
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


def since_of(text: str, now: datetime) -> datetime:
    from observer.app.discover import since_start

    try:
        return since_start(text, now)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--since") from None


@click.command("explain", short_help="What observer makes of one trace, and why, rule by rule.")
@click.argument("trace_id")
@FILE_OPTION
@click.option(
    "--since",
    default="30d",
    show_default=True,
    help="Look this far back in Langfuse (30m, 2d, or an ISO-8601 time).",
)
@JSON_OPTION
@config_option
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

    settings = settings_of(config_path)
    quiet_logging(settings)

    def fetch(source: LangfuseSource) -> list[dict[str, Any]]:
        end = source.now()
        return fetch_trace(
            source,
            trace_id,
            since_of(since, end),
            end,
            f"at {without_credentials(settings.langfuse.base_url)}",
        )

    if file_path is not None:
        observations = trace_from_file(file_path, trace_id)
    else:
        observations = langfuse_read(settings, fetch)
    explained = explain(trace_id, observations, settings.mapping_rules(), settings.signal_params())
    if as_json:
        click.echo(json.dumps(explanation_json(explained), ensure_ascii=False, indent=2))
    else:
        click.echo("\n".join(explanation_lines(explained)))


@click.command("discover", short_help="How observer reads recent traces, per trace name.")
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
@FILE_OPTION
@JSON_OPTION
@config_option
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

    settings = settings_of(config_path)
    quiet_logging(settings)
    if file_path is not None:
        start = since_of(since, datetime.now(UTC)) if since else None
        sample = discover.sample_from_file(file_path, start, limit)
        window = str(file_path) + (f" since {iso(start)}" if start else "")
    else:

        def read(source: LangfuseSource) -> tuple[discover.TraceSample, str]:
            end = source.now()
            start = since_of(since or "1h", end)
            if start >= end:
                raise click.BadParameter("must be in the past", param_hint="--since")
            found = discover.read_sample(source, start, end, limit)
            return found, f"{iso(start)} .. {iso(end)}"

        sample, window = langfuse_read(settings, read)
    window += newest_note(len(sample.traces), limit)
    found = discover.discover(
        sample.traces, settings.mapping_rules(), discover.rules_from_settings(settings)
    )
    found = replace(found, partial=sample.partial)
    if as_json:
        click.echo(json.dumps(discovery_json(found, window), ensure_ascii=False, indent=2))
    else:
        click.echo("\n".join(discovery_lines(found, window)))
