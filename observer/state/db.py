"""The SQLite file under every store: one connection, one lock, transactions, meta.

Thread-safe: one connection guarded by a lock (the poll job, the dispatcher,
the judge workers and the alert evaluation share it). WAL mode keeps writers
from blocking readers.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from observer.times import iso

SCHEMA_VERSION = 1

# The tables a schema creates (CREATE TABLE IF NOT EXISTS name ...).
_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+)", re.IGNORECASE)


class StateError(Exception):
    """The state file cannot be opened, read or written; the message says which and why."""


class Database:
    def __init__(self, path: str | Path, schema: str) -> None:
        self.path = Path(path)
        self.lock = threading.Lock()
        try:
            if self.path.parent and not self.path.parent.exists():
                raise StateError(
                    f"state file {self.path}: directory {self.path.parent} does not exist"
                )
            if not self.path.exists():
                # Created private: it holds trace ids and scores (SQLite gives its -wal and
                # -shm files the same mode).
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            self.db = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=10
            )
            self._refuse_a_stranger(schema)  # before anything is written to it
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(schema)
            version = self.get_meta("schema_version")
            if version is None:
                self.set_meta("schema_version", str(SCHEMA_VERSION))
            elif version != str(SCHEMA_VERSION):
                raise StateError(
                    f"state file {self.path} has schema {version}; "
                    f"this observer needs {SCHEMA_VERSION}"
                )
            # Prove it is writable now, not at the first scored trace.
            self.set_meta("opened_at", iso(datetime.now().astimezone()))
        except sqlite3.Error as error:
            raise StateError(f"state file {self.path} is not usable: {error}") from None
        except OSError as error:
            raise StateError(
                f"state file {self.path} cannot be created: {error.strerror}"
            ) from None

    def _refuse_a_stranger(self, schema: str) -> None:
        """StateError when the file is another application's database: it holds a table
        observer does not create, and no `schema_version` in a `meta` table. An empty
        file, or one holding only observer's tables (a first open cut short), is fine."""
        tables = {
            str(row[0])
            for row in self.db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        strangers = sorted(tables - set(_TABLE.findall(schema)))
        if not strangers:
            return
        if "meta" in tables:
            row = self.db.execute("SELECT 1 FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None:
                return
        shown = ", ".join(strangers[:5]) + (
            f" and {len(strangers) - 5} more" if len(strangers) > 5 else ""
        )
        raise StateError(
            f"state file {self.path} is not observer's: it holds other tables ({shown}) "
            "and no observer schema_version; observer adds its tables to no other "
            "database: give it a new path (--state, state.path) or its own state file"
        )

    def scalar(self, sql: str, *args: object) -> int:
        row = self.db.execute(sql, args).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def get_meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; a full disk or a read-only file is a StateError."""
        with self.lock:
            try:
                self.db.execute("BEGIN IMMEDIATE")
                yield self.db
                self.db.execute("COMMIT")
            except BaseException as error:
                with contextlib.suppress(sqlite3.Error):  # nothing to roll back, or cannot
                    self.db.execute("ROLLBACK")
                if isinstance(error, sqlite3.OperationalError | sqlite3.DatabaseError):
                    raise StateError(f"state file {self.path} cannot be written: {error}") from None
                raise

    def close(self) -> None:
        with self.lock:
            self.db.close()
