"""A dry run: read and score as usual, push nothing, leave the real state as it was.

`run --once --dry-run FILE` and `backfill --dry-run FILE` work on a copy of the
state file (so the window starts where the daemon's would, and traces it already
scored count as unchanged), and write the scores Langfuse would get to FILE as
JSON lines instead of posting them. The copy is thrown away: a later real run
still scores and pushes everything the dry run saw.
"""

from __future__ import annotations

import sqlite3
import sys
from contextlib import closing
from pathlib import Path

from observer.sinks.jsonl import JsonlScoreSink


def scratch_state(real: Path, scratch_dir: Path) -> Path:
    """A consistent copy of `real` (with what its WAL holds) in `scratch_dir`, or the
    path of a new state file there when `real` does not exist yet."""
    copy = scratch_dir / "dry-run.sqlite"
    if real.exists():
        # SQLite's online backup: a consistent copy even while a daemon writes the file.
        with (
            closing(sqlite3.connect(f"file:{real}?mode=ro", uri=True)) as source,
            closing(sqlite3.connect(copy)) as target,
        ):
            source.backup(target)
    return copy


def scores_sink(target: str) -> JsonlScoreSink:
    """Where the scores go: a file, or standard output for `-`."""
    if target == "-":
        return JsonlScoreSink("-", stream=sys.stdout.buffer)
    return JsonlScoreSink(target)
