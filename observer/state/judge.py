"""The judge's budget and its samples waiting to be judged, in the state file.

A sample is written here when it is queued, with the tokens it is expected
to cost, so the caps count what is queued, not only what was spent (a full
queue can no longer overshoot the daily cap). It leaves when it is judged:
then its reservation gives way to the tokens it really used. A sample still
here at shutdown is judged after the restart. A pass reserves its sample in
the trace's own transaction (`reserve_in`), so no kill between the trace's
fingerprint and its sample can lose it. A sample is keyed by the trace and
the `basis` it was taken on (a digest of the answer and its evidence): a trace
re-scored with another answer while its sample waits replaces the sample, and
the stale one is not judged. The resolver's findings travel with the sample:
the funnel after a restart is the one it was offered with.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from observer.state.db import Database
from observer.times import iso, parse_time

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
    findings BLOB,
    basis TEXT
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
    basis: str | None = None  # the answer it was taken on; None: a version before bases


class JudgeStore:
    def __init__(self, database: Database) -> None:
        self._file = database

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

    def write(self, step: Callable[[sqlite3.Connection], None]) -> None:
        """One write of the caller's (a reservation) in a transaction of its own."""
        with self._file.transaction() as db:
            step(db)

    def basis(self, trace_id: str) -> tuple[bool, str | None]:
        """(a sample of the trace waits, the basis it was taken on)."""
        with self._file.lock:
            row = self._file.db.execute(
                "SELECT basis FROM judge_pending WHERE trace_id = ?", (trace_id,)
            ).fetchone()
        return (False, None) if row is None else (True, None if row[0] is None else str(row[0]))

    def settle(self, trace_id: str, day: str, tokens: int, basis: str | None = None) -> None:
        """A sample was judged: its reservation gives way to the tokens it used.

        The waiting sample is removed only when it is the one judged (same basis): one
        taken on a newer answer since stays to be judged."""
        with self._file.transaction() as db:
            db.execute(
                "DELETE FROM judge_pending WHERE trace_id = ? AND basis IS ?", (trace_id, basis)
            )
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
                "SELECT trace_id, record, day, reserved, findings, basis FROM judge_pending "
                "ORDER BY queued_at"
            ).fetchall()
        return [
            PendingSample(
                str(t),
                bytes(r),
                str(d),
                int(n),
                None if f is None else bytes(f),
                None if b is None else str(b),
            )
            for t, r, d, n, f, b in rows
        ]

    def judged_since(self, since: datetime) -> list[tuple[str, str, datetime]]:
        """The answers this state file's judge scored, of traces recorded since `since`:
        (trace, basis, when the trace was recorded with it). A fleet member gives their
        claims back to a Redis that lost them (observer.fleet.budget)."""
        with self._file.lock:
            rows = self._file.db.execute(
                "SELECT DISTINCT s.trace_id, s.basis, t.seen_at FROM trace_scores s "
                "JOIN traces t ON t.trace_id = s.trace_id "
                "WHERE s.basis IS NOT NULL AND t.seen_at >= ? ORDER BY t.seen_at",
                (iso(since),),
            ).fetchall()
        found: list[tuple[str, str, datetime]] = []
        for trace_id, basis, seen_at in rows:
            moment = parse_time(seen_at)
            if moment is not None:
                found.append((str(trace_id), str(basis), moment))
        return found

    def canary_spent(self, day: str) -> int:
        """Tokens the canary's runs used on `day` (its own share of the daily cap)."""
        with self._file.lock:
            return self._file.scalar("SELECT tokens FROM judge_budget WHERE bucket = ?", f"c:{day}")

    def canary_ran(self, day: str, tokens: int, run: bytes | None) -> None:
        """A canary run's tokens counted on `day`, and the run kept (None: a run cut short
        or without a verdict: its tokens count, the last whole run stays)."""
        with self._file.transaction() as db:
            _add(db, f"c:{day}", judged=0, tokens=tokens)
            if run is not None:
                self._file.set_meta("judge_canary_run", run.decode())

    def canary_last(self) -> bytes | None:
        """The last whole canary run as JSON (observer.judge.canary_run), or None."""
        with self._file.lock:
            value = self._file.get_meta("judge_canary_run")
        return None if value is None else value.encode()

    def abandon(self, trace_id: str) -> None:
        """Give a sample up: its reservation is returned."""
        with self._file.transaction() as db:
            db.execute("DELETE FROM judge_pending WHERE trace_id = ?", (trace_id,))


def reserve_in(
    db: sqlite3.Connection,
    trace_id: str,
    record: bytes,
    hour: str,
    day: str,
    tokens: int,
    queued_at: str,
    findings: bytes | None,
    basis: str | None,
) -> bool:
    """Queue a sample inside the caller's transaction; False when it waits already.

    A sample of the same trace taken on another basis is replaced (the newer answer
    is judged, the hour's count not taken twice)."""
    replaced = db.execute(
        "UPDATE judge_pending SET record = ?, findings = ?, basis = ?, queued_at = ? "
        "WHERE trace_id = ? AND basis IS NOT ?",
        (record, findings, basis, queued_at, trace_id, basis),
    ).rowcount
    if replaced:
        return True
    fresh = db.execute(
        "INSERT INTO judge_pending (trace_id, record, day, reserved, queued_at, findings, basis) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(trace_id) DO NOTHING",
        (trace_id, record, day, tokens, queued_at, findings, basis),
    ).rowcount
    if fresh:
        _add(db, f"h:{hour}", judged=1, tokens=0)
    return bool(fresh)


def _add(db: sqlite3.Connection, bucket: str, judged: int, tokens: int) -> None:
    db.execute(
        "INSERT INTO judge_budget (bucket, judged, tokens) VALUES (?, ?, ?) "
        "ON CONFLICT(bucket) DO UPDATE SET judged = judged + excluded.judged, "
        "tokens = tokens + excluded.tokens",
        (bucket, judged, tokens),
    )
