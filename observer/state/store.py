"""Durable state in one SQLite file: watermark, per-trace fingerprints, score outbox.

The outbox is what makes pushing fire-and-forget without losing anything: a
trace's scores and its fingerprint are written in one transaction, the
dispatcher posts from the outbox and deletes a score only once Langfuse has
acknowledged it. A crash at any point leaves either the old state or the new
one; a restart re-sends what was not acknowledged under the same ids.

Thread-safe: one connection guarded by a lock (the poll job and the
dispatcher thread share it). WAL mode keeps writers from blocking readers.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson

from observer.model import ScoreEvent
from observer.times import iso, parse_time

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS traces (
    trace_id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    root_start TEXT NOT NULL,
    seen_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_root_start ON traces (root_start);
CREATE TABLE IF NOT EXISTS outbox (
    score_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    trace_id TEXT NOT NULL,
    payload BLOB NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt REAL NOT NULL DEFAULT 0,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (next_attempt, seq);
CREATE TABLE IF NOT EXISTS judge_budget (
    bucket TEXT PRIMARY KEY,
    judged INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0
);
"""


class StateError(Exception):
    """The state file cannot be opened, read or written; the message says which and why."""


class OutboxFull(Exception):
    """The outbox holds `max_outbox` scores; the trace is deferred, not lost."""


@dataclass(frozen=True, slots=True)
class Pending:
    """An outbox row due for sending."""

    score: ScoreEvent
    attempts: int


def _payload(score: ScoreEvent) -> bytes:
    return orjson.dumps(score)


def _score(payload: bytes) -> ScoreEvent:
    return ScoreEvent(**orjson.loads(payload))


class State:
    def __init__(self, path: str | Path, max_outbox: int = 100_000) -> None:
        self.path = Path(path)
        self.max_outbox = max_outbox
        self._lock = threading.Lock()
        try:
            if self.path.parent and not self.path.parent.exists():
                raise StateError(
                    f"state file {self.path}: directory {self.path.parent} does not exist"
                )
            self._db = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=10
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            version = self._get_meta("schema_version")
            if version is None:
                self._set_meta("schema_version", str(SCHEMA_VERSION))
            elif version != str(SCHEMA_VERSION):
                raise StateError(
                    f"state file {self.path} has schema {version}; "
                    f"this observer needs {SCHEMA_VERSION}"
                )
            # Prove it is writable now, not at the first scored trace.
            self._set_meta("opened_at", iso(datetime.now().astimezone()))
            # Backoffs belong to the process that failed: a new one tries every queued
            # score at once, so a restart after an outage delivers what the outbox holds.
            self._db.execute("UPDATE outbox SET next_attempt = 0, attempts = 0")
        except sqlite3.Error as error:
            raise StateError(f"state file {self.path} is not usable: {error}") from None
        self._seq = self._scalar("SELECT COALESCE(MAX(seq), 0) FROM outbox")
        self._outbox_size = self._scalar("SELECT COUNT(*) FROM outbox")

    # -- plumbing -------------------------------------------------------------

    def _scalar(self, sql: str, *args: object) -> int:
        row = self._db.execute(sql, args).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def _get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def _set_meta(self, key: str, value: str) -> None:
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- watermark ------------------------------------------------------------

    def watermark(self) -> datetime | None:
        """Every trace whose root started before this has been settled and handled."""
        with self._lock:
            value = self._get_meta("watermark")
        return parse_time(value) if value else None

    def set_watermark(self, moment: datetime) -> None:
        with self._lock:
            self._set_meta("watermark", iso(moment))

    # -- traces ---------------------------------------------------------------

    def fingerprint(self, trace_id: str) -> str | None:
        with self._lock:
            row = self._db.execute(
                "SELECT fingerprint FROM traces WHERE trace_id = ?", (trace_id,)
            ).fetchone()
        return str(row[0]) if row else None

    def fingerprints(self, trace_ids: Sequence[str]) -> dict[str, str]:
        """Known fingerprints of many traces in one query per 500 ids."""
        found: dict[str, str] = {}
        with self._lock:
            for start in range(0, len(trace_ids), 500):
                chunk = trace_ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT trace_id, fingerprint FROM traces WHERE trace_id IN ({marks})", chunk
                ).fetchall()
                found.update((str(t), str(f)) for t, f in rows)
        return found

    def record_trace(
        self,
        trace_id: str,
        fingerprint: str,
        root_start: datetime,
        scores: Sequence[ScoreEvent],
        now: datetime,
    ) -> None:
        """Store the trace's fingerprint and queue its scores, atomically.

        A score already queued under the same id is replaced (its newest value
        is what Langfuse must end up with). Raises OutboxFull when there is no
        room: nothing is written, the trace will be seen again.
        """
        with self._transaction() as db:
            if scores and self._outbox_size + len(scores) > self.max_outbox:
                raise OutboxFull(f"outbox holds {self._outbox_size} scores (max {self.max_outbox})")
            self._queue(db, scores)
            db.execute(
                "INSERT INTO traces (trace_id, fingerprint, root_start, seen_at) "
                "VALUES (?, ?, ?, ?) "
                "ON CONFLICT(trace_id) DO UPDATE SET fingerprint = excluded.fingerprint, "
                "seen_at = excluded.seen_at",
                (trace_id, fingerprint, iso(root_start), iso(now)),
            )
            self._outbox_size = self._scalar("SELECT COUNT(*) FROM outbox")

    def _queue(self, db: sqlite3.Connection, scores: Sequence[ScoreEvent]) -> None:
        # A score already queued under its id is replaced: its newest value is what
        # Langfuse must end up with.
        for score in scores:
            self._seq += 1
            db.execute(
                "INSERT INTO outbox (score_id, seq, trace_id, payload) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(score_id) DO UPDATE SET payload = excluded.payload, "
                "seq = excluded.seq, attempts = 0, next_attempt = 0",
                (score.id, self._seq, score.trace_id, _payload(score)),
            )

    def enqueue(self, scores: Sequence[ScoreEvent]) -> None:
        """Queue scores that belong to no trace pass (the judge's). Raises OutboxFull."""
        with self._transaction() as db:
            if self._outbox_size + len(scores) > self.max_outbox:
                raise OutboxFull(f"outbox holds {self._outbox_size} scores (max {self.max_outbox})")
            self._queue(db, scores)
            self._outbox_size = self._scalar("SELECT COUNT(*) FROM outbox")

    # -- judge budget ---------------------------------------------------------

    def judge_budget(self, hour: str, day: str) -> tuple[int, int]:
        """(traces judged in this hour bucket, tokens spent in this day bucket)."""
        with self._lock:
            judged = self._scalar("SELECT judged FROM judge_budget WHERE bucket = ?", f"h:{hour}")
            tokens = self._scalar("SELECT tokens FROM judge_budget WHERE bucket = ?", f"d:{day}")
        return judged, tokens

    def spend_judge_budget(self, hour: str, day: str, judged: int, tokens: int) -> None:
        with self._transaction() as db:
            for bucket, j, t in ((f"h:{hour}", judged, 0), (f"d:{day}", 0, tokens)):
                db.execute(
                    "INSERT INTO judge_budget (bucket, judged, tokens) VALUES (?, ?, ?) "
                    "ON CONFLICT(bucket) DO UPDATE SET judged = judged + excluded.judged, "
                    "tokens = tokens + excluded.tokens",
                    (bucket, j, t),
                )

    def prune_traces(self, root_before: datetime) -> int:
        """Forget fingerprints of traces too old to be polled again."""
        with self._transaction() as db:
            cursor = db.execute("DELETE FROM traces WHERE root_start < ?", (iso(root_before),))
            return cursor.rowcount

    def trace_count(self) -> int:
        with self._lock:
            return self._scalar("SELECT COUNT(*) FROM traces")

    # -- outbox ---------------------------------------------------------------

    def outbox_size(self) -> int:
        with self._lock:
            return self._outbox_size

    def due(self, now_ts: float, limit: int) -> list[Pending]:
        """Scores due for sending, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT payload, attempts FROM outbox WHERE next_attempt <= ? ORDER BY seq LIMIT ?",
                (now_ts, limit),
            ).fetchall()
        return [Pending(_score(payload), int(attempts)) for payload, attempts in rows]

    def next_due(self) -> float | None:
        """When the earliest queued score is due (unix seconds), or None when empty."""
        with self._lock:
            row = self._db.execute("SELECT MIN(next_attempt) FROM outbox").fetchone()
        return float(row[0]) if row and row[0] is not None else None

    def acknowledge(self, scores: Sequence[ScoreEvent]) -> None:
        """Langfuse has the scores: remove them, unless re-queued with a newer value since."""
        with self._transaction() as db:
            for score in scores:
                db.execute(
                    "DELETE FROM outbox WHERE score_id = ? AND payload = ?",
                    (score.id, _payload(score)),
                )
            self._outbox_size = self._scalar("SELECT COUNT(*) FROM outbox")

    def retry_later(self, scores: Sequence[ScoreEvent], at_ts: float, error: str) -> None:
        with self._transaction() as db:
            db.executemany(
                "UPDATE outbox SET attempts = attempts + 1, next_attempt = ?, last_error = ? "
                "WHERE score_id = ?",
                [(at_ts, error[:500], score.id) for score in scores],
            )
