"""What a page's triage and the release-regression rule cost: `python bench/triage.py`.

A state file holds issue 30's release scenario at `--rates` answers a second:
two hours before the alert of one environment, three query types, release
2026.12.01 until 50 minutes before, then 2026.12.03-rc2 on half the traffic
with pricing answers that carry numbers their chunks do not hold (and, for the
release-regression rule, a day of the old release before that). For each rate
it times, on the daemon's own path (the state file's history read through
`AlertService`):

- triage: one firing group's triage as the daemon makes it
  (`AlertService.triage_at` on the evaluator's own `HistoryReader`: SQLite counts
  the window's samples by label and the lookback's by stretch of time, reading back
  only as far as the change goes), median of `--repeat`; beside it, the same triage
  from the lookback's rows read into memory (what the daemon did before: `rows`);
- regression: one comparison of the default `release_regression` rule as the
  daemon runs it (`families.release.release_findings`: SQLite sums its 12 hours).

and checks what they find (the segment release and query type, the onset
within three minutes, generation; the new release flagged) and that a page's
triage takes at most `--budget-s` (0.5 s) of CPU at every rate, exit 1 otherwise: this
process's CPU time, what the page costs, which a machine shared with other jobs does not
inflate the way it does the wall time (shown beside it).

`--profile`: where one triage's time goes, per rate: each SQLite query it made (what it
counts, the span of event time, the history rows in that span, the groups returned, its
time and SQLite's plan).
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from observer.alerts.families.release import release_findings  # noqa: E402
from observer.alerts.regression import default_regression_rules  # noqa: E402
from observer.alerts.rules import row_keys  # noqa: E402
from observer.alerts.service import AlertService, Options, RuleSet  # noqa: E402
from observer.alerts.triage import keys, lookback_s, triage  # noqa: E402
from observer.state import State  # noqa: E402
from observer.state.history import HistoryReader  # noqa: E402
from observer.telemetry.metrics import Metrics  # noqa: E402
from tests.alerts.test_triage import NEW, T, grounding_rule, release_scenario  # noqa: E402

RULE = grounding_rule()


def timed(repeat: int, work: object) -> tuple[float, object]:
    return timed_cpu(repeat, work)[::2]  # type: ignore[return-value]


def timed_cpu(repeat: int, work: object) -> tuple[float, float, object]:
    """The median wall time and CPU time (this process's) of `repeat` runs, and a result."""
    times: list[float] = []
    cpu: list[float] = []
    result: object = None
    for _ in range(repeat):
        started, used = time.perf_counter(), time.process_time()
        result = work()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - used)
    return statistics.median(times), statistics.median(cpu), result


@dataclass(frozen=True)
class Asked:
    """One query a triage made, as --profile shows it."""

    what: str
    span_min: float  # of event time, minutes
    rows: int  # history rows in that span (what SQLite reads)
    groups: int  # rows it returned
    seconds: float
    plan: str


def _what(sql: str) -> str:
    if "LIMIT :limit" in sql:
        return "worst (examples)"
    if "CAST((:end - at)" in sql:
        return "window (segments, layer, onset)"
    if "CAST((:anchor - at)" in sql:
        return "buckets (onset)"
    return sql[:40]


def _plan(steps: Iterator[Any]) -> str:
    """SQLite's plan in short: the index it searches and what it sorts."""
    said = []
    for *_, detail in steps:
        if " USING " in detail:
            said.append(detail.split(" USING ", 1)[1].split(" (", 1)[0].lower())
        elif "TEMP B-TREE" in detail:
            said.append("sort for " + detail.rsplit(" FOR ", 1)[1].lower())
    return ", ".join(said)


class _Found(list[Any]):
    """A query's rows, read as from a cursor."""

    def fetchall(self) -> list[Any]:
        return list(self)

    def fetchone(self) -> Any:
        return self[0] if self else None


class _Timed:
    """A connection whose queries are timed and explained (--profile)."""

    def __init__(self, db: sqlite3.Connection, asked: list[Asked]) -> None:
        self.db = db
        self.asked = asked

    def execute(self, sql: str, parameters: Any = ()) -> Any:
        if not isinstance(parameters, dict) or "start" not in parameters:
            return self.db.execute(sql, parameters)  # a look-up (columns, label sets, ids)
        plan = _plan(self.db.execute(f"EXPLAIN QUERY PLAN {sql}", parameters))
        started = time.perf_counter()
        found = self.db.execute(sql, parameters).fetchall()
        seconds = time.perf_counter() - started
        start, end = parameters["start"], parameters["end"]
        (rows,) = self.db.execute(
            "SELECT COUNT(*) FROM history WHERE at > ? AND at <= ?", (start, end)
        ).fetchone()
        self.asked.append(Asked(_what(sql), (end - start) / 60, rows, len(found), seconds, plan))
        return _Found(found)


class Profiled:
    """The evaluator's reader, its queries recorded (what `triage_at` reads through)."""

    def __init__(self, reader: HistoryReader) -> None:
        self.reader = reader
        self.asked: list[Asked] = []

    @contextlib.contextmanager
    def connection(self) -> Iterator[_Timed]:
        with self.reader.connection() as db:
            yield _Timed(db, self.asked)

    def rows(self, *args: Any, **kwargs: Any) -> Any:
        return self.reader.rows(*args, **kwargs)


def profile(rate: float, asked: list[Asked]) -> Table:
    table = Table(title=f"one triage at {rate:g} answers/s: its queries")
    for column in ("query", "span", "rows in span", "groups", "time", "µs a row", "plan"):
        table.add_column(column, justify="left" if column in ("query", "plan") else "right")
    for a in asked:
        table.add_row(
            a.what,
            f"{a.span_min:g} min",
            f"{a.rows:,}",
            f"{a.groups:,}",
            f"{a.seconds * 1000:,.0f} ms",
            f"{a.seconds * 1e6 / max(1, a.rows):.1f}",
            a.plan,
        )
    total = sum(a.seconds for a in asked)
    table.add_row(
        f"{len(asked)} queries",
        "",
        f"{sum(a.rows for a in asked):,}",
        "",
        f"{total * 1000:,.0f} ms",
        "",
    )
    return table


def measure(
    rate: float, repeat: int, budget_s: float, profiled: list[Table] | None = None
) -> tuple[list[str], bool]:
    """One rate's row of the table, and whether both found what was planted in time."""
    with tempfile.TemporaryDirectory() as directory:
        state = State(Path(directory) / "state.sqlite")
        (regression,) = default_regression_rules()
        state.history.put_many(release_scenario(30, rate, regression.read_s))
        state.set_watermark(datetime.fromtimestamp(T, UTC))
        service = AlertService(state, Metrics(), RuleSet((RULE,)), options=Options(base_url="x"))
        group = (("environment", "production"),)
        reader = state.history.reader()
        triage_s, triage_cpu, found = timed_cpu(
            repeat, lambda: service.triage_at(RULE, group, T, reader)
        )
        if profiled is not None:
            watched = Profiled(reader)
            service.triage_at(RULE, group, T, watched)  # type: ignore[arg-type]
            profiled.append(profile(rate, watched.asked))
        span = len(state.history.rows(T - lookback_s(RULE), T, {"numeric_grounding"}))

        def from_rows() -> object:
            read = state.history.rows(T - lookback_s(RULE), T, row_keys(keys(RULE)), samples=False)
            return triage(RULE, group, read, T)

        rows_s, _ = timed(1, from_rows)

        def compared() -> object:
            return release_findings(regression, reader, T)

        regression_s, findings = timed(repeat, compared)
        read = len(state.history.rows(T - regression.read_s, T, regression.keys()))
        reader.close()
        state.close()
    lead = found.lead if found is not None else None  # type: ignore[attr-defined]
    right = (
        lead is not None
        and dict(lead.where) == {"release": NEW, "query_type": "pricing"}
        and found.layer == "generation"  # type: ignore[attr-defined]
        and abs(found.onset - (T - 3000)) < 180  # type: ignore[attr-defined]
        and any(f.new == NEW for f in findings)  # type: ignore[attr-defined]
    )
    cells = [
        f"{rate:g}",
        f"{span:,}",
        f"{triage_s * 1000:,.0f} ms",
        f"{triage_cpu * 1000:,.0f} ms",
        f"{rows_s * 1000:,.0f} ms",
        f"{read:,}",
        f"{regression_s * 1000:,.0f} ms",
        "yes" if right else "NO",
    ]
    return cells, right and triage_cpu <= budget_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1,10,30", help="answers a second, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=0.5, help="a page's triage at most")
    parser.add_argument("--profile", action="store_true", help="each query of one triage")
    args = parser.parse_args()
    table = Table(title="triage and release regression (issue 30's release scenario)")
    for column in (
        "answers/s",
        "rows in the lookback",
        "triage (SQLite)",
        "its CPU",
        "triage from rows",
        "rows a comparison covers",
        "regression",
        "found",
    ):
        table.add_column(column, justify="right")
    ok = True
    profiled: list[Table] | None = [] if args.profile else None
    for rate in (float(r) for r in args.rates.split(",")):
        cells, right = measure(rate, args.repeat, args.budget_s, profiled)
        ok &= right
        table.add_row(*cells)
    console = Console()
    console.print(table)
    for shown in profiled or ():
        console.print(shown)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
