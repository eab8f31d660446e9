"""The signal history: one row per scored trace, and the daemon's own samples.

A trace that looks like an answer but was skipped has a row too, with only
`skipped` and its `skip_reason` (`observer.alerts.history.skip_row`): no
rule on a signal of answers finds a sample there. A read of `skipped` keeps
`skip_reason` beside it (a signal's detail: callers ask for it with `alerts.rules.row_keys`).

Each trace row keeps its dimensions beside environment and query type (`Row.dims`:
trace name, release, version, model, prompt, top cited document) in `dims`, the JSON
of the present ones, NULL when none (a state file of an older version gains the
column when opened, its rows read with none).

What every alert window, `observer alerts status` and `observer alerts
backtest` read, so they agree with each other and survive restarts. A
re-scored trace replaces its row; the judge's values are merged into it.
Kept `alerts.history_days` and pruned by housekeeping.

The alert evaluator reads through a `HistoryReader`: a connection of its own,
each read one snapshot (WAL), so a long read never holds the lock the poll
loop, the dispatcher and the judge write under.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from observer.state.db import Database
from observer.state.rows import NO_DIMS, Row, Value
from observer.state.values import VALUES_SCHEMA, delete_values, prune_values, write_values

HISTORY_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS history (
    trace_id TEXT PRIMARY KEY,
    at REAL NOT NULL,
    project_id TEXT,
    environment TEXT NOT NULL,
    query_type TEXT NOT NULL,
    signals BLOB NOT NULL,
    dims BLOB,
    seq INTEGER
);
CREATE INDEX IF NOT EXISTS history_at ON history (at);
CREATE TABLE IF NOT EXISTS samples (
    at REAL NOT NULL,
    name TEXT NOT NULL,
    value REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_at ON samples (at);
"""
    + VALUES_SCHEMA
)


_COLUMNS = "trace_id, at, project_id, environment, query_type, signals, dims"


_NEXT_SEQ = "(SELECT coalesce(max(seq), 0) + 1 FROM history)"


def write_row(db: sqlite3.Connection, row: Row) -> None:
    """Insert or replace a trace's row and its narrow copy (`observer.state.values`), inside
    the caller's transaction, with the file's next write count (`seq`: writes are
    serialized, so it rises in commit order; the alert evaluator's "what changed")."""
    signals = orjson.dumps(dict(row.values))
    dims = orjson.dumps(dict(row.dims)) if row.dims else None
    labels = (row.at, row.project_id, row.environment, row.query_type, signals, dims)
    found = db.execute(
        "SELECT rowid, at FROM history WHERE trace_id = ?", (row.trace_id,)
    ).fetchone()
    if found is None:
        ((trace,),) = db.execute(
            f"INSERT INTO history ({_COLUMNS}, seq) VALUES (?, ?, ?, ?, ?, ?, ?, {_NEXT_SEQ}) "
            "RETURNING rowid",
            (row.trace_id, *labels),
        ).fetchall()
    else:
        trace, old_at = found
        db.execute(
            "UPDATE history SET at = ?, project_id = ?, environment = ?, query_type = ?, "
            f"signals = ?, dims = ?, seq = {_NEXT_SEQ} WHERE rowid = ?",
            (*labels, trace),
        )
        delete_values(db, trace, old_at)
    write_values(db, trace, row)


class _Labels:
    """One object per distinct label value and per distinct set of dimensions within a
    read: a window holds one row per trace, and most of them share their labels."""

    __slots__ = ("dims", "strings")

    def __init__(self) -> None:
        self.strings: dict[str, str] = {}
        self.dims: dict[bytes, Mapping[str, str]] = {}

    def string(self, value: object) -> str:
        text = str(value)
        return self.strings.setdefault(text, text)

    def of(self, raw: bytes | None) -> Mapping[str, str]:
        if not raw:
            return NO_DIMS
        found = self.dims.get(raw)
        if found is None:
            decoded = orjson.loads(raw)
            found = {self.string(k): self.string(v) for k, v in decoded.items()} or NO_DIMS
            self.dims[bytes(raw)] = found
        return found


def _row(record: tuple[Any, ...], keys: Collection[str] | None, labels: _Labels) -> Row:
    trace_id, at, project_id, environment, query_type, signals, dims = record
    values = orjson.loads(signals)
    if keys is not None:
        values = {k: v for k, v in values.items() if k in keys}
    return Row(
        at=float(at),
        values=values,
        trace_id=str(trace_id),
        project_id=project_id,
        environment=labels.string(environment),
        query_type=labels.string(query_type),
        dims=labels.of(dims),
    )


class History:
    def __init__(self, database: Database, on_row: Callable[[Row], None] | None = None) -> None:
        self._file = database
        # Told every trace row this process wrote, once committed (a fleet shares them).
        self.on_row = on_row

    def written(self, row: Row) -> None:
        """A trace row this process committed: to `on_row`, if any (never raises)."""
        if self.on_row is not None:
            # Sharing must never undo or stop what was recorded; the hook logs its failures.
            with contextlib.suppress(Exception):
                self.on_row(row)

    def put(self, row: Row) -> None:
        with self._file.transaction() as db:
            write_row(db, row)

    def put_many(self, rows: Collection[Row]) -> None:
        """Many trace rows in one transaction (imports, benches)."""
        with self._file.transaction() as db:
            for row in rows:
                write_row(db, row)

    def merge(self, trace_id: str, values: Mapping[str, Value]) -> Row | None:
        """Add values (the judge's) to a trace's row; the updated row, or None if unknown
        or skipped since (a judge result of a trace no longer scored is no answer's)."""
        with self._file.transaction() as db:
            found = db.execute(
                f"SELECT {_COLUMNS} FROM history WHERE trace_id = ?", (trace_id,)
            ).fetchone()
            if found is None:
                return None
            row = _row(found, None, _Labels())
            if row.values.get("skipped") is True:
                return None
            merged = {**row.values, **{k: v for k, v in values.items() if v is not None}}
            updated = replace(row, values=merged)
            write_row(db, updated)
        self.written(updated)
        return updated

    def add_samples(self, at: float, values: Mapping[str, float]) -> None:
        """The daemon's own samples (lag_s, scores_dropped) at clock time `at`."""
        with self._file.transaction() as db:
            db.executemany(
                "INSERT INTO samples (at, name, value) VALUES (?, ?, ?)",
                [(at, name, float(value)) for name, value in values.items()],
            )

    def rows(
        self,
        start: float,
        end: float,
        keys: Collection[str] | None = None,
        *,
        traces: bool = True,
        samples: bool = True,
    ) -> list[Row]:
        """Trace rows and samples with start < at <= end, oldest first.

        `keys`: only these signals are kept in each row's values (the ones the rules
        read). A window at a busy service holds hundreds of thousands of rows: the
        memory of an evaluation is that of its rows. `traces` / `samples`: leave out
        the trace rows or the daemon's samples.
        """
        with self._file.lock:
            return read_rows(self._file.db, start, end, keys, traces=traces, samples=samples)

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The file's connection under its lock: for the release statistics' queries."""
        with self._file.lock:
            yield self._file.db

    def reader(self) -> HistoryReader:
        """A reader on a connection of its own (close it when done)."""
        return HistoryReader(self._file.path)

    def span(self) -> tuple[float, float] | None:
        """The event times of the oldest and newest rows, or None when empty."""
        with self._file.lock:
            low, high = self._file.db.execute(
                "SELECT MIN(at), MAX(at) FROM (SELECT at FROM history UNION ALL "
                "SELECT at FROM samples)"
            ).fetchone()
        return None if low is None else (float(low), float(high))

    def count(self) -> int:
        with self._file.lock:
            return self._file.scalar("SELECT COUNT(*) FROM history")

    def prune(self, before: float) -> int:
        """Forget rows older than `before` (unix seconds)."""
        with self._file.transaction() as db:
            pruned = db.execute("DELETE FROM history WHERE at < ?", (before,)).rowcount
            pruned += db.execute("DELETE FROM samples WHERE at < ?", (before,)).rowcount
            prune_values(db, before)
        return pruned


def read_rows(
    db: sqlite3.Connection,
    start: float,
    end: float,
    keys: Collection[str] | None,
    *,
    traces: bool = True,
    samples: bool = True,
    skip_empty: bool = False,
) -> list[Row]:
    """`History.rows` on `db`; `skip_empty` leaves out trace rows with none of `keys`."""
    labels = _Labels()
    rows: list[Row] = []
    if traces:
        cursor = db.execute(
            f"SELECT {_COLUMNS} FROM history WHERE at > ? AND at <= ? ORDER BY at, rowid",
            (start, end),
        )
        rows = [_row(t, keys, labels) for t in cursor]
        if skip_empty:
            rows = [r for r in rows if r.values]
    if samples:
        found = db.execute(
            "SELECT at, name, value FROM samples WHERE at > ? AND at <= ? ORDER BY at",
            (start, end),
        ).fetchall()
        rows.extend(
            Row(at=float(at), values={str(name): float(value)})
            for at, name, value in found
            if keys is None or name in keys
        )
        rows.sort(key=lambda r: r.at)
    return rows


def written_since(db: sqlite3.Connection, seq: int | None) -> tuple[int, list[float]]:
    """The file's last write count, and the event times of the trace rows written after
    `seq` (None: only the count). Rows of a file older than schema 5 have none: unwritten
    since the upgrade."""
    top = db.execute("SELECT max(seq) FROM history").fetchone()[0] or 0
    if seq is None or top <= seq:
        return int(top), []
    found = db.execute("SELECT at FROM history WHERE seq > ?", (seq,)).fetchall()
    return int(top), [float(at) for (at,) in found]


def count_between(db: sqlite3.Connection, start: float, end: float) -> int:
    """The trace rows with start < at <= end (the time index alone)."""
    found = db.execute(
        "SELECT count(*) FROM history WHERE at > ? AND at <= ?", (start, end)
    ).fetchone()
    return int(found[0])


class HistoryReader:
    """Reads the history on a connection of its own: each `rows()` is one snapshot of the
    file (a WAL read transaction), and the writers' lock is never taken."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=10
        )
        self._db.execute("PRAGMA query_only = ON")

    def rows(
        self,
        start: float,
        end: float,
        keys: Collection[str] | None = None,
        *,
        traces: bool = True,
        samples: bool = True,
    ) -> list[Row]:
        """As `History.rows`, but trace rows without any of `keys` are left out (no rule
        reads them)."""
        with self._lock:
            if self._db is None:
                raise sqlite3.ProgrammingError("the history reader is closed")
            self._db.execute("BEGIN")
            try:
                return read_rows(
                    self._db,
                    start,
                    end,
                    keys,
                    traces=traces,
                    samples=samples,
                    skip_empty=keys is not None,
                )
            finally:
                self._db.execute("COMMIT")

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """This reader's own connection, inside one read transaction (one snapshot)."""
        with self._lock:
            if self._db is None:
                raise sqlite3.ProgrammingError("the history reader is closed")
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
