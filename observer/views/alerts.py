"""`alerts status` (a row per rule and group; plain columns off a terminal, a table on
one, or JSON) and `alerts backtest` (a summary per rule and a timeline; plain columns
off a terminal too)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from observer.alerts.notifiers._text import triage_text
from observer.state.rows import Triage
from observer.times import iso
from observer.views.words import counted

if TYPE_CHECKING:
    from rich.console import RenderableType

    from observer.alerts.rules import WindowRule
    from observer.alerts.service import RuleStatus
    from observer.app import Backtest, RegressionBacktest

HEADER = ("rule", "group", "value", "samples", "state", "severity", "since")


def group_text(group: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{k}={v}" for k, v in group) or "-"


def when(at: float | None) -> str:
    return iso(datetime.fromtimestamp(at, UTC)) if at is not None else "-"


def status_rows(
    statuses: Sequence[RuleStatus],
    rules: Sequence[WindowRule],
    triages: Mapping[tuple[str, tuple[tuple[str, str], ...]], Triage] | None = None,
) -> list[dict[str, Any]]:
    """One row per rule and group; a rule with no group yet is listed as `ok (no data)`.
    A firing group's row carries its triage (`triages`, by rule and group)."""
    rows: list[dict[str, Any]] = []
    for item in statuses:
        found = (triages or {}).get((item.rule.name, item.group))
        s = item.state
        state: str = s.status
        if s.samples == 0:
            state += " (no data)"
        elif s.samples < item.rule.min_samples:
            state += f" (under {counted(item.rule.min_samples, 'sample')})"
        if s.status == "firing" and s.held:
            state += " (held: the judge is unhealthy)"
        rows.append(
            {
                "rule": item.rule.name,
                "group": dict(item.group),
                "value": s.value,
                "samples": s.samples,
                "state": state,
                "severity": s.severity,
                "since": when(s.since) if s.since is not None else None,
                "triage": found.fields() if found is not None else None,
            }
        )
    listed = {row["rule"] for row in rows}
    for rule in rules:  # no data is a state too
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
                    "triage": None,
                }
            )
    return rows


def what_changed(rule: str, group: tuple[tuple[str, str], ...], lines: Sequence[str]) -> list[str]:
    """`what changed: rule (group)` and its triage's sentences, indented: plain text that
    never wraps mid-sentence in a pipe."""
    return [f"what changed: {rule} ({group_text(group)})", *(f"  {line}" for line in lines)]


def status_triage(
    triages: Mapping[tuple[str, tuple[tuple[str, str], ...]], Triage],
    rules: Sequence[WindowRule],
) -> list[str]:
    """The triage of every firing group, as `what_changed` lines."""
    aggregates = {r.name: r.aggregate for r in rules}
    out: list[str] = []
    for (rule, group), found in sorted(triages.items(), key=lambda item: item[0]):
        out.extend(what_changed(rule, group, triage_text(found, aggregates.get(rule))))
    return out


def backtest_triage(results: Sequence[Backtest]) -> list[str]:
    """The triage of every firing event of a backtest, in time order."""
    found = sorted(
        ((r.events[i], r.rule, t) for r in results for i, t in r.triages.items()),
        key=lambda item: item[0].at,
    )
    out: list[str] = []
    for event, rule, each in found:
        lines = triage_text(each, rule.aggregate)
        out.extend(what_changed(f"{rule.name} at {when(event.at)}", event.group, lines))
    return out


def status_cells(rows: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    """The rows as the columns of HEADER, as text."""
    return [
        (
            row["rule"],
            group_text(tuple(row["group"].items())),
            "-" if row["value"] is None else f"{row['value']:.4g}",
            str(row["samples"]),
            row["state"],
            row["severity"] or "-",
            row["since"] or "-",
        )
        for row in rows
    ]


def plain_columns(cells: Sequence[tuple[str, ...]], header: tuple[str, ...] = HEADER) -> list[str]:
    """For grep and scripts: aligned columns, one row a line, never wrapped."""
    lines = [header, *cells]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]


def status_table(cells: Sequence[tuple[str, ...]]) -> RenderableType:
    from rich.table import Table

    table = Table(title="observer alerts status")
    for column in HEADER:
        table.add_column(column, overflow="fold")
    for line in cells:
        table.add_row(*line)
    return table


BACKTEST_HEADER = ("rule", "fired", "resolved", "notifications", "firing at the end")
TIMELINE_HEADER = ("at", "rule", "group", "event", "severity", "value", "samples")


def backtest_title(begin: datetime, finish: datetime) -> str:
    return f"observer alerts backtest {iso(begin)} .. {iso(finish)}"


def backtest_cells(
    results: Sequence[Backtest],
) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """The summary per rule (BACKTEST_HEADER), and what would have been notified, in time
    order (TIMELINE_HEADER), as text."""
    summary: list[tuple[str, ...]] = []
    for result in results:
        fired = sum(1 for e in result.events if e.transition in ("firing", "no_data"))
        resolved = sum(1 for e in result.events if e.transition == "resolved")
        summary.append(
            (
                result.rule.name,
                str(fired),
                str(resolved),
                str(result.notifications),
                str(fired - resolved),
            )
        )
    events = sorted((e for r in results for e in r.events if e.notify), key=lambda e: e.at)
    timeline: list[tuple[str, ...]] = [
        (
            when(event.at),
            event.rule,
            group_text(event.group),
            event.transition,
            event.severity,
            "-" if event.value is None else f"{event.value:.4g}",
            str(event.samples),
        )
        for event in events
    ]
    return summary, timeline


def backtest_tables(
    results: Sequence[Backtest], begin: datetime, finish: datetime
) -> list[RenderableType]:
    """On a terminal: the summary per rule, then (when anything would have been sent) the
    timeline."""
    from rich.table import Table

    summary, timeline = backtest_cells(results)
    tables: list[RenderableType] = []
    for title, header, cells in (
        (backtest_title(begin, finish), BACKTEST_HEADER, summary),
        ("what would have been notified", TIMELINE_HEADER, timeline),
    ):
        if cells or not tables:
            table = Table(title=title)
            for column in header:
                table.add_column(column, overflow="fold")
            for line in cells:
                table.add_row(*line)
            tables.append(table)
    return tables


def backtest_plain(results: Sequence[Backtest], begin: datetime, finish: datetime) -> list[str]:
    """Off a terminal: the same as plain columns, one row a line, never wrapped."""
    summary, timeline = backtest_cells(results)
    lines = [backtest_title(begin, finish), *plain_columns(summary, BACKTEST_HEADER)]
    if timeline:
        lines += ["", "what would have been notified", *plain_columns(timeline, TIMELINE_HEADER)]
    return lines


def regression_lines(results: Sequence[RegressionBacktest]) -> list[str]:
    """Each release-regression rule's replay: a line per finding that began or ended."""
    out: list[str] = []
    for result in results:
        fired = sum(1 for _, (t, _g, _f) in result.events if t == "firing")
        resolved = len(result.events) - fired
        out.append(f"{result.rule.name}: fired {fired}, resolved {resolved}")
        for at, (transition, group, finding) in result.events:
            told = finding.text(result.rule.dimension) if finding is not None else "no longer"
            out.append(f"  {when(at)}  {transition:<8}  {group_text(group)}: {told}")
    return out
