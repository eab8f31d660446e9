"""The SQLite file under every store: one connection, one lock, transactions, meta.

Thread-safe: one connection guarded by a lock (the poll job, the dispatcher,
the judge workers and the alert evaluation share it). WAL mode keeps writers
from blocking readers.

Guarded (issue 43): `hold()` takes an exclusive lock on the file for the
process's life (`flock`, beside SQLite's own locks), so a second daemon on the
same file stops at start naming the first (its pid, host and start, kept in
`meta`); `check_identity()` says when the path no longer leads to the file this
process opened (deleted, or replaced: its inode changed), which a pass checks
before it reads; `integrity()` is SQLite's integrity check; `checkpoint()`
truncates the WAL once space returns after a full disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import structlog

from observer import __version__
from observer.state.migrations import SCHEMA_VERSION, STEPS
from observer.times import iso

log = structlog.get_logger("observer.state")

# The tables a schema creates (CREATE TABLE IF NOT EXISTS name ...).
_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+)", re.IGNORECASE)


class StateError(Exception):
    """The state file cannot be opened, read or written; the message says which and why."""


class StateGone(StateError):
    """The state file this process opened is no longer at its path (deleted, replaced)."""


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
            self._refuse_a_newer_schema()
            self.db.executescript(schema)
            self._migrate()
            # Prove it is writable now, not at the first scored trace; and say who wrote it.
            self.set_meta("opened_at", iso(datetime.now().astimezone()))
            self.set_meta("written_by", __version__)
            self.identity = _identity(self.path)
            self._held: int | None = None  # the fd of hold()'s lock
        except sqlite3.Error as error:
            raise StateError(f"state file {self.path} is not usable: {error}") from None
        except OSError as error:
            raise StateError(
                f"state file {self.path} cannot be created: {error.strerror}"
            ) from None

    def _schema(self) -> int | None:
        """The file's schema version; None for a new file (no meta table or no version)."""
        try:
            value = self.get_meta("schema_version")
        except sqlite3.OperationalError:  # no meta table: a new file
            return None
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise StateError(
                f"state file {self.path} has an unreadable schema_version {value!r}"
            ) from None

    def _refuse_a_newer_schema(self) -> None:
        """StateError, before anything is written, for a file of a newer observer's schema."""
        found = self._schema()
        if found is None or found <= SCHEMA_VERSION:
            return
        writer = self.get_meta("written_by")
        who = f"observer {writer}" if writer else "a newer observer"
        raise StateError(
            f"state file {self.path} was written by {who} (state schema {found}); this is "
            f"observer {__version__}, which reads schema {SCHEMA_VERSION} at most: run "
            f"{who} or later with it, or give this one its own state file (--state, "
            "state.path). A state file does not go back to an older observer: keep a copy "
            "from before an upgrade to downgrade (docs/operating.md#upgrading)"
        )

    def _migrate(self) -> None:
        """A file of an older schema brought to this one, in one transaction. A new file
        holds schema 1's tables (the CREATE statements) and takes the same steps: one way
        to every column, whatever the file's age."""
        found = self._schema()
        if found == SCHEMA_VERSION:
            return
        writer = self.get_meta("written_by") or "before 0.4.0"
        with self.transaction() as db:
            for step in range((found or 1) + 1, SCHEMA_VERSION + 1):
                STEPS[step](db)
            self.set_meta("schema_version", str(SCHEMA_VERSION))
        if found is None:
            return
        # A warning: from now on an older observer refuses the file (keep a copy to go back).
        log.warning(
            "state_migrated",
            path=str(self.path),
            from_schema=found,
            to_schema=SCHEMA_VERSION,
            written_by=writer,
            version=__version__,
        )

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

    def hold(self) -> None:
        """The file, exclusively, for this process's life; StateError naming the process
        that holds it already."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = self.get_meta("held_by") or "another process"
            raise StateError(
                f"state file {self.path} is in use by {holder}: two daemons on one state "
                "file would score and page everything twice. Stop that one, or give this "
                "one its own state file (--state, state.path)"
            ) from None
        self._held = fd
        who = f"observer pid {os.getpid()} on {socket.gethostname()}"
        self.set_meta("held_by", f"{who} since {iso(datetime.now().astimezone())}")

    def check_identity(self) -> None:
        """StateError when the path no longer leads to the file this process opened."""
        try:
            now = _identity(self.path)
        except FileNotFoundError:
            raise StateGone(
                f"state file {self.path} was deleted while observer ran: what it holds lives "
                "on only in this process and is lost at exit. Polling stopped; restore the "
                "file (or restart observer to begin a new one)"
            ) from None
        if now != self.identity:
            raise StateGone(
                f"state file {self.path} was replaced while observer ran (another file is at "
                "its path now): polling stopped; restart observer to use the new file"
            )

    def integrity(self, limit: int = 10) -> list[str]:
        """SQLite's integrity check: [] when the file is sound, else its first problems."""
        with self.lock:
            rows = self.db.execute(f"PRAGMA integrity_check({int(limit)})").fetchall()
        found = [str(row[0]) for row in rows]
        return [] if found == ["ok"] else found

    def checkpoint(self) -> None:
        """The WAL written into the file and truncated: the space it took given back."""
        with self.lock:
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self.lock:
            self.db.close()
        self.let_go()

    def let_go(self) -> None:
        """hold()'s lock given up, the connection left open (for a thread abandoned at
        the stop: SQLite's own locks keep its last write whole)."""
        if self._held is not None:
            os.close(self._held)  # the lock goes with it
            self._held = None


def _identity(path: Path) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino
