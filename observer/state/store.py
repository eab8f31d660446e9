"""Durable state in one SQLite file: watermark, per-trace fingerprints, score outbox.

The outbox is what makes pushing fire-and-forget without losing anything: a
trace's scores and its fingerprint are written in one transaction, the
dispatcher posts from the outbox and deletes a score only once Langfuse has
acknowledged it. A crash at any point leaves either the old state or the new
one; a restart re-sends what was not acknowledged under the same ids. A
trace's scores carry its last activity (unix seconds) in the outbox, so the
acknowledgement of the last of them tells how long the trace took from its
last observation to its scores in Langfuse (`acknowledge`).

The signal history (`history`) and the alert rules' state (`alerts`) live in
the same file, in stores of their own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

import orjson

from observer.model import ScoreEvent
from observer.state.alerts import ALERTS_SCHEMA, AlertStore
from observer.state.db import Database, StateError
from observer.state.history import HISTORY_SCHEMA, History, write_row
from observer.state.judge import JUDGE_SCHEMA, JudgeStore
from observer.state.rows import Row
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
CREATE INDEX IF NOT EXISTS outbox_trace ON outbox (trace_id);
CREATE TABLE IF NOT EXISTS trace_scores (
    trace_id TEXT NOT NULL,
    name TEXT NOT NULL,
    payload BLOB NOT NULL,
    basis TEXT,
    PRIMARY KEY (trace_id, name)
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""

Op = Literal["upsert", "delete"]
# Ids a statement names at most (under SQLite's bound on variables).
_CHUNK = 500


def _in_chunks(ids: Sequence[str]) -> Iterator[tuple[list[str], str]]:
    """`ids` in slices one statement can name, each with its `?` placeholders."""
    for start in range(0, len(ids), _CHUNK):
        chunk = list(ids[start : start + _CHUNK])
        yield chunk, ",".join("?" * len(chunk))


class OutboxFull(Exception):
    """The outbox holds `max_outbox` scores; the trace is deferred, not lost."""


@dataclass(frozen=True, slots=True)
class TraceWrite:
    """One trace's fingerprint, score set and history row, as `record_trace` writes them."""

    trace_id: str
    fingerprint: str
    root_start: datetime
    scores: Sequence[ScoreEvent]
    now: datetime
    history: Row | None = None
    basis: str | None = None
    during: Callable[[sqlite3.Connection], None] | None = None
    latest: datetime | None = None
    activity: datetime | None = None


@dataclass(frozen=True, slots=True)
class Pending:
    """An outbox row due for sending."""

    score: ScoreEvent
    attempts: int
    op: Op = "upsert"  # delete: the score no longer applies and leaves Langfuse


def _payload(score: ScoreEvent) -> bytes:
    return orjson.dumps(score)


def _score(payload: bytes) -> ScoreEvent:
    return ScoreEvent(**orjson.loads(payload))


class State:
    """Watermark, fingerprints, outbox and judge budget; `history` and `alerts` beside them."""

    def __init__(
        self,
        path: str | Path,
        max_outbox: int = 100_000,
        *,
        on_row: Callable[[Row], None] | None = None,
    ) -> None:
        """`on_row`: told every trace row this process commits to the history."""
        self._file = Database(path, _SCHEMA + HISTORY_SCHEMA + ALERTS_SCHEMA + JUDGE_SCHEMA)
        self.path = self._file.path
        self.max_outbox = max_outbox
        self._lock = self._file.lock
        self._db = self._file.db
        self._scalar = self._file.scalar
        self._get_meta = self._file.get_meta
        self._set_meta = self._file.set_meta
        self._transaction = self._file.transaction
        self.history = History(self._file, on_row)
        self.alerts = AlertStore(self._file)
        self.judge = JudgeStore(self._file)
        try:
            with self._transaction() as db:
                # Backoffs belong to the process that failed: a new one tries every queued
                # score at once, so a restart after an outage delivers what the outbox holds.
                db.execute("UPDATE outbox SET next_attempt = 0, attempts = 0")
                # The size is kept in the file itself, counted by the transaction that
                # queues or removes a score, so every process that writes it (a daemon and
                # a `backfill --state` beside it) sees the same number; recounted at open.
                db.execute(
                    "INSERT INTO counters (name, value) VALUES ('outbox', "
                    "(SELECT COUNT(*) FROM outbox)) ON CONFLICT(name) DO UPDATE "
                    "SET value = excluded.value"
                )
                # The last queue position handed out, kept beside it so queueing costs
                # no scan of the outbox (a MAX(seq) per trace made a long catch-up quadratic).
                db.execute(
                    "INSERT INTO counters (name, value) VALUES ('outbox_seq', "
                    "(SELECT COALESCE(MAX(seq), 0) FROM outbox)) ON CONFLICT(name) DO UPDATE "
                    "SET value = MAX(value, excluded.value)"
                )
        except sqlite3.Error as error:
            raise StateError(f"state file {self.path} is not usable: {error}") from None

    def close(self) -> None:
        self._file.close()

    def let_go(self) -> None:
        """The hold given up, the file left open under a thread abandoned at the stop."""
        self._file.let_go()

    # -- watermark ------------------------------------------------------------

    def _moment(self, key: str) -> datetime | None:
        with self._lock:
            value = self._get_meta(key)
        return parse_time(value) if value else None

    def _set_moment(self, key: str, moment: datetime) -> None:
        with self._transaction():
            self._set_meta(key, iso(moment))

    def watermark(self) -> datetime | None:
        """Every trace whose root started before this has been settled and handled."""
        return self._moment("watermark")

    def set_watermark(self, moment: datetime) -> None:
        self._set_moment("watermark", moment)

    def received_through(self) -> datetime | None:
        """The OTLP receiver's own mark: every trace it took whose spans start before this
        is scored (docs/daemon.md#the-event-path)."""
        return self._moment("received_through")

    def set_received_through(self, moment: datetime) -> None:
        self._set_moment("received_through", moment)

    def scored_through(self) -> datetime | None:
        """Where the history is whole, for the alert rules on traces and the pruning: the
        later of the poller's watermark and the receiver's mark (the receiver scores in
        seconds what the poller, its backstop, reads minutes later)."""
        marks = [m for m in (self.watermark(), self.received_through()) if m is not None]
        return max(marks, default=None)

    def noted(self, key: str) -> str | None:
        """A fact the daemon keeps across restarts (`note`), or None."""
        with self._lock:
            return self._get_meta(f"note:{key}")

    def note(self, key: str, value: str) -> None:
        with self._transaction():
            self._set_meta(f"note:{key}", value)

    def check_writable(self, now: datetime) -> None:
        """A tiny write; raises StateError when the file cannot take one (disk full,
        read-only), or is no longer at its path (observer.state.db: deleted, replaced)."""
        self._file.check_identity()
        with self._transaction():
            self._set_meta("written_at", iso(now))

    def hold(self) -> None:
        """This file, exclusively, for the process's life (StateError naming the holder)."""
        self._file.hold()

    def check_identity(self) -> None:
        self._file.check_identity()

    def integrity(self) -> list[str]:
        return self._file.integrity()

    def checkpoint(self) -> None:
        """The WAL truncated (after a full disk, the space it took); a failure is logged."""
        try:
            self._file.checkpoint()
        except sqlite3.Error as error:
            raise StateError(f"state file {self.path}: checkpoint failed: {error}") from None

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

    def trace_marks(self, trace_ids: Sequence[str]) -> dict[str, tuple[datetime, datetime | None]]:
        """(earliest root, latest start seen) of each known trace, one query per 500 ids."""
        found: dict[str, tuple[datetime, datetime | None]] = {}
        with self._lock:
            for start in range(0, len(trace_ids), 500):
                chunk = trace_ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT trace_id, root_start, latest FROM traces WHERE trace_id IN ({marks})",
                    chunk,
                ).fetchall()
                for trace_id, root_start, latest in rows:
                    moment = parse_time(root_start)
                    if moment is not None:
                        found[str(trace_id)] = (moment, parse_time(latest))
        return found

    def note_latest(self, trace_id: str, latest: datetime) -> None:
        """An unchanged trace showed observations up to `latest`: remembered, so a pass
        that later finds a newer one below the trace's root knows the trace changed."""
        with self._transaction() as db:
            db.execute(
                "UPDATE traces SET latest = ? WHERE trace_id = ? "
                "AND (latest IS NULL OR latest < ?)",
                (iso(latest), trace_id, iso(latest)),
            )

    def record_trace(
        self,
        trace_id: str,
        fingerprint: str,
        root_start: datetime,
        scores: Sequence[ScoreEvent],
        now: datetime,
        history: Row | None = None,
        *,
        basis: str | None = None,
        during: Callable[[sqlite3.Connection], None] | None = None,
        latest: datetime | None = None,
        activity: datetime | None = None,
    ) -> int:
        """Store the trace's fingerprint and its score set, atomically; scores deleted.

        The trace's scores become `scores`: each queued (a score already queued under
        its id is replaced, its newest value is what Langfuse must end up with), and
        each score it had before that is not among them queued for deletion — unless
        it was written on the same `basis` (the judge's scores of an unchanged answer
        stay). `during` runs inside the transaction (the judge's reservation). Raises
        OutboxFull when there is no room: nothing is written, the trace will be seen
        again. Returns how many scores were queued for deletion.
        """
        write = TraceWrite(
            trace_id, fingerprint, root_start, scores, now, history, basis, during, latest, activity
        )
        (result,) = self.record_traces([write])
        if isinstance(result, Exception):
            raise result
        return result

    def record_traces(self, writes: Sequence[TraceWrite]) -> list[int | Exception]:
        """Many traces recorded as `record_trace` records one, in one transaction: one
        commit for them all (the event path's settling step), each trace still all or
        nothing (a savepoint of its own).

        For each write, in order: how many scores were queued for deletion, or why that
        trace wrote nothing: OutboxFull, or what its `during` raised (the others are
        written). A failure of the file itself (StateError) writes none of them.
        """
        results: list[int | Exception] = []
        with self._transaction() as db:
            for write in writes:
                count = self._outbox_count(db)
                if write.scores and count + len(write.scores) > self.max_outbox:
                    results.append(
                        OutboxFull(f"outbox holds {count} scores (max {self.max_outbox})")
                    )
                    continue
                db.execute("SAVEPOINT trace")
                try:
                    deleted = self._write_trace(db, write)
                except sqlite3.Error:
                    raise  # the file: the whole transaction is rolled back
                except Exception as error:
                    db.execute("ROLLBACK TO trace")
                    db.execute("RELEASE trace")
                    results.append(error)
                    continue
                db.execute("RELEASE trace")
                results.append(deleted)
        for write, result in zip(writes, results, strict=True):
            if write.history is not None and not isinstance(result, Exception):
                self.history.written(write.history)
        return results

    def _write_trace(self, db: sqlite3.Connection, write: TraceWrite) -> int:
        deleted = self._replace_set(db, write.trace_id, write.scores, write.basis, write.activity)
        latest = write.latest
        db.execute(
            "INSERT INTO traces (trace_id, fingerprint, root_start, seen_at, latest) "
            "VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(trace_id) DO UPDATE SET fingerprint = excluded.fingerprint, "
            "seen_at = excluded.seen_at, "
            "root_start = MIN(root_start, excluded.root_start), "
            "latest = MAX(COALESCE(latest, ''), COALESCE(excluded.latest, ''))",
            (
                write.trace_id,
                write.fingerprint,
                iso(write.root_start),
                iso(write.now),
                latest and iso(latest),
            ),
        )
        if write.history is not None:
            write_row(db, write.history)
        if write.during is not None:
            write.during(db)
        return deleted

    def _replace_set(
        self,
        db: sqlite3.Connection,
        trace_id: str,
        scores: Sequence[ScoreEvent],
        basis: str | None,
        activity: datetime | None = None,
    ) -> int:
        names = {score.name for score in scores}
        stale = [
            _score(bytes(payload))
            for name, payload, made_on in db.execute(
                "SELECT name, payload, basis FROM trace_scores WHERE trace_id = ?", (trace_id,)
            ).fetchall()
            if name not in names and (made_on is None or made_on != basis)
        ]
        for score in stale:
            db.execute(
                "DELETE FROM trace_scores WHERE trace_id = ? AND name = ?", (trace_id, score.name)
            )
        payloads = [_payload(score) for score in scores]
        self._queue(db, stale, "delete")
        self._queue(db, scores, activity=activity, payloads=payloads)
        db.executemany(
            "INSERT INTO trace_scores (trace_id, name, payload, basis) VALUES (?, ?, ?, NULL) "
            "ON CONFLICT(trace_id, name) DO UPDATE SET payload = excluded.payload, basis = NULL",
            [
                (trace_id, score.name, payload)
                for score, payload in zip(scores, payloads, strict=True)
            ],
        )
        return len(stale)

    def _outbox_count(self, db: sqlite3.Connection) -> int:
        row = db.execute("SELECT value FROM counters WHERE name = 'outbox'").fetchone()
        return int(row[0]) if row else 0

    def _queue(
        self,
        db: sqlite3.Connection,
        scores: Sequence[ScoreEvent],
        op: Op = "upsert",
        *,
        activity: datetime | None = None,
        payloads: Sequence[bytes] | None = None,
    ) -> None:
        """Queue scores (or their deletion), each replacing what is queued under its id.

        The newest intent for an id is what Langfuse must end up with. `payloads`: the
        scores' own, when the caller encoded them already.
        """
        if not scores:
            return
        ids = list({score.id for score in scores})
        queued = 0  # of these ids, already in the outbox: replaced, not added
        for chunk, marks in _in_chunks(ids):
            (found,) = db.execute(
                f"SELECT COUNT(*) FROM outbox WHERE score_id IN ({marks})", chunk
            ).fetchone()
            queued += int(found)
        # Both counters in one statement: the outbox's size and the last position handed out.
        last = dict(
            db.execute(
                "UPDATE counters SET value = value + CASE name WHEN 'outbox' THEN ? ELSE ? END "
                "WHERE name IN ('outbox', 'outbox_seq') RETURNING name, value",
                (len(ids) - queued, len(scores)),
            ).fetchall()
        )
        seq = int(last["outbox_seq"]) - len(scores)
        moment = None if activity is None else activity.timestamp()
        db.executemany(
            "INSERT INTO outbox (score_id, seq, trace_id, payload, op, activity) "
            "VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(score_id) DO UPDATE SET payload = excluded.payload, "
            "seq = excluded.seq, op = excluded.op, activity = excluded.activity, "
            "attempts = 0, next_attempt = 0",
            [
                (score.id, seq + index, score.trace_id, payload, op, moment)
                for index, (score, payload) in enumerate(
                    zip(scores, payloads or [_payload(s) for s in scores], strict=True), start=1
                )
            ],
        )

    def enqueue(self, scores: Sequence[ScoreEvent], basis: str | None = None) -> None:
        """Queue scores that belong to no trace pass (the judge's). Raises OutboxFull.

        They join their trace's score set, made on `basis` (the answer they judged):
        a later pass deletes them once the trace's answer is another.
        """
        with self._transaction() as db:
            if self._outbox_count(db) + len(scores) > self.max_outbox:
                raise OutboxFull(
                    f"outbox holds {self._outbox_count(db)} scores (max {self.max_outbox})"
                )
            self._queue(db, scores)
            db.executemany(
                "INSERT INTO trace_scores (trace_id, name, payload, basis) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(trace_id, name) DO UPDATE SET payload = excluded.payload, "
                "basis = excluded.basis",
                [(score.trace_id, score.name, _payload(score), basis) for score in scores],
            )

    def live_scores(self, trace_id: str) -> dict[str, str | None]:
        """The names of the scores a trace has now, with the basis each was made on."""
        with self._lock:
            rows = self._db.execute(
                "SELECT name, basis FROM trace_scores WHERE trace_id = ?", (trace_id,)
            ).fetchall()
        return {str(name): None if basis is None else str(basis) for name, basis in rows}

    def prune_traces(self, root_before: datetime) -> int:
        """Forget fingerprints of traces too old to be polled again."""
        with self._transaction() as db:
            cursor = db.execute("DELETE FROM traces WHERE root_start < ?", (iso(root_before),))
            return cursor.rowcount

    def trace_count(self) -> int:
        with self._lock:
            return self._scalar("SELECT COUNT(*) FROM traces")

    # -- outbox ---------------------------------------------------------------

    def undelivered(self, trace_ids: Collection[str]) -> set[str]:
        """Those of `trace_ids` with scores still in the outbox (not yet delivered)."""
        found: set[str] = set()
        ids = list(trace_ids)
        with self._lock:
            for i in range(0, len(ids), 500):  # under SQLite's bound on variables
                chunk = ids[i : i + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT DISTINCT trace_id FROM outbox WHERE trace_id IN ({marks})", chunk
                )
                found.update(row[0] for row in rows)
        return found

    def outbox_size(self) -> int:
        """Scores queued, by every process writing this file."""
        with self._lock:
            return self._outbox_count(self._db)

    def due(self, now_ts: float, limit: int, max_bytes: int | None = None) -> list[Pending]:
        """Scores due for sending, oldest first: at most `limit` of them and, with
        `max_bytes`, no more than fit in that many bytes of payload (at least one)."""
        rows: list[tuple[bytes, int, str]] = []
        size = 0
        with self._lock:
            cursor = self._db.execute(
                "SELECT payload, attempts, op FROM outbox WHERE next_attempt <= ? "
                "ORDER BY seq LIMIT ?",
                (now_ts, limit),
            )
            for row in cursor:
                size += len(row[0])
                if max_bytes is not None and rows and size > max_bytes:
                    break
                rows.append(row)
            cursor.close()
        return [
            Pending(_score(payload), int(attempts), "delete" if op == "delete" else "upsert")
            for payload, attempts, op in rows
        ]

    def next_due(self) -> float | None:
        """When the earliest queued score is due (unix seconds), or None when empty."""
        with self._lock:
            row = self._db.execute("SELECT MIN(next_attempt) FROM outbox").fetchone()
        return float(row[0]) if row and row[0] is not None else None

    def acknowledge(
        self, scores: Sequence[ScoreEvent], op: Op = "upsert"
    ) -> list[tuple[str, float]]:
        """Langfuse has the scores (or deleted them): remove them from the outbox, unless
        re-queued since with a newer value or another intent.

        Returns (trace id, last activity in unix seconds) of each trace whose scores a
        pass queued are now all acknowledged, these among them: once per trace and
        score set, however many batches carried it (none for deletions and for the
        judge's scores, which carry no activity).
        """
        sent = {score.id: _payload(score) for score in scores}
        ids = list(sent)
        with self._transaction() as db:
            ended: dict[str, float] = {}
            for chunk, marks in _in_chunks(ids):  # a statement or two per chunk
                # What is queued under these ids now; only the rows still holding what was
                # sent go (the others were re-queued since, or acknowledged already).
                gone = [
                    (rowid, trace_id, moment)
                    for rowid, score_id, payload, row_op, trace_id, moment in db.execute(
                        "SELECT rowid, score_id, payload, op, trace_id, activity FROM outbox "
                        f"WHERE score_id IN ({marks})",
                        chunk,
                    )
                    if row_op == op and bytes(payload) == sent[score_id]
                ]
                if not gone:
                    continue
                db.execute(
                    f"DELETE FROM outbox WHERE rowid IN ({','.join('?' * len(gone))})",
                    [rowid for rowid, *_ in gone],
                )
                db.execute(
                    "UPDATE counters SET value = value - ? WHERE name = 'outbox'", (len(gone),)
                )
                for _, trace_id, moment in gone:
                    if moment is not None:
                        ended[trace_id] = max(float(moment), ended.get(trace_id, float(moment)))
            awaiting = self._awaiting(db, list(ended))
        return [(trace, moment) for trace, moment in ended.items() if trace not in awaiting]

    def _awaiting(self, db: sqlite3.Connection, trace_ids: list[str]) -> set[str]:
        """Those of `trace_ids` with scores a pass queued still in the outbox."""
        found: set[str] = set()
        for chunk, marks in _in_chunks(trace_ids):
            found.update(
                str(row[0])
                for row in db.execute(
                    "SELECT DISTINCT trace_id FROM outbox WHERE trace_id IN "
                    f"({marks}) AND activity IS NOT NULL",
                    chunk,
                )
            )
        return found

    def retry_later(self, scores: Sequence[ScoreEvent], at_ts: float, error: str) -> None:
        with self._transaction() as db:
            db.executemany(
                "UPDATE outbox SET attempts = attempts + 1, next_attempt = ?, last_error = ? "
                "WHERE score_id = ?",
                [(at_ts, error[:500], score.id) for score in scores],
            )
