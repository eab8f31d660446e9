"""Alert evaluation after a gap: `python bench/alerts.py` prints a table.

A state file holds the signal history of a steady stream (`--rate` traces a
second, every signal a trace row has, the judge's values on one in ten, two
environments and five query types, a bad stretch that fires alerts) and the
daemon's samples every 30 s. The nine default window rules were evaluated up
to `gap` before the watermark; then the daemon catches up to it.

- before: what the poll loop did until issue 15 (`evaluate` of the old
  service: the history of the longest window span read at once, and every
  rule re-evaluated at every point over all of its window's rows with
  `engine.replay`), all of it inside one poll pass;
- after: the evaluator thread (`AlertEvaluator`, at most 60 points per rule
  and tick, windows slid incrementally); the poll loop only records its
  samples and nudges it.

Columns: the slowest tick (before: the one evaluation), the ticks and the
whole catch-up, and the longest the poll loop was held. Both runs start from
copies of the same file and must end in the same rule states and events (exit
1 otherwise).
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import structlog
from rich.console import Console
from rich.table import Table

from observer.alerts.engine import AlertEvent, AlertState, GroupKey, Row, evaluation_points, replay
from observer.alerts.evaluator import AlertEvaluator
from observer.alerts.rules import default_window_rules
from observer.alerts.service import AlertService, Options, RuleSet, StepResult
from observer.background import Deadline
from observer.state import State
from observer.telemetry.metrics import Metrics

T = 1_764_000_000.0  # the watermark the daemon catches up to (a minute boundary)
WINDOW_S = 1800.0  # the longest default window
ENVIRONMENTS = ("production", "staging")
QUERY_TYPES = ("billing", "howto", "account", "search", "none")


@dataclass(frozen=True)
class Case:
    rate: float  # traces a second
    gap_s: float


CASES = (Case(2.0, 4 * 3600.0), Case(20.0, 3600.0))


@dataclass(frozen=True)
class Run:
    slowest_s: float
    ticks: int
    total_s: float
    poll_held_s: float
    states: dict[str, dict[GroupKey, AlertState]]
    events: list[AlertEvent]


def history(case: Case, seed: int = 15) -> tuple[list[Row], list[float]]:
    """Trace rows from `gap` + an hour before T up to T, and the daemon's sample times."""
    rng = random.Random(seed)
    start = T - case.gap_s - 3600.0
    rows: list[Row] = []
    count = int((T - start) * case.rate)
    for i in range(count):
        at = start + (i + rng.random()) / case.rate
        environment = ENVIRONMENTS[i % 2]
        query_type = QUERY_TYPES[rng.randrange(5)]
        # A bad stretch in production/billing, an hour into the gap: alerts fire and resolve.
        bad = environment == "production" and query_type == "billing"
        bad = bad and T - case.gap_s + 1800 < at < T - case.gap_s + 5400
        values: dict[str, float | str | bool | None] = {
            "confidence": rng.random(),
            "citation_coverage": rng.random(),
            "rerank_top1": rng.random(),
            "crag_grade": rng.choice(
                ["HIGH", "AMBIGUOUS", "LOW"] if bad else ["HIGH"] * 5 + ["LOW"]
            ),
            "ungrounded": rng.random() < (0.2 if bad else 0.01),
            "confidence_band": rng.choice(["HIGH", "MEDIUM", "LOW"]),
            "invalid_citations": float(rng.random() < (0.1 if bad else 0.002)),
            "numeric_grounding": rng.random(),
            "unsupported_numbers": float(rng.randrange(3)),
            "needs_fallback": rng.random() < 0.05,
            "crag_mismatch": False,
        }
        if i % 10 == 0:
            judge_error = rng.random() < 0.02
            values["judge_error"] = judge_error
            if not judge_error:
                values["faithfulness"] = rng.uniform(0.5, 0.9) if bad else rng.uniform(0.85, 1)
                values["critical_unsupported"] = False
        rows.append(Row(at, values, f"t{i}", "proj", environment, query_type))
    samples = [start + 30.0 * k for k in range(int((T - start) / 30.0) + 1)]
    return rows, samples


def service_on(path: Path) -> AlertService:
    return AlertService(
        State(path),
        Metrics(),
        RuleSet(default_window_rules(), ()),
        delivery=None,
        options=Options(base_url="https://langfuse.example.com"),
    )


def prepare(case: Case, directory: Path) -> Path:
    """The state file as the daemon left it `gap` before T."""
    path = directory / "state.sqlite"
    state = State(path)
    rows, samples = history(case)
    state.history.put_many(rows)
    for at in samples:
        state.history.add_samples(at, {"lag_s": 20.0, "scores_dropped": 0.0})
    state.set_watermark(datetime.fromtimestamp(T - case.gap_s, UTC))
    state.close()
    service = service_on(path)
    service.evaluate(datetime.fromtimestamp(T - case.gap_s, UTC))
    service.state.set_watermark(datetime.fromtimestamp(T, UTC))
    service.state.close()
    return path


def old_evaluate(service: AlertService, now: datetime) -> list[AlertEvent]:
    """The evaluation of the service before issue 15, in the poll thread (its cost path)."""
    stored = service.state.alerts.load()
    plans = []
    watermark = service.state.watermark()
    for rule in service.rules:
        states = stored.get(rule.name, {})
        last = max((s.evaluated_at for s in states.values() if s.evaluated_at), default=None)
        target = now.timestamp() if rule.pipeline else watermark.timestamp()  # type: ignore[union-attr]
        points = evaluation_points(last, target, service.step_s, rule.for_s + service.step_s)
        if points:
            plans.append((rule, states, points))
    start = min(p[0] - r.window_s for r, _, p in plans)
    end = max(p[-1] for _, _, p in plans)
    rows = service.state.history.rows(start, end, {r.expression.signal for r, _, _ in plans})
    events: list[AlertEvent] = []
    for rule, states, points in plans:
        result = replay(rule, rows, states, points, service.max_groups)
        service.state.alerts.commit(rule.name, result.states, points[-1])
        events.extend(result.events)
    return events


def before(path: Path) -> Run:
    service = service_on(path)
    now = datetime.fromtimestamp(T, UTC)
    started = time.perf_counter()
    service.record_pass(now, 20.0)
    events = old_evaluate(service, now)
    took = time.perf_counter() - started
    states = service.state.alerts.load()
    service.state.close()
    return Run(took, 1, took, took, states, events)


def after(path: Path, max_points: int) -> Run:
    service = service_on(path)
    ticks: list[float] = []
    events: list[AlertEvent] = []
    step = service.evaluate_step

    def timed(*args: object, **kwargs: object) -> StepResult:
        began = time.perf_counter()
        result = step(*args, **kwargs)  # type: ignore[arg-type]
        if result.points:
            ticks.append(time.perf_counter() - began)
            events.extend(result.events)
        return result

    service.evaluate_step = timed  # type: ignore[method-assign]
    evaluator = AlertEvaluator(service, interval_s=3600, max_points=max_points)
    evaluator.start()
    now = datetime.fromtimestamp(T, UTC)
    started = time.perf_counter()
    evaluator.after_pass(now, 20.0)
    held = time.perf_counter() - started
    # Meanwhile the poll loop goes on: how long does a nudge take while the catch-up runs?
    done = threading.Event()
    while not done.is_set():
        time.sleep(0.01)
        began = time.perf_counter()
        evaluator.notify(now)
        held = max(held, time.perf_counter() - began)
        if evaluator.last is not None and not evaluator.behind and ticks:
            done.set()
    total = time.perf_counter() - started
    evaluator.shutdown(Deadline.within(10))
    states = service.state.alerts.load()
    service.state.close()
    return Run(max(ticks), len(ticks), total, held, states, events)


def by_rule(events: list[AlertEvent]) -> dict[str, list[AlertEvent]]:
    """Each rule's events in order (the rules themselves may be evaluated in any order)."""
    out: dict[str, list[AlertEvent]] = {}
    for event in events:
        out.setdefault(event.rule, []).append(event)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--max-points", type=int, default=60)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    table = Table(title="alert evaluation after a gap (nine default rules)")
    for column in (
        "traces/s, gap",
        "rows",
        "run",
        "slowest tick",
        "ticks",
        "catch-up",
        "poll loop held",
    ):
        table.add_column(column, justify="right")
    same = True
    for case in CASES:
        with tempfile.TemporaryDirectory(prefix="observer-bench-alerts-") as directory:
            base = prepare(case, Path(directory))
            copy_a, copy_b = Path(directory) / "a.sqlite", Path(directory) / "b.sqlite"
            shutil.copy(base, copy_a)
            shutil.copy(base, copy_b)
            old = before(copy_a)
            new = after(copy_b, args.max_points)
            same = same and old.states == new.states and by_rule(old.events) == by_rule(new.events)
            label = f"{case.rate:g}/s, {case.gap_s / 3600:g} h"
            rows = int((case.gap_s + 3600) * case.rate)
            for name, run in (("before", old), ("after", new)):
                table.add_row(
                    label,
                    f"{rows:,}",
                    name,
                    f"{run.slowest_s:.2f} s",
                    str(run.ticks),
                    f"{run.total_s:.2f} s",
                    f"{run.poll_held_s * 1000:.1f} ms"
                    if name == "after"
                    else f"{run.poll_held_s:.2f} s",
                )
    console = Console()
    console.print(table)
    console.print(
        "same states and events before and after: " + ("yes" if same else "NO"),
        style=None if same else "bold red",
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
