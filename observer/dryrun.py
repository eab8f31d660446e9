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
from typing import BinaryIO

from observer.sinks import SendResult
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


class StreamScoreSink(JsonlScoreSink):
    """The JSON-lines sink writing to an open stream (standard output) instead of a file."""

    def __init__(self, stream: BinaryIO) -> None:
        super().__init__("-")
        self._stream = stream

    def _write(self, data: bytes, count: int) -> SendResult:
        with self._lock:
            self._stream.write(data)
            self._stream.flush()
            self.written += count
        return SendResult(accepted=count)


def scores_sink(target: str) -> JsonlScoreSink:
    """Where the scores go: a file, or standard output for `-`."""
    return StreamScoreSink(sys.stdout.buffer) if target == "-" else JsonlScoreSink(target)
