"""Mapping cost: `python bench/mapping.py` prints a table.

CPU time of `map_trace` per trace (the median and the 90th percentile over the traces,
each trace the best of 5 repetitions of 20 calls), over the bundled demo traces and over
the answers captured from the real instrumentation libraries (tests/instrumentations:
agents, tool results in prompts, reprs, several copies of one list). Timed with
`time.process_time`, so other work on a shared machine counts less; the ratio between two
runs is steadier than either figure. Issue 40's target: a demo trace in <= 150 µs
(median), from ~500 µs before (99 µs before the content checks existed).

`--instructions` counts instructions instead (valgrind), per demo trace: one run mapping
every trace once and one mapping them four times, the difference over three passes (start-up
and imports cancelled out; a first run, which may compile bytecode, is not counted). A minute
or so.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from observer.mapping import MappingRules, map_trace  # noqa: E402

DEMO = ROOT / "observer" / "data" / "demo_traces.jsonl"
CAPTURES = ROOT / "tests" / "instrumentations" / "fixtures"
TARGET_US = 150.0

Trace = tuple[str, list[dict[str, Any]]]


def demo_traces() -> list[Trace]:
    traces: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in DEMO.read_text().splitlines():
        observation = json.loads(line)
        traces[observation["traceId"]].append(observation)
    return list(traces.items())


def captured_traces() -> list[Trace]:
    traces: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(CAPTURES.glob("*.observations.json")):
        for observation in json.loads(path.read_text()):
            traces[observation["traceId"]].append(observation)
    return list(traces.items())


def per_trace_us(traces: list[Trace], calls: int = 20) -> list[float]:
    rules = MappingRules()
    for trace_id, observations in traces:  # warm: regular expressions, caches
        map_trace(trace_id, observations, rules)
    found = []
    for trace_id, observations in traces:
        best = float("inf")
        for _ in range(5):
            start = time.process_time()
            for _ in range(calls):
                map_trace(trace_id, observations, rules)
            best = min(best, (time.process_time() - start) / calls)
        found.append(best * 1e6)
    return found


def instructions() -> int:
    """Instructions per demo trace mapping, by valgrind (start-up cancelled out)."""

    def count(passes: int) -> int:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                __file__,
                "--only-passes",
                str(passes),
            ],
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"},
            check=True,
        )
        refs = next(line for line in done.stderr.splitlines() if "refs:" in line)
        return int(refs.split("refs:")[1].replace(",", "").strip())

    traces = len(demo_traces())
    count(0)  # a first run may compile the modules' bytecode: not the mapping's cost
    return (count(4) - count(1)) // (3 * traces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--only-passes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only_passes is not None:
        rules = MappingRules()
        traces = demo_traces()
        for _ in range(args.only_passes):
            for trace_id, observations in traces:
                map_trace(trace_id, observations, rules)
        return
    table = Table(title="map_trace, CPU time per trace")
    for column in ("traces", "count", "median", "p90", "target"):
        table.add_column(column, justify="right" if column != "traces" else "left")
    for name, traces in (
        ("bundled demo", demo_traces()),
        ("captured libraries", captured_traces()),
    ):
        times = sorted(per_trace_us(traces))
        median = statistics.median(times)
        p90 = times[int(0.9 * (len(times) - 1))]
        target = f"<= {TARGET_US:.0f} µs" if name == "bundled demo" else ""
        table.add_row(name, str(len(times)), f"{median:.0f} µs", f"{p90:.0f} µs", target)
    Console().print(table)
    if args.instructions:
        if shutil.which("valgrind") is None:
            sys.exit("valgrind is not installed (apt-get install valgrind)")
        print(f"instructions per demo trace: {instructions():,}")


if __name__ == "__main__":
    main()
