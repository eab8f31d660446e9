"""Durable state in one SQLite file: watermark, per-trace fingerprints, score outbox.

The outbox is what makes pushing fire-and-forget without losing anything: a
trace's scores and its fingerprint are written in one transaction, the
dispatcher posts from the outbox and deletes a score only once Langfuse has
acknowledged it. A crash at any point leaves either the old state or the new
one; a restart re-sends what was not acknowledged under the same ids.

The signal history (`history`) and the alert rules' state (`alerts`) live in
the same file, in stores of their own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson

from observer.alerts.engine import Row
from observer.model import ScoreEvent
from observer.state.alerts import ALERTS_SCHEMA, AlertStore
from observer.state.db import Database, StateError
from observer.state.history import HISTORY_SCHEMA, History, write_row
from observer.state.judge import JUDGE_SCHEMA, JudgeStore
from observer.times import iso, parse_time

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
"""


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
    """Watermark, fingerprints, outbox and judge budget; `history` and `alerts` beside them."""

    def __init__(self, path: str | Path, max_outbox: int = 100_000) -> None:
        self._file = Database(path, _SCHEMA + HISTORY_SCHEMA + ALERTS_SCHEMA + JUDGE_SCHEMA)
        self.path = self._file.path
        self.max_outbox = max_outbox
        self._lock = self._file.lock
        self._db = self._file.db
        self._scalar = self._file.scalar
        self._get_meta = self._file.get_meta
        self._set_meta = self._file.set_meta
        self._transaction = self._file.transaction
        self.history = History(self._file)
        self.alerts = AlertStore(self._file)
        self.judge = JudgeStore(self._file)
        try:
            # Backoffs belong to the process that failed: a new one tries every queued
            # score at once, so a restart after an outage delivers what the outbox holds.
            self._db.execute("UPDATE outbox SET next_attempt = 0, attempts = 0")
            self._seq = self._scalar("SELECT COALESCE(MAX(seq), 0) FROM outbox")
            self._outbox_size = self._scalar("SELECT COUNT(*) FROM outbox")
        except sqlite3.Error as error:
            raise StateError(f"state file {self.path} is not usable: {error}") from None

    def close(self) -> None:
        self._file.close()

    # -- watermark ------------------------------------------------------------

    def watermark(self) -> datetime | None:
        """Every trace whose root started before this has been settled and handled."""
        with self._lock:
            value = self._get_meta("watermark")
        return parse_time(value) if value else None

    def set_watermark(self, moment: datetime) -> None:
        with self._transaction():
            self._set_meta("watermark", iso(moment))

    def check_writable(self, now: datetime) -> None:
        """A tiny write; raises StateError when the file cannot take one (disk full, read-only)."""
        with self._transaction():
            self._set_meta("written_at", iso(now))

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
        history: Row | None = None,
    ) -> None:
        """Store the trace's fingerprint and queue its scores, atomically.

        A score already queued under the same id is replaced (its newest value
        is what Langfuse must end up with). Raises OutboxFull when there is no
        room: nothing is written, the trace will be seen again.
        """
        with self._transaction() as db:
            if scores and self._outbox_size + len(scores) > self.max_outbox:
                raise OutboxFull(f"outbox holds {self._outbox_size} scores (max {self.max_outbox})")
            added = self._queue(db, scores)
            db.execute(
                "INSERT INTO traces (trace_id, fingerprint, root_start, seen_at) "
                "VALUES (?, ?, ?, ?) "
                "ON CONFLICT(trace_id) DO UPDATE SET fingerprint = excluded.fingerprint, "
                "seen_at = excluded.seen_at",
                (trace_id, fingerprint, iso(root_start), iso(now)),
            )
            if history is not None:
                write_row(db, history)
        self._outbox_size += added  # counted, never recounted: an outage must stay cheap

    def _queue(self, db: sqlite3.Connection, scores: Sequence[ScoreEvent]) -> int:
        """Queue scores; how many were not in the outbox yet.

        A score already queued under its id is replaced: its newest value is what
        Langfuse must end up with.
        """
        known = 0
        for start in range(0, len(scores), 500):
            ids = [score.id for score in scores[start : start + 500]]
            marks = ",".join("?" * len(ids))
            known += self._scalar(f"SELECT COUNT(*) FROM outbox WHERE score_id IN ({marks})", *ids)
        for score in scores:
            self._seq += 1
            db.execute(
                "INSERT INTO outbox (score_id, seq, trace_id, payload) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(score_id) DO UPDATE SET payload = excluded.payload, "
                "seq = excluded.seq, attempts = 0, next_attempt = 0",
                (score.id, self._seq, score.trace_id, _payload(score)),
            )
        return len({score.id for score in scores}) - known

    def enqueue(self, scores: Sequence[ScoreEvent]) -> None:
        """Queue scores that belong to no trace pass (the judge's). Raises OutboxFull."""
        with self._transaction() as db:
            if self._outbox_size + len(scores) > self.max_outbox:
                raise OutboxFull(f"outbox holds {self._outbox_size} scores (max {self.max_outbox})")
            added = self._queue(db, scores)
        self._outbox_size += added

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
        removed = 0
        with self._transaction() as db:
            for score in scores:
                removed += db.execute(
                    "DELETE FROM outbox WHERE score_id = ? AND payload = ?",
                    (score.id, _payload(score)),
                ).rowcount
        self._outbox_size -= removed

    def retry_later(self, scores: Sequence[ScoreEvent], at_ts: float, error: str) -> None:
        with self._transaction() as db:
            db.executemany(
                "UPDATE outbox SET attempts = attempts + 1, next_attempt = ?, last_error = ? "
                "WHERE score_id = ?",
                [(at_ts, error[:500], score.id) for score in scores],
            )
