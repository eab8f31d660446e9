"""Linear text, exhaustively: `python bench/redteam.py` prints each expression's growth.

tests/redteam/test_linear_text.py feeds every expression over trace text a
catalogue of attack inputs at `limits.max_answer_chars` and a sample of random
ones. This is the search that catalogue came from, too long for the suite
(minutes): every expression (the same walk of the modules) against every run
of one character and of every pair of characters its source and a few
structural ones give, after "", a newline or a letter and before "", a letter or
a newline, at `--size` and twice that. A linear expression's CPU time doubles;
one whose time grows more than `--ratio` times (3 by default) is listed with the
input that shows it. CPU time of this process (`time.process_time`), so a
neighbour's load does not count; inputs under a few milliseconds are not timed
twice (noise).

    .venv/bin/python bench/redteam.py [--size 4000] [--ratio 3] [--only NAME]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.redteam.test_linear_text import trace_text_patterns, use

STRUCTURE = "a1 \n\t.`|[]-:,#>*x"
NOISE_S = 0.003


def alphabet(pattern: re.Pattern[str]) -> list[str]:
    """The characters an expression gives a meaning to, and the structural ones."""
    return sorted({c for c in pattern.pattern if not c.isalnum() and c != "\\"} | set(STRUCTURE))


def cpu(name: str, pattern: re.Pattern[str], text: str) -> float:
    began = time.process_time()
    use(name, pattern, text)
    return time.process_time() - began


def worst(name: str, pattern: re.Pattern[str], size: int, ratio: float) -> tuple[str, float]:
    """The input whose time grew the most from `size` to twice it, and how much."""
    found = ("", 0.0)
    chars = alphabet(pattern)
    for a in chars:
        for b in chars:
            motif = a if a == b else a + b
            for before in ("", "\n", "a"):
                for after in ("", "a", "\n"):
                    small = before + motif * (size // len(motif)) + after
                    first = cpu(name, pattern, small)
                    if first < NOISE_S:
                        continue
                    grown = cpu(name, pattern, before + motif * (2 * size // len(motif)) + after)
                    if grown / first > found[1]:
                        found = (repr(small[:12]), grown / first)
                    if found[1] > ratio * 2:
                        return found  # plainly superlinear: no need to look further
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4000)
    parser.add_argument("--ratio", type=float, default=3.0)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    table = Table(title=f"growth from {args.size:,} to {2 * args.size:,} characters")
    for column in ("expression", "worst input", "growth", "verdict"):
        table.add_column(column)
    superlinear = 0
    for name, pattern in sorted(trace_text_patterns().items()):
        if args.only and args.only not in name:
            continue
        shown, growth = worst(name, pattern, args.size, args.ratio)
        bad = growth > args.ratio
        superlinear += bad
        verdict = "SUPERLINEAR" if bad else "linear"
        table.add_row(name, shown or "(all under noise)", f"{growth:.1f}x", verdict)
    Console().print(table)
    sys.exit(1 if superlinear else 0)


if __name__ == "__main__":
    main()
