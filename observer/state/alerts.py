"""Alert state in the state file: per rule and group, the trace rules' hourly caps, and
the notification outbox.

A restart neither pages again nor forgets a firing alert: the engine's state
(pending since, firing since, last notified, severity) is saved after every
evaluation and loaded at start, with the point each rule was evaluated up to
(`progress`: a catch-up cut into steps resumes where it stopped). A trace rule
notifies a trace at most once, ever, and at most `max_per_hour` traces an
hour; the rest wait for the digest.

The outbox makes a decision and its notifications one: what an evaluation
decided (a rule's new state, a trace admitted, a digest done) is written in
the same transaction as the notifications it calls for. Each notifier's lane
sends its rows oldest first and deletes a row once the receiver took it, so a
process killed in between sends it after the restart (at least once; the
receivers deduplicate by `dedup_key` / `webhook-id`). At most `max_queued`
rows wait per notifier: past that the oldest are dropped, and counted.

Incidents (docs/alerts.md#incidents) are kept beside the rules' state and written in
the same transaction as the messages that changed them, so a restart neither opens a
second incident for a cause nor forgets one; with them, per notifier and incident, the
receiver's id of the incident's first message there (a Slack thread's `ts`).
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson

from observer.state.db import Database
from observer.state.rows import (
    AlertState,
    Example,
    GroupKey,
    Incident,
    Notification,
    Outgoing,
    Queued,
    Triage,
)

ALERTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS alert_state (
    rule TEXT NOT NULL,
    grp TEXT NOT NULL,
    state BLOB NOT NULL,
    PRIMARY KEY (rule, grp)
);
CREATE TABLE IF NOT EXISTS trace_alerts (
    rule TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (rule, trace_id)
);
CREATE TABLE IF NOT EXISTS alert_progress (
    rule TEXT PRIMARY KEY,
    evaluated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS alert_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    notifier TEXT NOT NULL,
    payload BLOB NOT NULL,
    supersede TEXT,
    queued_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS alert_outbox_notifier ON alert_outbox (notifier, id);
CREATE TABLE IF NOT EXISTS alert_incidents (
    id TEXT PRIMARY KEY,
    open INTEGER NOT NULL,
    at REAL NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS alert_threads (
    notifier TEXT NOT NULL,
    incident TEXT NOT NULL,
    ref TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (notifier, incident)
);
CREATE TABLE IF NOT EXISTS trace_alert_hours (
    rule TEXT NOT NULL,
    hour TEXT NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0,
    suppressed INTEGER NOT NULL DEFAULT 0,
    examples BLOB NOT NULL,
    digested INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (rule, hour)
);
"""

Admission = Literal["notify", "suppressed", "duplicate"]


@dataclass(frozen=True, slots=True)
class Digest:
    rule: str
    hour: str
    suppressed: int
    examples: tuple[Example, ...]


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _group_key(raw: bytes | str) -> GroupKey:
    return tuple((str(k), str(v)) for k, v in orjson.loads(raw))


def _state(raw: bytes) -> AlertState:
    data: dict[str, Any] = orjson.loads(raw)
    known = {f.name for f in dataclasses.fields(AlertState)}
    return AlertState(**{k: v for k, v in data.items() if k in known})


def _examples(raw: bytes) -> tuple[Example, ...]:
    return tuple(Example(**item) for item in orjson.loads(raw))


def _notification(raw: bytes) -> Notification:
    data: dict[str, Any] = orjson.loads(raw)
    known = {f.name for f in dataclasses.fields(Notification)}
    data = {k: v for k, v in data.items() if k in known}
    for key in ("started_at", "sent_at", "ended_at"):
        if data.get(key) is not None:
            data[key] = datetime.fromisoformat(data[key])
    data["group"] = tuple((str(k), str(v)) for k, v in data.get("group", ()))
    data["trace_urls"] = tuple(data.get("trace_urls", ()))
    if data.get("triage") is not None:
        data["triage"] = Triage.stored(data["triage"])
    if data.get("incident") is not None:
        data["incident"] = Incident.stored(data["incident"])
    return Notification(**data)


def _queue(db: sqlite3.Connection, outgoing: Sequence[Outgoing], max_queued: int) -> Counter[str]:
    """Write notifications to the outbox (inside the caller's transaction); the rows dropped
    per notifier to keep at most `max_queued` waiting."""
    for item in outgoing:
        if item.supersede is not None:
            db.execute(
                "DELETE FROM alert_outbox WHERE notifier = ? AND supersede = ?",
                (item.notifier, item.supersede),
            )
        db.execute(
            "INSERT INTO alert_outbox (notifier, payload, supersede, queued_at) "
            "VALUES (?, ?, ?, ?)",
            (
                item.notifier,
                orjson.dumps(item.notification),
                item.supersede,
                item.notification.sent_at.timestamp(),
            ),
        )
    dropped: Counter[str] = Counter()
    for notifier in {item.notifier for item in outgoing}:
        waiting = int(
            db.execute(
                "SELECT COUNT(*) FROM alert_outbox WHERE notifier = ?", (notifier,)
            ).fetchone()[0]
        )
        if waiting > max_queued:
            dropped[notifier] = db.execute(
                "DELETE FROM alert_outbox WHERE id IN (SELECT id FROM alert_outbox "
                "WHERE notifier = ? ORDER BY id LIMIT ?)",
                (notifier, waiting - max_queued),
            ).rowcount
    return dropped


class AlertStore:
    def __init__(self, database: Database) -> None:
        self._file = database

    # -- window rules -----------------------------------------------------------

    def load(self) -> dict[str, dict[GroupKey, AlertState]]:
        with self._file.lock:
            rows = self._file.db.execute("SELECT rule, grp, state FROM alert_state").fetchall()
        states: dict[str, dict[GroupKey, AlertState]] = {}
        for rule, group, state in rows:
            states.setdefault(str(rule), {})[_group_key(group)] = _state(state)
        return states

    def commit(
        self,
        rule: str,
        states: Mapping[GroupKey, AlertState],
        evaluated_at: float,
        outgoing: Sequence[Outgoing] = (),
        max_queued: int = 1000,
        incidents: Sequence[Incident] = (),
    ) -> Counter[str]:
        """One evaluation step of a rule, in one transaction: its whole state (groups not in
        it are forgotten), the point it was evaluated up to, and the notifications it
        decided, with the incidents they changed. The rows dropped per notifier to keep at
        most `max_queued` waiting."""
        with self._file.transaction() as db:
            _save(db, rule, states)
            _save_incidents(db, incidents)
            db.execute(
                "INSERT INTO alert_progress (rule, evaluated_at) VALUES (?, ?) "
                "ON CONFLICT(rule) DO UPDATE SET evaluated_at = excluded.evaluated_at",
                (rule, evaluated_at),
            )
            return _queue(db, outgoing, max_queued)

    def progress(self) -> dict[str, float]:
        """The point each rule was last evaluated at (unix seconds)."""
        with self._file.lock:
            rows = self._file.db.execute("SELECT rule, evaluated_at FROM alert_progress").fetchall()
        return {str(rule): float(at) for rule, at in rows}

    def forget_other_rules(self, keep: set[str]) -> None:
        """Drop the state of rules that are no longer configured."""
        with self._file.transaction() as db:
            for table in ("alert_state", "alert_progress"):
                for (rule,) in db.execute(f"SELECT DISTINCT rule FROM {table}").fetchall():
                    if rule not in keep:
                        db.execute(f"DELETE FROM {table} WHERE rule = ?", (rule,))

    def export(self) -> bytes:
        """Every window rule's state and progress, the incidents and their threads, to hand
        over (a fleet's evaluator: whoever evaluates next continues the same incidents)."""
        with self._file.lock:
            db = self._file.db
            states = db.execute("SELECT rule, grp, state FROM alert_state").fetchall()
            progress = db.execute("SELECT rule, evaluated_at FROM alert_progress").fetchall()
            incidents = db.execute("SELECT id, open, at, data FROM alert_incidents").fetchall()
            threads = db.execute("SELECT notifier, incident, ref, at FROM alert_threads").fetchall()
        return orjson.dumps(
            {
                "states": [[str(r), _text(g), _text(st)] for r, g, st in states],
                "progress": [[str(r), float(at)] for r, at in progress],
                "incidents": [[str(i), int(o), float(at), _text(d)] for i, o, at, d in incidents],
                "threads": [[str(n), str(i), str(ref), float(at)] for n, i, ref, at in threads],
            }
        )

    def restore(self, exported: bytes) -> None:
        """Take over what `export` handed over: this file's window-rule state and incidents
        replaced (an export of an observer before incidents carries none: none are kept)."""
        data = orjson.loads(exported)
        with self._file.transaction() as db:
            for table in ("alert_state", "alert_progress", "alert_incidents", "alert_threads"):
                db.execute(f"DELETE FROM {table}")
            db.executemany(
                "INSERT INTO alert_state (rule, grp, state) VALUES (?, ?, ?)",
                [(r, g.encode(), st.encode()) for r, g, st in data["states"]],
            )
            db.executemany(
                "INSERT INTO alert_progress (rule, evaluated_at) VALUES (?, ?)",
                [(r, at) for r, at in data["progress"]],
            )
            db.executemany(
                "INSERT INTO alert_incidents (id, open, at, data) VALUES (?, ?, ?, ?)",
                [(i, o, at, d.encode()) for i, o, at, d in data.get("incidents", ())],
            )
            db.executemany(
                "INSERT INTO alert_threads (notifier, incident, ref, at) VALUES (?, ?, ?, ?)",
                [tuple(t) for t in data.get("threads", ())],
            )

    # -- incidents ---------------------------------------------------------------

    def incidents(self, since: float | None = None) -> list[Incident]:
        """The open incidents, and (with `since`) those resolved at or after it."""
        with self._file.lock:
            rows = self._file.db.execute(
                "SELECT data FROM alert_incidents WHERE open = 1 OR at >= ? ORDER BY at",
                (math.inf if since is None else since,),
            ).fetchall()
        return [Incident.stored(orjson.loads(raw)) for (raw,) in rows]

    def save_incidents(self, incidents: Sequence[Incident]) -> None:
        """Incidents changed outside a rule's evaluation step."""
        if incidents:
            with self._file.transaction() as db:
                _save_incidents(db, incidents)

    def thread(self, notifier: str, incident: str) -> str | None:
        """The receiver's id of the incident's first message to `notifier`, if one is known."""
        with self._file.lock:
            found = self._file.db.execute(
                "SELECT ref FROM alert_threads WHERE notifier = ? AND incident = ?",
                (notifier, incident),
            ).fetchone()
        return None if found is None else str(found[0])

    def remember_thread(self, notifier: str, incident: str, ref: str, at: float) -> None:
        """The first message of `incident` that reached `notifier` is `ref` there (kept)."""
        with self._file.transaction() as db:
            db.execute(
                "INSERT INTO alert_threads (notifier, incident, ref, at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(notifier, incident) DO NOTHING",
                (notifier, incident, ref, at),
            )

    # -- the notification outbox ------------------------------------------------

    def queue(self, outgoing: Sequence[Outgoing], max_queued: int = 1000) -> Counter[str]:
        """Notifications decided outside an evaluation step (`Delivery.submit`)."""
        if not outgoing:
            return Counter()
        with self._file.transaction() as db:
            return _queue(db, outgoing, max_queued)

    def next_notification(self, notifier: str) -> Queued | None:
        """The oldest notification waiting for `notifier`."""
        with self._file.lock:
            found = self._file.db.execute(
                "SELECT id, payload, attempts FROM alert_outbox WHERE notifier = ? "
                "ORDER BY id LIMIT 1",
                (notifier,),
            ).fetchone()
        if found is None:
            return None
        return Queued(int(found[0]), notifier, _notification(found[1]), int(found[2]))

    def delivered(self, queued_id: int) -> None:
        """The receiver took it (or refused it for good): it leaves the outbox."""
        with self._file.transaction() as db:
            db.execute("DELETE FROM alert_outbox WHERE id = ?", (queued_id,))

    def failed(self, queued_id: int, error: str) -> None:
        """Its retries ran out: it stays, first in line, for the next evaluation."""
        with self._file.transaction() as db:
            db.execute(
                "UPDATE alert_outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                (error[:500], queued_id),
            )

    def waiting(self, notifier: str | None = None) -> int:
        """Notifications in the outbox (for one notifier, or all)."""
        with self._file.lock:
            if notifier is None:
                return self._file.scalar("SELECT COUNT(*) FROM alert_outbox")
            return self._file.scalar(
                "SELECT COUNT(*) FROM alert_outbox WHERE notifier = ?", notifier
            )

    # -- trace rules ------------------------------------------------------------

    def admit(
        self,
        rule: str,
        trace_id: str,
        hour: str,
        at: float,
        example: Example,
        max_per_hour: int,
        outgoing: Sequence[Outgoing] = (),
        max_queued: int = 1000,
    ) -> Admission:
        """Whether to notify this trace now, keep it for the hour's digest, or not at all.
        On "notify", `outgoing` is queued in the same transaction."""
        with self._file.transaction() as db:
            fresh = db.execute(
                "INSERT INTO trace_alerts (rule, trace_id, at) VALUES (?, ?, ?) "
                "ON CONFLICT(rule, trace_id) DO NOTHING",
                (rule, trace_id, at),
            ).rowcount
            if not fresh:
                return "duplicate"
            found = db.execute(
                "SELECT sent, examples FROM trace_alert_hours WHERE rule = ? AND hour = ?",
                (rule, hour),
            ).fetchone()
            sent, examples = (int(found[0]), _examples(found[1])) if found else (0, ())
            if sent < max_per_hour:
                db.execute(
                    "INSERT INTO trace_alert_hours (rule, hour, sent, examples) "
                    "VALUES (?, ?, 1, ?) ON CONFLICT(rule, hour) DO UPDATE SET sent = sent + 1",
                    (rule, hour, b"[]"),
                )
                _queue(db, outgoing, max_queued)
                return "notify"
            kept = [*examples[:4], example]
            # The hour may have no row yet: a fleet member whose fleet notified the hour's
            # worth admits with a cap of 0, before it notified anything itself.
            db.execute(
                "INSERT INTO trace_alert_hours (rule, hour, sent, suppressed, examples) "
                "VALUES (?, ?, 0, 1, ?) ON CONFLICT(rule, hour) DO UPDATE SET "
                "suppressed = suppressed + 1, examples = excluded.examples",
                (rule, hour, orjson.dumps([dataclasses.asdict(e) for e in kept])),
            )
            return "suppressed"

    def raised_in(self, hour: str) -> dict[str, int]:
        """Per trace rule, the traces this state file raised in `hour`, notified or kept
        for the digest (its share of a fleet's hourly count: observer.fleet.alerts)."""
        with self._file.lock:
            rows = self._file.db.execute(
                "SELECT rule, sent + suppressed FROM trace_alert_hours WHERE hour = ? "
                "ORDER BY rule",
                (hour,),
            ).fetchall()
        return {str(rule): int(count) for rule, count in rows if count}

    def raised_since(self, since: float) -> list[tuple[str, str, float]]:
        """The traces a trace rule raised here with their time at or after `since`:
        (rule, trace, at)."""
        with self._file.lock:
            rows = self._file.db.execute(
                "SELECT rule, trace_id, at FROM trace_alerts WHERE at >= ? ORDER BY at",
                (since,),
            ).fetchall()
        return [(str(rule), str(trace_id), float(at)) for rule, trace_id, at in rows]

    def due_digests(self, current_hour: str) -> list[Digest]:
        """Hours before `current_hour` whose suppressed traces were not summed up yet."""
        with self._file.lock:
            rows = self._file.db.execute(
                "SELECT rule, hour, suppressed, examples FROM trace_alert_hours "
                "WHERE hour < ? AND suppressed > 0 AND digested = 0 ORDER BY hour",
                (current_hour,),
            ).fetchall()
        return [Digest(str(r), str(h), int(n), _examples(e)) for r, h, n, e in rows]

    def mark_digested(
        self, digest: Digest, outgoing: Sequence[Outgoing] = (), max_queued: int = 1000
    ) -> None:
        """The digest is done, and its notifications queued, in one transaction."""
        with self._file.transaction() as db:
            db.execute(
                "UPDATE trace_alert_hours SET digested = 1 WHERE rule = ? AND hour = ?",
                (digest.rule, digest.hour),
            )
            _queue(db, outgoing, max_queued)

    def prune(self, before: float, before_hour: str) -> None:
        """Forget trace-rule marks, hours, undelivered notifications, incidents resolved and
        threads older than `before`."""
        with self._file.transaction() as db:
            db.execute("DELETE FROM alert_incidents WHERE open = 0 AND at < ?", (before,))
            db.execute("DELETE FROM alert_threads WHERE at < ?", (before,))
            db.execute("DELETE FROM trace_alerts WHERE at < ?", (before,))
            db.execute("DELETE FROM trace_alert_hours WHERE hour < ?", (before_hour,))
            db.execute("DELETE FROM alert_outbox WHERE queued_at < ?", (before,))


def _save(db: sqlite3.Connection, rule: str, states: Mapping[GroupKey, AlertState]) -> None:
    db.execute("DELETE FROM alert_state WHERE rule = ?", (rule,))
    db.executemany(
        "INSERT INTO alert_state (rule, grp, state) VALUES (?, ?, ?)",
        [
            (rule, orjson.dumps(list(group)), orjson.dumps(dataclasses.asdict(state)))
            for group, state in states.items()
        ],
    )


def _save_incidents(db: sqlite3.Connection, incidents: Sequence[Incident]) -> None:
    """Each incident as it now stands; `at` is when it resolved, else when it opened."""
    db.executemany(
        "INSERT INTO alert_incidents (id, open, at, data) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET open = excluded.open, at = excluded.at, "
        "data = excluded.data",
        [
            (
                incident.id,
                int(incident.open),
                incident.opened_at if incident.resolved_at is None else incident.resolved_at,
                orjson.dumps(incident),
            )
            for incident in incidents
        ],
    )
