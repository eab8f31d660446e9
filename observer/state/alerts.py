"""Alert state in the state file: per rule and group, and the trace rules' hourly caps.

A restart neither pages again nor forgets a firing alert: the engine's state
(pending since, firing since, last notified, severity) is saved after every
evaluation and loaded at start. A trace rule notifies a trace at most once,
ever, and at most `max_per_hour` traces an hour; the rest wait for the digest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from observer.alerts.engine import AlertState, Example, GroupKey
from observer.state.db import Database

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


def _group_key(raw: bytes | str) -> GroupKey:
    return tuple((str(k), str(v)) for k, v in orjson.loads(raw))


def _state(raw: bytes) -> AlertState:
    data: dict[str, Any] = orjson.loads(raw)
    known = {f.name for f in dataclasses.fields(AlertState)}
    return AlertState(**{k: v for k, v in data.items() if k in known})


def _examples(raw: bytes) -> tuple[Example, ...]:
    return tuple(Example(**item) for item in orjson.loads(raw))


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

    def save(self, rule: str, states: Mapping[GroupKey, AlertState]) -> None:
        """The rule's whole state after an evaluation (groups not in it are forgotten)."""
        with self._file.transaction() as db:
            db.execute("DELETE FROM alert_state WHERE rule = ?", (rule,))
            db.executemany(
                "INSERT INTO alert_state (rule, grp, state) VALUES (?, ?, ?)",
                [
                    (rule, orjson.dumps(list(group)), orjson.dumps(dataclasses.asdict(state)))
                    for group, state in states.items()
                ],
            )

    def forget_other_rules(self, keep: set[str]) -> None:
        """Drop the state of rules that are no longer configured."""
        with self._file.transaction() as db:
            for (rule,) in db.execute("SELECT DISTINCT rule FROM alert_state").fetchall():
                if rule not in keep:
                    db.execute("DELETE FROM alert_state WHERE rule = ?", (rule,))

    # -- trace rules ------------------------------------------------------------

    def admit(
        self, rule: str, trace_id: str, hour: str, at: float, example: Example, max_per_hour: int
    ) -> Admission:
        """Whether to notify this trace now, keep it for the hour's digest, or not at all."""
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
                return "notify"
            kept = [*examples[:4], example]
            db.execute(
                "UPDATE trace_alert_hours SET suppressed = suppressed + 1, examples = ? "
                "WHERE rule = ? AND hour = ?",
                (orjson.dumps([dataclasses.asdict(e) for e in kept]), rule, hour),
            )
            return "suppressed"

    def due_digests(self, current_hour: str) -> list[Digest]:
        """Hours before `current_hour` whose suppressed traces were not summed up yet."""
        with self._file.lock:
            rows = self._file.db.execute(
                "SELECT rule, hour, suppressed, examples FROM trace_alert_hours "
                "WHERE hour < ? AND suppressed > 0 AND digested = 0 ORDER BY hour",
                (current_hour,),
            ).fetchall()
        return [Digest(str(r), str(h), int(n), _examples(e)) for r, h, n, e in rows]

    def mark_digested(self, digest: Digest) -> None:
        with self._file.transaction() as db:
            db.execute(
                "UPDATE trace_alert_hours SET digested = 1 WHERE rule = ? AND hour = ?",
                (digest.rule, digest.hour),
            )

    def prune(self, before: float, before_hour: str) -> None:
        with self._file.transaction() as db:
            db.execute("DELETE FROM trace_alerts WHERE at < ?", (before,))
            db.execute("DELETE FROM trace_alert_hours WHERE hour < ?", (before_hour,))
