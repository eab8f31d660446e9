"""`alerts status` (a row per rule and group, then the incidents; plain columns off a
terminal, tables on one, or JSON) and `alerts backtest` (a summary per rule, a timeline
and the incidents; plain columns off a terminal too).

On a terminal the tables fit 80 columns and wrap only between words: the rule name is
never cut, a group shows one label a line (the values of environment and query type,
other labels as `name=value`), the state and severity read as words, a time as
`MM-DD HH:MMZ`. Off a terminal every row is one line of aligned columns, never wrapped,
for grep and scripts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from observer.alerts.notifiers._text import (
    NONE,
    layer_note,
    number,
    pair_text,
    symptom_text,
    where_text,
)
from observer.alerts.notifiers._text import triage_text as _triage_text
from observer.state.rows import GroupKey, Incident, Triage
from observer.times import iso
from observer.views.words import counted

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

    from observer.app import AlertStatus, Backtest, RegressionBacktest

HEADER = ("rule", "group", "value", "samples", "state", "since")
TABLE_HEADER = ("rule", "group", "value", "n", "state", "since")
# Labels a table shows by their value alone (the caption says so).
PLAIN_LABELS = ("environment", "query_type")


def group_text(group: GroupKey) -> str:
    return where_text(group, "-")


def when(at: float | None) -> str:
    return iso(datetime.fromtimestamp(at, UTC)) if at is not None else "-"


def short_when(at: float | None) -> str:
    """`12-07 05:20Z`: a table's time (its date and minute; the year is this one's)."""
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%m-%d %H:%MZ")


def triage_text(triage: Triage, aggregate: str | None) -> list[str]:
    """A triage as sentences: where, since when and whose (the layer, or why none)."""
    lines = _triage_text(triage, aggregate)
    if triage.layer is not None:
        share = dict(triage.layer_shares).get(triage.layer, 0.0)
        lines.append(f"Layer: {triage.layer} ({share * 100:.0f}% of the bad samples).")
    else:
        lines.append(f"Layer unclear: {layer_note(triage)}.")
    return lines


def status_rows(report: AlertStatus) -> list[dict[str, Any]]:
    """One row per rule and group; a rule with no group yet is listed as `ok (no data)`.
    A firing group's row carries its triage."""
    rows: list[dict[str, Any]] = []
    for item in report.statuses:
        found = report.triages.get((item.rule.name, item.group))
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
                "since_at": s.since,
                "layer": s.layer,
                "triage": found.fields() if found is not None else None,
            }
        )
    listed = {row["rule"] for row in rows}
    for rule in report.rules:  # no data is a state too
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
                    "since_at": None,
                    "layer": None,
                    "triage": None,
                }
            )
    return rows


def status_document(report: AlertStatus) -> dict[str, Any]:
    """`alerts status --json`: the rules' rows and the incidents."""
    rows = [{k: v for k, v in row.items() if k != "since_at"} for row in status_rows(report)]
    return {
        "window_rules": sum(1 for r in report.rules if hasattr(r, "window_s")),
        "trace_rules": report.trace_rules,
        "watermark": when(report.watermark) if report.watermark is not None else None,
        "rules": rows,
        "incidents": [i.as_dict() for i in report.incidents],
    }


def what_changed(rule: str, group: GroupKey, lines: Sequence[str]) -> list[str]:
    """`what changed: rule (group)` and its triage's sentences, indented: plain text that
    never wraps mid-sentence in a pipe."""
    return [f"what changed: {rule} ({group_text(group)})", *(f"  {line}" for line in lines)]


def status_triage(report: AlertStatus) -> list[str]:
    """The triage of every firing group, as `what_changed` lines."""
    aggregates = {r.name: getattr(r, "aggregate", None) for r in report.rules}
    out: list[str] = []
    for (rule, group), found in sorted(report.triages.items(), key=lambda item: item[0]):
        out.extend(what_changed(rule, group, triage_text(found, aggregates.get(rule))))
    return out


def _state_words(row: Mapping[str, Any]) -> str:
    """`firing page`, `pending warn`, `ok (no data)`."""
    state = str(row["state"])
    severity = row["severity"]
    if severity and (state.startswith("firing") or state.startswith("pending")):
        head, _, rest = state.partition(" ")
        return f"{head} {severity}" + (f" {rest}" if rest else "")
    return state


def status_cells(rows: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    """The rows as the columns of HEADER, as one-line text (plain columns)."""
    return [
        (
            row["rule"],
            group_text(tuple(row["group"].items())),
            "-" if row["value"] is None else number(row["value"]),
            str(row["samples"]),
            _state_words(row),
            row["since"] or "-",
        )
        for row in rows
    ]


def _table_group(group: Mapping[str, str]) -> str:
    """A group in a table: one label a line, environment and query type by value (a
    release regression's signal is told with its rule)."""
    lines = [
        (value if value != NONE else pair_text(key, value))
        if key in PLAIN_LABELS
        else pair_text(key, value)
        for key, value in group.items()
        if key != "signal"
    ]
    return "\n".join(lines) or "-"


def _table_rule(row: Mapping[str, Any]) -> str:
    signal = row["group"].get("signal")
    return f"{row['rule']}\non {signal}" if signal else str(row["rule"])


def plain_columns(cells: Sequence[tuple[str, ...]], header: tuple[str, ...] = HEADER) -> list[str]:
    """For grep and scripts: aligned columns, one row a line, never wrapped."""
    lines = [header, *cells]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]


def _columns(rows: Sequence[tuple[str, ...]], count: int) -> list[tuple[str, ...]]:
    """The cells of `rows` by column (`count` empty columns without rows)."""
    return list(zip(*rows, strict=True)) if rows else [() for _ in range(count)]


def _table(title: str, caption: str | None = None) -> Table:
    from rich.table import Table

    return Table(
        title=title,
        caption=caption,
        box=None,
        padding=(0, 1),
        pad_edge=False,
        collapse_padding=True,
        show_edge=False,
        header_style="bold",
        title_justify="left",
        caption_justify="left",
    )


def _fitted(
    title: str,
    header: Sequence[str],
    cells: Sequence[tuple[str, ...]],
    width: int,
    caption: str | None = None,
    right: Sequence[str] = (),
) -> Table:
    """A table whose columns fit `width`: each at least its longest word wide (so text
    wraps only between words), the room left given to those whose lines are longest."""
    table = _table(title, caption)
    columns = _columns(cells, len(header))
    least = [
        max([len(name), *(len(w) for text in column for w in text.split())])
        for name, column in zip(header, columns, strict=True)
    ]
    most = [
        max([len(name), *(len(line) for text in column for line in text.splitlines())])
        for name, column in zip(header, columns, strict=True)
    ]
    room = width - (len(header) - 1)  # a space between columns
    widths: list[int | None] = list(least)
    if sum(least) > room:
        widths = [None] * len(header)  # cannot fit whole words: the terminal wraps
    else:
        # The room left: first whole to the columns that need least of it (a time on one
        # line), then to the others, the one that needs most first.
        left = room - sum(least)
        for i in sorted(range(len(header)), key=lambda k: (most[k] - least[k], k)):
            need = most[i] - least[i]
            if need <= left:
                widths[i] = most[i]
                left -= need
        for i in sorted(range(len(header)), key=lambda k: (least[k] - most[k], k)):
            grant = min(left, most[i] - (widths[i] or 0))
            widths[i] = (widths[i] or 0) + grant
            left -= grant
    for name, w in zip(header, widths, strict=True):
        table.add_column(name, width=w, justify="right" if name in right else "left")
    for line in cells:
        table.add_row(*line)
    return table


def status_table(rows: Sequence[dict[str, Any]], width: int = 80) -> RenderableType:
    """On a terminal: a table that fits `width`, wrapping only between words."""
    cells = [
        (
            _table_rule(row),
            _table_group(row["group"]),
            "-" if row["value"] is None else number(row["value"]),
            str(row["samples"]),
            _state_words(row),
            short_when(row["since_at"]),
        )
        for row in rows
    ]
    return _fitted(
        "observer alerts status",
        TABLE_HEADER,
        cells,
        width,
        "group: the values of environment and query type, other labels as name=value; "
        "n: samples in the window",
        right=("value", "n"),
    )


def incident_lines(incidents: Sequence[Incident]) -> list[str]:
    """Each incident and its symptoms, as plain lines that never wrap mid-sentence."""
    out: list[str] = []
    for incident in incidents:
        state = "open" if incident.open else f"resolved {when(incident.resolved_at)}"
        cause = where_text(incident.cause, "no shared cause")
        place = incident.environment or "every environment"
        out.append(
            f"incident {incident.id} ({state}): {cause} in {place}, since "
            f"{when(incident.since)}; {len(incident.firing)} of "
            f"{counted(len(incident.symptoms), 'symptom')} firing"
        )
        out.extend(
            f"  {symptom_text(s.rule, s.group, s.firing, s.severity)}" for s in incident.symptoms
        )
    return out


def incident_table(incidents: Sequence[Incident], width: int = 80) -> RenderableType:
    """On a terminal: an incident a row, its symptoms one a line."""
    rows = [
        (
            incident.id[-8:],
            where_text(incident.cause, "none shared"),
            ("open" if incident.open else "resolved"),
            short_when(incident.since),
            "\n".join(
                symptom_text(s.rule, s.group, s.firing, s.severity) for s in incident.symptoms
            ),
        )
        for incident in incidents
    ]
    header = ("incident", "cause", "state", "since", "symptoms")
    return _fitted("incidents (alerts of one cause)", header, rows, width)


def status_footer(report: AlertStatus) -> str:
    windowed = sum(1 for r in report.rules if hasattr(r, "window_s"))
    ends = when(report.watermark) if report.watermark is not None else "(none)"
    return (
        f"{counted(windowed, 'window rule')}, "
        f"{counted(len(report.rules) - windowed, 'release regression rule')}, "
        f"{counted(report.trace_rules, 'trace rule')}; windows end at the watermark {ends}"
    )


def status_plain(report: AlertStatus) -> list[str]:
    """Off a terminal: plain columns, the footer, the incidents and the triage, one a line."""
    rows = status_rows(report)
    lines = [*plain_columns(status_cells(rows)), status_footer(report)]
    if report.incidents:
        lines += ["", *incident_lines(report.incidents)]
    return [*lines, *status_triage(report)]


def status_rich(report: AlertStatus, width: int = 80) -> list[RenderableType | str]:
    """On a terminal `width` wide: the rules' table, the footer, the incidents' table, the
    triage."""
    out: list[RenderableType | str] = [
        status_table(status_rows(report), width),
        status_footer(report),
    ]
    if report.incidents:
        out.append(incident_table(report.incidents, width))
    return [*out, *status_triage(report)]


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
            "-" if event.value is None else number(event.value),
            str(event.samples),
        )
        for event in events
    ]
    return summary, timeline


def backtest_tables(
    results: Sequence[Backtest], begin: datetime, finish: datetime, width: int = 80
) -> list[RenderableType]:
    """On a terminal: the summary per rule, then (when anything would have been sent) the
    timeline."""
    summary, timeline = backtest_cells(results)
    tables: list[RenderableType] = []
    for title, header, cells in (
        (backtest_title(begin, finish), BACKTEST_HEADER, summary),
        ("what would have been notified", TIMELINE_HEADER, timeline),
    ):
        if cells or not tables:
            tables.append(_fitted(title, header, cells, width))
    return tables


def backtest_plain(results: Sequence[Backtest], begin: datetime, finish: datetime) -> list[str]:
    """Off a terminal: the same as plain columns, one row a line, never wrapped."""
    summary, timeline = backtest_cells(results)
    lines = [backtest_title(begin, finish), *plain_columns(summary, BACKTEST_HEADER)]
    if timeline:
        lines += ["", "what would have been notified", *plain_columns(timeline, TIMELINE_HEADER)]
    return lines


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


def backtest_incidents(incidents: Sequence[Incident]) -> list[str]:
    """The incidents the replay would have opened, one a line with its symptoms."""
    if not incidents:
        return []
    return ["incidents (alerts of one cause) the notifiers would have been told of:"] + [
        f"  {line}" for line in incident_lines(incidents)
    ]
