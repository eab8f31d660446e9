"""The judge's budget and its samples waiting to be judged, in the state file.

A sample is written here when it is queued, with the tokens it is expected
to cost, so the caps count what is queued, not only what was spent (a full
queue can no longer overshoot the daily cap). It leaves when it is judged:
then its reservation gives way to the tokens it really used. A sample still
here at shutdown is judged after the restart; the trace's fingerprint is
saved already, so nothing else would offer it again. The resolver's findings
travel with the sample: the funnel after a restart is the one it was offered with.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from observer.state.db import Database

JUDGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS judge_budget (
    bucket TEXT PRIMARY KEY,
    judged INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS judge_pending (
    trace_id TEXT PRIMARY KEY,
    record BLOB NOT NULL,
    day TEXT NOT NULL,
    reserved INTEGER NOT NULL,
    queued_at TEXT NOT NULL,
    findings BLOB
);
"""

# Until the first traces are judged: a typical trace's two calls (claims, verdicts).
DEFAULT_TOKENS_PER_TRACE = 3000


@dataclass(frozen=True, slots=True)
class PendingSample:
    trace_id: str
    record: bytes  # the RagRecord as JSON
    day: str
    reserved: int
    findings: bytes | None = None  # the resolver's findings as JSON; None: none


class JudgeStore:
    def __init__(self, database: Database) -> None:
        self._file = database
        with database.lock:
            columns = {row[1] for row in database.db.execute("PRAGMA table_info(judge_pending)")}
            if "findings" not in columns:  # a state file of a version before the funnel
                database.db.execute("ALTER TABLE judge_pending ADD COLUMN findings BLOB")

    def budget(self, hour: str, day: str) -> tuple[int, int]:
        """(traces judged or queued this hour, tokens spent or reserved this day)."""
        with self._file.lock:
            judged = self._file.scalar(
                "SELECT judged FROM judge_budget WHERE bucket = ?", f"h:{hour}"
            )
            spent = self._file.scalar(
                "SELECT tokens FROM judge_budget WHERE bucket = ?", f"d:{day}"
            )
            reserved = self._file.scalar(
                "SELECT COALESCE(SUM(reserved), 0) FROM judge_pending WHERE day = ?", day
            )
        return judged, spent + reserved

    def tokens_per_trace(self) -> int:
        """What one judged trace is expected to cost (a moving average of real ones)."""
        with self._file.lock:
            value = self._file.get_meta("judge_tokens_per_trace")
        return int(float(value)) if value else DEFAULT_TOKENS_PER_TRACE

    def reserve(
        self,
        trace_id: str,
        record: bytes,
        hour: str,
        day: str,
        tokens: int,
        queued_at: str,
        findings: bytes | None = None,
    ) -> bool:
        """Queue a sample and count it against the caps; False when it is queued already."""
        with self._file.transaction() as db:
            fresh = db.execute(
                "INSERT INTO judge_pending (trace_id, record, day, reserved, queued_at, findings) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(trace_id) DO NOTHING",
                (trace_id, record, day, tokens, queued_at, findings),
            ).rowcount
            if fresh:
                _add(db, f"h:{hour}", judged=1, tokens=0)
        return bool(fresh)

    def settle(self, trace_id: str, day: str, tokens: int) -> None:
        """A sample was judged: its reservation gives way to the tokens it used."""
        with self._file.transaction() as db:
            db.execute("DELETE FROM judge_pending WHERE trace_id = ?", (trace_id,))
            _add(db, f"d:{day}", judged=0, tokens=tokens)
            if tokens > 0:
                known = self._file.get_meta("judge_tokens_per_trace")
                average = float(known) if known else float(tokens)
                self._file.set_meta("judge_tokens_per_trace", f"{0.8 * average + 0.2 * tokens:.1f}")

    def spend(self, hour: str, day: str, judged: int, tokens: int) -> None:
        """Count judging done outside the queue (or by another replica's numbers)."""
        with self._file.transaction() as db:
            _add(db, f"h:{hour}", judged=judged, tokens=0)
            _add(db, f"d:{day}", judged=0, tokens=tokens)

    def pending(self) -> list[PendingSample]:
        with self._file.lock:
            rows = self._file.db.execute(
                "SELECT trace_id, record, day, reserved, findings FROM judge_pending "
                "ORDER BY queued_at"
            ).fetchall()
        return [
            PendingSample(str(t), bytes(r), str(d), int(n), None if f is None else bytes(f))
            for t, r, d, n, f in rows
        ]

    def abandon(self, trace_id: str) -> None:
        """Give a sample up: its reservation is returned."""
        with self._file.transaction() as db:
            db.execute("DELETE FROM judge_pending WHERE trace_id = ?", (trace_id,))


def _add(db: sqlite3.Connection, bucket: str, judged: int, tokens: int) -> None:
    db.execute(
        "INSERT INTO judge_budget (bucket, judged, tokens) VALUES (?, ?, ?) "
        "ON CONFLICT(bucket) DO UPDATE SET judged = judged + excluded.judged, "
        "tokens = tokens + excluded.tokens",
        (bucket, judged, tokens),
    )
