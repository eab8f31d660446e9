"""The commands an operator keeps things with: `config show`, `alerts`, `fleet`, `init-langfuse`."""

from __future__ import annotations

import json
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from observer.commands.common import (
    config_option,
    moment,
    quiet_logging,
    settings_of,
    state_option,
)
from observer.times import parse_duration
from observer.urls import without_credentials
from observer.views.console import console

if TYPE_CHECKING:
    from observer.alerts.service import AlertService

T = TypeVar("T")


@click.group()
def config() -> None:
    """Inspect the configuration."""


@config.command("show")
@config_option
def config_show(config_path: str | None) -> None:
    """Print the effective configuration as TOML, secrets masked."""
    import tomli_w

    from observer.config import masked

    settings = settings_of(config_path)
    click.echo(tomli_w.dumps(masked(settings)), nl=False)


@click.group(short_help="Alert rules: their state, test alerts, backtests.")
def alerts() -> None:
    """Alert rules: their state, a test through each notifier, and backtests."""


def _alert_service(
    config_path: str | None, state_path: str | None
) -> AbstractContextManager[AlertService]:
    """The rules over the state file, which closes with the block."""
    from observer import app

    settings = settings_of(config_path)
    quiet_logging(settings)
    return app.open_alerts(settings, Path(state_path or settings.state.path))


@alerts.command("status", short_help="Every rule and group: value, samples, state.")
@config_option
@state_option
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
@config_option
@click.option("--notifier", "name", default=None, help="Only this notifier (default: all).")
def alerts_test(config_path: str | None, name: str | None) -> None:
    """Send a test alert through each notifier; exit 1 when one fails."""
    from observer import app
    from observer.config import ConfigError
    from observer.telemetry.logging import configure_logging

    settings = settings_of(config_path)
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
@config_option
@state_option
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

    begin = moment(start)
    finish = moment(end) if end else app.now_utc()
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


@click.group(short_help="The fleet of `observer run` on Redis.")
def fleet() -> None:
    """The fleet of `observer run` on Redis ([fleet], docs/operating.md#running-a-fleet)."""


@fleet.command("status", short_help="Members, reader, stream length, pending, watermark.")
@config_option
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
def fleet_status_command(config_path: str | None, as_json: bool) -> None:
    """Members, the reader, the stream's length and pending entries, the watermark.

    Exit 2 without [fleet], 3 when Redis cannot be reached."""
    from observer.fleet.status import read_status, status_rows
    from observer.views.console import two_columns

    found = read_status(settings_of(config_path))  # unreachable: 3, as every command's
    if as_json:
        click.echo(json.dumps(found.as_json(), indent=2))
        return
    console().print(two_columns("observer fleet status", status_rows(found)))


@fleet.command("dead", short_help="Entries that failed fleet.max_deliveries times.")
@config_option
@click.option("--replay", is_flag=True, help="Put every dead entry back into the stream.")
@click.option("--limit", default=100, show_default=True, help="Entries shown (or replayed).")
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
def fleet_dead_command(config_path: str | None, replay: bool, limit: int, as_json: bool) -> None:
    """Entries that failed fleet.max_deliveries times, with their traces and why.

    With --replay they go back into the stream, to be scored again (fix what made them
    fail first: an entry that fails again comes back here). Exit 2 without [fleet],
    3 when Redis cannot be reached."""
    from observer.fleet.status import dead_entries

    found, replayed = dead_entries(settings_of(config_path), limit=limit, replay=replay)
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


@click.command(
    "init-langfuse", short_help="Create observer's score configs and dashboard in Langfuse."
)
@config_option
def init_langfuse_command(config_path: str | None) -> None:
    """Create observer's score configs and its Langfuse dashboard (safe to run again).

    A score config for every score observer writes (type, range, categories) and
    a dashboard "observer: answer quality". Says what it created, what existed,
    and what the server refused. Exit 0 all there; 1 something refused or
    differing; 2 bad configuration; 3 Langfuse unreachable; 4 keys rejected.
    """
    from observer import app
    from observer.langfuse_setup import init_langfuse

    settings = settings_of(config_path)
    api = app.build_api(settings)
    report = init_langfuse(api)
    shown = console()
    url = without_credentials(settings.langfuse.base_url)
    shown.print(f"Langfuse {url}", markup=False, highlight=False)
    for line in report.lines():
        shown.print(line, markup=False, highlight=False)
    raise SystemExit(report.exit_code)
