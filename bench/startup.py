"""Start-up time of each command: `python bench/startup.py` prints a table.

Each command runs in a fresh interpreter (as a user's shell starts it), five
times; the table shows the median wall time, and which of the heavy client
libraries (langfuse, openai, apscheduler) the command imported. Target (issue
8): under 0.25 s, and none of them for `--help`, `score` and `config show`.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
RUNS = 5
COMMANDS = [
    ["--help"],
    ["config", "show"],
    ["score", "--help"],
    ["score", str(ROOT / "examples" / "records.jsonl")],
    ["run", "--help"],
    ["alerts", "status", "--help"],
]
PROBE = """
import sys
from observer.cli import main
try:
    main(sys.argv[1:], prog_name="observer")
except SystemExit:
    pass
heavy = [m for m in ("langfuse", "openai", "apscheduler") if m in sys.modules]
sys.stderr.write("HEAVY:" + ",".join(heavy) + "\\n")
"""


def measure(args: list[str]) -> tuple[float, str]:
    times = []
    heavy = ""
    for _ in range(RUNS):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=False
        )
        times.append(time.perf_counter() - started)
        heavy = next(
            (line[6:] for line in done.stderr.splitlines() if line.startswith("HEAVY:")), "?"
        )
    return statistics.median(times), heavy or "none"


def main() -> None:
    bare = statistics.median(_timed([sys.executable, "-c", "pass"]) for _ in range(RUNS))
    table = Table(title=f"observer start-up (median of {RUNS}, Python itself: {bare:.3f} s)")
    for column in ("command", "wall time", "heavy clients imported"):
        table.add_column(column)
    for args in COMMANDS:
        seconds, heavy = measure(args)
        shown = " ".join(a if "/" not in a else Path(a).name for a in args)
        table.add_row(f"observer {shown}", f"{seconds:.3f} s", heavy)
    Console().print(table)


def _timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=False)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
