"""How a state file written by an older observer becomes this one's (docs/operating.md#upgrading).

Every state file says which schema it holds (`schema_version` in its meta table) and
which observer last wrote it (`written_by`). At open, a file of an older schema is
brought to this one by the steps after its version, in one transaction with the
new version; a file of a newer schema is refused, naming the observer that wrote
it: an older observer cannot know what a newer one keeps there, and would lose it.
A schema changes when a release changes what the file holds; a release that does
not keeps the schema, and its state files go back and forth freely.

Schema 1: every observer before 0.4.0. Their files differ by the columns added
since 0.1.0, each then added at open when missing, without a number: step 2 adds
any of them that is still missing.
Schema 2 (0.4.0): those columns everywhere, and `written_by`.
Schema 3: incidents (`alert_incidents`, `alert_threads`: docs/alerts.md#incidents). An
older observer would resolve a correlated alert under its own key, not its incident's,
and leave the incident open at PagerDuty: it refuses the file. An alert that was firing
when the file was migrated becomes an incident of its own when it is next told.
Schema 4: the outbox's size counted by the statements that queue and remove scores, not by
triggers (`outbox_added`, `outbox_removed`: dropped). An older observer writing the file
would leave the size uncounted: it refuses the file.
Schema 5: each history row says when it was last written (`seq`, from one counter per
file, indexed), so the alert evaluator re-reads only the stretches of time whose rows
changed (docs/alerts.md#what-evaluation-costs). An older observer would write rows without
it, and the evaluator would miss them: it refuses the file. Older rows keep NULL.
Schema 6: the history's values kept a second time by column, with their label sets
(`history_values`, `label_sets`: observer.state.values), for the triage's counts; filled
from the history at the migration. An older observer writing the file would leave them
behind the history (a page's triage would miss its rows): it refuses the file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Final

from observer.state.values import fill

SCHEMA_VERSION: Final = 6

# The columns added to files of older versions (table -> column -> its ALTER).
_COLUMNS: Final[Mapping[str, Mapping[str, str]]] = {
    "outbox": {
        # The outbox held upserts only.
        "op": "ALTER TABLE outbox ADD COLUMN op TEXT NOT NULL DEFAULT 'upsert'",
        # The trace's last activity (unix s) with the scores a pass wrote; NULL otherwise.
        "activity": "ALTER TABLE outbox ADD COLUMN activity REAL",
    },
    # The latest start time a trace showed when it was last handled (None: not known).
    "traces": {"latest": "ALTER TABLE traces ADD COLUMN latest TEXT"},
    # A trace row's dimensions (release, model, prompt ...): NULL, none, on older rows.
    "history": {"dims": "ALTER TABLE history ADD COLUMN dims BLOB"},
    # A judge sample's resolver findings (the funnel) and the answer it was taken on.
    "judge_pending": {
        "findings": "ALTER TABLE judge_pending ADD COLUMN findings BLOB",
        "basis": "ALTER TABLE judge_pending ADD COLUMN basis TEXT",
    },
}


def _columns_since_the_first_files(db: sqlite3.Connection) -> None:
    for table, columns in _COLUMNS.items():
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for column, statement in columns.items():
            if column not in present:
                db.execute(statement)


def _incidents(db: sqlite3.Connection) -> None:
    """The incidents and, per notifier, the receiver's id of each one's first message."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS alert_incidents (id TEXT PRIMARY KEY, "
        "open INTEGER NOT NULL, at REAL NOT NULL, data BLOB NOT NULL)"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS alert_threads (notifier TEXT NOT NULL, "
        "incident TEXT NOT NULL, ref TEXT NOT NULL, at REAL NOT NULL, "
        "PRIMARY KEY (notifier, incident))"
    )


def _outbox_counted_by_its_writers(db: sqlite3.Connection) -> None:
    """The triggers that counted the outbox, dropped (a trigger a row cost a third of the
    CPU of queueing a trace's scores); the size is recounted at every open."""
    db.execute("DROP TRIGGER IF EXISTS outbox_added")
    db.execute("DROP TRIGGER IF EXISTS outbox_removed")


def _history_versioned(db: sqlite3.Connection) -> None:
    """Each history row's write counter, and its index (the evaluator's "what changed")."""
    present = {row[1] for row in db.execute("PRAGMA table_info(history)")}
    if "seq" not in present:
        db.execute("ALTER TABLE history ADD COLUMN seq INTEGER")
    db.execute("CREATE INDEX IF NOT EXISTS history_seq ON history (seq)")


def _values_by_column(db: sqlite3.Connection) -> None:
    """The history's values by column and its label sets, filled from the history."""
    fill(db)


# Step N takes a file of schema N-1 to schema N.
STEPS: Final[Mapping[int, Callable[[sqlite3.Connection], None]]] = {
    2: _columns_since_the_first_files,
    3: _incidents,
    4: _outbox_counted_by_its_writers,
    5: _history_versioned,
    6: _values_by_column,
}
