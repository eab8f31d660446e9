"""The table of a summary of many records' signals (`observer score --summary`, the demo)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from observer.model import Band, Grade
from observer.signals.summary import UNKNOWN
from observer.views.words import counted

if TYPE_CHECKING:  # rich is loaded only to draw the table
    from rich.table import Table

    from observer.signals.summary import Summary


def _share(count: int, total: int) -> str:
    return f"{count} ({count / total:.0%})" if total else str(count)


def _records(count: int) -> str:
    return "record" if count == 1 else "records"


def _mix(counter: Counter[str], order: list[str], total: int) -> str:
    return ", ".join(f"{name} {_share(counter[name], total)}" for name in order)


def summary_table(summary: Summary, title: str = "observer score") -> Table:
    """A two-column table a person can read at a glance."""
    from rich.table import Table

    n = summary.records
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("signal")
    table.add_column("value", overflow="fold")
    table.add_row("records scored", str(n))
    if summary.bad_lines:
        table.add_row("bad lines (skipped)", str(summary.bad_lines))
    mean_cov = (
        f"{summary.coverage_sum / summary.coverage_n:.3f} over "
        f"{counted(summary.coverage_n, 'record')}"
        if summary.coverage_n
        else "n/a (no substantive sentences)"
    )
    table.add_row("mean citation coverage", mean_cov)
    known = summary.confidence_n
    table.add_row(
        "mean confidence",
        f"{summary.confidence_sum / known:.3f}"
        + (f" over {counted(known, 'record')}" if known < n else "")
        if known
        else "n/a",
    )
    unknown = [UNKNOWN] if summary.scores_not_recorded else []
    table.add_row("CRAG grades", _mix(summary.grades, [g.value for g in Grade] + unknown, n))
    table.add_row("confidence bands", _mix(summary.bands, [b.value for b in Band] + unknown, n))
    if summary.scores_not_recorded:
        table.add_row(
            "no retrieval scores",
            f"{_share(summary.scores_not_recorded, n)}: grade, rerank top-1 and confidence unknown",
        )
    table.add_row("fallback answers", _share(summary.fallbacks, n))
    table.add_row("ungrounded answers", _share(summary.ungrounded, n))
    table.add_row(
        "refusals",
        f"{_share(summary.refusals, n)}, {summary.over_refusals} with HIGH retrieval "
        "(over-refusals)",
    )
    if summary.over_cited_records:
        table.add_row("over-cited answers", _share(summary.over_cited_records, n))
    table.add_row(
        "ghost references",
        f"{summary.ghost_refs} in {_share(summary.ghost_records, n)} "
        f"{_records(summary.ghost_records)}",
    )
    table.add_row(
        "unsupported numbers",
        f"{summary.unsupported_numbers} of {counted(summary.numbers, 'number')}, "
        f"in {_share(summary.unsupported_records, n)} {_records(summary.unsupported_records)}",
    )
    if summary.concentration_n:
        table.add_row(
            "mean citation concentration",
            f"{summary.concentration_sum / summary.concentration_n:.3f} over "
            f"{counted(summary.concentration_n, 'record')}; "
            f"{summary.single_doc_records} on one document",
        )
    if summary.grade_mismatches:
        table.add_row("app CRAG grade mismatches", _share(summary.grade_mismatches, n))
    return table
