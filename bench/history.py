"""The signal history's cost per row, with and without dimensions: `python bench/history.py`.

Rows like the daemon's: every demo trace mapped and scored (`observer.alerts.history.
trace_row`, the signals its row keeps), copied under new 32-hex trace ids to `--rows`
rows a second apart. Their dimensions are what a busy RAG service sends: three trace names,
two releases and their versions, two models, two managed prompts, the top cited document
of each answer (the demo's own `doc_id`s).

- old schema: the history table of a state file before dimensions (no `dims` column);
- no dims: today's table, rows without dimensions (`dims` NULL);
- dims: today's table, every row with all six dimensions.

Columns: bytes on disk per row (the file after `VACUUM`, less the same file empty:
table and index), the `dims` blob alone, and a read of the whole history as the alert
evaluator reads a window (`read_rows` with the default rules' signals).
"""

from __future__ import annotations

import argparse
import itertools
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from observer.alerts.history import signal_values, trace_row  # noqa: E402
from observer.alerts.rules import default_window_rules, row_keys  # noqa: E402
from observer.mapping import MappingRules, Skip, map_trace  # noqa: E402
from observer.signals import SignalParams, compute  # noqa: E402
from observer.state import State  # noqa: E402
from observer.state.history import read_rows  # noqa: E402
from observer.state.rows import NO_DIMS, Row  # noqa: E402
from tests.daemon_helpers import demo_observations  # noqa: E402

T0 = 1_764_000_000.0
TRACE_NAMES = ("rag-query", "support-chat", "billing-assistant")
RELEASES = (("2026.12.01", "v41"), ("2026.12.03-rc2", "v42"))
MODELS = ("gpt-4o-mini-2024-07-18", "claude-3-5-haiku-20241022")
PROMPTS = ("rag-answer:12", "rag-answer-strict:3")


def demo_rows() -> list[tuple[Row, str | None]]:
    """Each scored demo trace's row, and its top cited document."""
    by_trace: dict[str, list[dict[str, object]]] = {}
    for observation in demo_observations():
        by_trace.setdefault(str(observation["traceId"]), []).append(observation)
    out = []
    fallback = datetime.fromtimestamp(T0, UTC)
    for trace_id, found in by_trace.items():
        record = map_trace(trace_id, found, MappingRules())
        if isinstance(record, Skip):
            continue
        signals = compute(record, SignalParams())
        row = trace_row(record, signal_values(signals), fallback)
        out.append((row, signals.concentration.top_doc))
    return out


def rows(count: int, with_dims: bool) -> list[Row]:
    base = demo_rows()
    out = []
    for n, (row, top_doc) in zip(range(count), itertools.cycle(base), strict=False):
        dims: Mapping[str, str] = NO_DIMS
        if with_dims:
            release, version = RELEASES[(n // 500) % 2]
            found = {
                "trace_name": TRACE_NAMES[n % 3],
                "release": release,
                "version": version,
                "model": MODELS[n % 7 == 0],
                "prompt": PROMPTS[n % 5 == 0],
                "top_doc": top_doc or "",
            }
            dims = {k: v for k, v in found.items() if v}
        out.append(replace(row, at=T0 + n, trace_id=f"{n:032x}", dims=dims))
    return out


OLD_TABLE = """
DROP TABLE history;
CREATE TABLE history (
    trace_id TEXT PRIMARY KEY, at REAL NOT NULL, project_id TEXT,
    environment TEXT NOT NULL, query_type TEXT NOT NULL, signals BLOB NOT NULL
);
CREATE INDEX history_at ON history (at);
"""


def file_bytes(path: Path) -> int:
    db = sqlite3.connect(path)
    db.execute("VACUUM")
    size = int(db.execute("PRAGMA page_count").fetchone()[0]) * int(
        db.execute("PRAGMA page_size").fetchone()[0]
    )
    db.close()
    return size


def measure(directory: Path, name: str, sample: list[Row], old: bool) -> dict[str, float]:
    path = directory / f"{name}.sqlite"
    State(path).close()
    if old:
        db = sqlite3.connect(path)
        db.executescript(OLD_TABLE)
        db.close()
    empty = file_bytes(path)
    if old:
        db = sqlite3.connect(path)
        with db:
            db.executemany(
                "INSERT INTO history VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        r.trace_id,
                        r.at,
                        r.project_id,
                        r.environment,
                        r.query_type,
                        orjson.dumps(dict(r.values)),
                    )
                    for r in sample
                ],
            )
        db.close()
    else:
        state = State(path)
        state.history.put_many(sample)
        state.close()
    full = file_bytes(path)
    db = sqlite3.connect(path)
    dims_bytes = 0.0
    if not old:
        dims_bytes = float(
            db.execute("SELECT COALESCE(SUM(LENGTH(dims)), 0) FROM history").fetchone()[0]
        )
    keys = row_keys({rule.expression.signal for rule in default_window_rules()})
    timings = []
    for _ in range(5):
        began = time.perf_counter()
        if old:  # today's reader cannot read the old table: read it as it was read
            found = db.execute(
                "SELECT trace_id, at, project_id, environment, query_type, signals "
                "FROM history WHERE at > ? AND at <= ? ORDER BY at",
                (0, 1e12),
            ).fetchall()
            read = [
                Row(float(a), {k: v for k, v in orjson.loads(s).items() if k in keys}, t, p, e, q)
                for t, a, p, e, q, s in found
            ]
        else:
            read = read_rows(db, 0, 1e12, keys)
        timings.append(time.perf_counter() - began)
        assert len(read) == len(sample)
    db.close()
    return {
        "per_row": (full - empty) / len(sample),
        "dims_per_row": dims_bytes / len(sample),
        "read_ms": statistics.median(timings) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    count = parser.parse_args().rows
    plain, dimensioned = rows(count, False), rows(count, True)
    table = Table(title=f"signal history, {count:,} demo-like rows")
    for column in ("layout", "bytes/row on disk", "dims blob bytes/row", "read all (ms)"):
        table.add_column(column, justify="left" if column == "layout" else "right")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for name, sample, old in (
            ("old schema", plain, True),
            ("no dims", plain, False),
            ("dims", dimensioned, False),
        ):
            got = measure(directory, name.replace(" ", "_"), sample, old)
            table.add_row(
                name,
                f"{got['per_row']:.0f}",
                f"{got['dims_per_row']:.0f}",
                f"{got['read_ms']:.0f}",
            )
    Console().print(table)


if __name__ == "__main__":
    main()
