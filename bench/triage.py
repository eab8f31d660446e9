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
triage takes at most `--budget-s` (0.5 s) at every rate, exit 1 otherwise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

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
from observer.telemetry.metrics import Metrics  # noqa: E402
from tests.alerts.test_triage import NEW, T, grounding_rule, release_scenario  # noqa: E402

RULE = grounding_rule()


def timed(repeat: int, work: object) -> tuple[float, object]:
    times: list[float] = []
    result: object = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def measure(rate: float, repeat: int, budget_s: float) -> tuple[list[str], bool]:
    """One rate's row of the table, and whether both found what was planted in time."""
    with tempfile.TemporaryDirectory() as directory:
        state = State(Path(directory) / "state.sqlite")
        (regression,) = default_regression_rules()
        state.history.put_many(release_scenario(30, rate, regression.read_s))
        state.set_watermark(datetime.fromtimestamp(T, UTC))
        service = AlertService(state, Metrics(), RuleSet((RULE,)), options=Options(base_url="x"))
        group = (("environment", "production"),)
        reader = state.history.reader()
        triage_s, found = timed(repeat, lambda: service.triage_at(RULE, group, T, reader))
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
        f"{rows_s * 1000:,.0f} ms",
        f"{read:,}",
        f"{regression_s * 1000:,.0f} ms",
        "yes" if right else "NO",
    ]
    return cells, right and triage_s <= budget_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1,10,30", help="answers a second, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=0.5, help="a page's triage at most")
    args = parser.parse_args()
    table = Table(title="triage and release regression (issue 30's release scenario)")
    for column in (
        "answers/s",
        "rows in the lookback",
        "triage (SQLite)",
        "triage from rows",
        "rows a comparison covers",
        "regression",
        "found",
    ):
        table.add_column(column, justify="right")
    ok = True
    for rate in (float(r) for r in args.rates.split(",")):
        cells, right = measure(rate, args.repeat, args.budget_s)
        ok &= right
        table.add_row(*cells)
    Console().print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
