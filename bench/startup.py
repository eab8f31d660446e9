"""Start-up time of each command: `python bench/startup.py` prints a table.

Each command runs in a fresh interpreter, as a user's shell starts it (its
compiled modules cached, which one warm-up run sees to), seven times; the table
shows the median wall time and the median CPU time of the child (user + system:
what the command itself costs, whatever else the machine is doing), which of
the heavy libraries the command imported, and, for the two commands issue 18
(item 4) names, the baseline and the target: `observer score` on one record
0.42 s (11.7x Python's own start) and `config show` 0.33-0.49 s before, under
0.25 s wanted, with neither pydantic-settings nor the models they do not use
loaded. `observer score` on one record has a second target, relative to the
machine: at most 9x Python's own start (`x Python`, issue 44).

Where a command's start goes: `python -X importtime -c "from observer.cli import
main; main(['score', 'one.jsonl'])" 2> imports.txt`, then sort by the second
column (cumulative microseconds) to see which import pulls in what.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
RUNS = 7
TARGET_S = 0.25
RATIO_TARGET = 9.0  # `observer score` on one record, in Python's own starts
HEAVY = ("langfuse", "openai", "apscheduler", "pydantic_settings")
PROBE = """
import sys
from observer.cli import main
try:
    main(sys.argv[1:], prog_name="observer")
except SystemExit:
    pass
heavy = [m for m in HEAVY if m in sys.modules]
models = [m for m in ("observer.config", "observer.mapping.convention") if m in sys.modules]
sys.stderr.write("HEAVY:" + ",".join(heavy + models) + "\\n")
""".replace("HEAVY", repr(HEAVY), 1)


def one_record() -> Path:
    line = (ROOT / "examples" / "records.jsonl").read_text().splitlines()[0]
    json.loads(line)  # a record, as the command reads it
    path = Path(tempfile.mkdtemp(prefix="observer-startup-")) / "one.jsonl"
    path.write_text(line + "\n")
    return path


def commands() -> list[tuple[list[str], str]]:
    """(arguments, the issue's baseline) of each command measured."""
    return [
        (["--help"], "-"),
        (["config", "show"], "0.33-0.49 s"),
        (["score", "--help"], "-"),
        (["score", str(one_record())], "0.42 s"),
        (["score", str(ROOT / "examples" / "records.jsonl")], "-"),
        (["run", "--help"], "-"),
        (["alerts", "status", "--help"], "-"),
    ]


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# As a user's shell starts it: compiled modules cached (one warm-up run writes them).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _run(command: list[str]) -> tuple[float, float, str]:
    cpu, started = _child_cpu(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=ENV)
    said = next((line[6:] for line in done.stderr.splitlines() if line.startswith("HEAVY:")), "")
    return time.perf_counter() - started, _child_cpu() - cpu, said


BARE = [sys.executable, "-c", "pass"]


def measure(command: list[str]) -> tuple[float, float, float, str]:
    """(median wall s, median CPU s, median of wall / Python's own start, what the probe
    said it imported), after a warm-up. Each run is paired with a bare `python -c pass`
    just before it, so a machine that speeds up or slows down moves both."""
    _run(command)
    walls, cpus, ratios = [], [], []
    said = ""
    for _ in range(RUNS):
        bare, _cpu, _ = _run(BARE)
        wall, cpu, said = _run(command)
        walls.append(wall)
        cpus.append(cpu)
        ratios.append(wall / bare)
    return statistics.median(walls), statistics.median(cpus), statistics.median(ratios), said


def main() -> None:
    bare_wall, bare_cpu, _, _ = measure(BARE)
    table = Table(
        title=f"observer start-up (median of {RUNS}; Python itself: {bare_wall:.3f} s wall, "
        f"{bare_cpu:.3f} s CPU)"
    )
    for column in ("command", "wall", "CPU", "x Python", "baseline", "target", "loaded"):
        table.add_column(column)
    for args, baseline in commands():
        wall, cpu, ratio, loaded = measure([sys.executable, "-c", PROBE, *args])
        shown = " ".join(a if "/" not in a else Path(a).name for a in args)
        target = "-"
        if baseline != "-":
            target = f"< {TARGET_S} s " + ("ok" if cpu < TARGET_S else "MISSED")
        if args[0] == "score" and args[1].endswith("one.jsonl"):
            target += f"; <= {RATIO_TARGET:.0f}x " + ("ok" if ratio <= RATIO_TARGET else "MISSED")
        table.add_row(
            f"observer {shown}",
            f"{wall:.3f} s",
            f"{cpu:.3f} s",
            f"{ratio:.1f}x",
            baseline,
            target,
            loaded or "none",
        )
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
