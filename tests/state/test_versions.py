"""A state file across versions (docs/operating.md#upgrading): the files observer 0.1.0,
0.2.0 and 0.3.0 really wrote (tests/fixtures/state/make.py ran each release's own demo)
migrated at open with nothing lost; a file of a newer schema refused, untouched.

That the old observers refuse this one's files was seen when the fixtures were made (each
exits 2: "has schema 2; this observer needs 1"); the tests cannot run an old release."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from observer import __version__
from observer.cli import main
from observer.model import ScoreEvent
from observer.state import State, StateError
from observer.state.migrations import SCHEMA_VERSION

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state"
OLD = sorted(FIXTURES.glob("observer-*.sqlite"))


def counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        found = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}
    db.close()
    return found


def meta(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as db:
        found = dict(db.execute("SELECT key, value FROM meta").fetchall())
    db.close()
    return found


def columns(path: Path, table: str) -> set[str]:
    with sqlite3.connect(path) as db:
        found = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    db.close()
    return found


def test_the_fixtures_are_the_three_releases_before_versions_were_recorded() -> None:
    assert [p.name for p in OLD] == [
        "observer-0.1.0.sqlite",
        "observer-0.2.0.sqlite",
        "observer-0.3.0.sqlite",
    ]
    for path in OLD:
        assert meta(path)["schema_version"] == "1" and "written_by" not in meta(path)


@pytest.mark.parametrize("old", OLD, ids=lambda p: p.stem)
def test_a_file_an_older_observer_wrote_is_migrated_with_nothing_lost(
    old: Path, tmp_path: Path
) -> None:
    path = tmp_path / old.name
    shutil.copy(old, path)
    before = counts(path)
    assert before["traces"] > 0 and before["history"] > 0  # a real run's file
    with capture_logs() as logs:
        state = State(path)
    try:
        (migrated,) = [e for e in logs if e["event"] == "state_migrated"]
        assert (migrated["from_schema"], migrated["to_schema"]) == (1, SCHEMA_VERSION)
        rows = state.history.rows(0, 4e9)
        assert len([r for r in rows if r.trace_id]) == before["history"]
    finally:
        state.close()
    after = counts(path)
    # Every row kept; the meta table gains written_by, the counters the outbox's position.
    assert {t: after[t] for t in before if t not in ("meta", "counters")} == {
        t: n for t, n in before.items() if t not in ("meta", "counters")
    }
    assert meta(path)["schema_version"] == str(SCHEMA_VERSION)
    assert meta(path)["written_by"] == __version__
    assert {"op", "activity"} <= columns(path, "outbox")
    assert {"latest"} <= columns(path, "traces") and {"dims"} <= columns(path, "history")
    assert {"findings", "basis"} <= columns(path, "judge_pending")
    # Opened again: nothing left to migrate.
    with capture_logs() as logs:
        State(path).close()
    assert not [e for e in logs if e["event"] == "state_migrated"]
    # And the commands read it as they read their own.
    shown = CliRunner().invoke(main, ["alerts", "status", "--state", str(path)])
    assert shown.exit_code == 0, shown.output


def test_a_new_file_records_its_schema_and_who_wrote_it(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    with capture_logs() as logs:
        State(path).close()
    assert not [e for e in logs if e["event"] == "state_migrated"]
    assert meta(path)["schema_version"] == str(SCHEMA_VERSION)
    assert meta(path)["written_by"] == __version__


def newer(tmp_path: Path) -> Path:
    """A file as a later observer, with a schema this one does not know, would leave it."""
    path = tmp_path / "newer.sqlite"
    State(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                   (str(SCHEMA_VERSION + 1),))  # fmt: skip
        db.execute("UPDATE meta SET value = '9.1.0' WHERE key = 'written_by'")
        db.execute("CREATE TABLE later_feature (x INTEGER)")
    db.close()
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_file_of_a_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = newer(tmp_path)
    kept = digest(path)
    with pytest.raises(StateError) as raised:
        State(path)
    assert str(raised.value) == (
        f"state file {path} was written by observer 9.1.0 (state schema "
        f"{SCHEMA_VERSION + 1}); this is observer {__version__}, which reads schema "
        f"{SCHEMA_VERSION} at most: run observer 9.1.0 or later with it, or give this one "
        "its own state file (--state, state.path). A state file does not go back to an "
        "older observer: keep a copy from before an upgrade to downgrade "
        "(docs/operating.md#upgrading)"
    )
    assert digest(path) == kept


def test_the_commands_exit_2_on_a_newer_file(tmp_path: Path) -> None:
    path = newer(tmp_path)
    shown = CliRunner().invoke(main, ["alerts", "status", "--state", str(path)])
    assert shown.exit_code == 2
    assert "was written by observer 9.1.0" in shown.output


def test_a_schema_3_file_delivers_what_its_outbox_holds_counted_without_triggers(
    tmp_path: Path,
) -> None:
    """Schema 3 counted the outbox with triggers; schema 4 counts in its statements. A
    schema 3 file with scores queued opens with them counted, delivers them, and its
    counts stay true with the triggers gone (they would count every row twice)."""
    path = tmp_path / "three.sqlite"
    state = State(path)
    scores = [
        ScoreEvent(f"t1-{n}", "t1", "g", n, 0.5, "NUMERIC", "c", "2026-11-20T08:30:01Z", None)
        for n in "abc"
    ]
    state.record_trace("t1", "fp", datetime(2026, 11, 20, tzinfo=UTC), scores, datetime.now(UTC))
    state.close()
    with sqlite3.connect(path) as db:  # as schema 3 left it
        db.executescript(
            "CREATE TRIGGER outbox_added AFTER INSERT ON outbox BEGIN UPDATE counters "
            "SET value = value + 1 WHERE name = 'outbox'; END;"
            "CREATE TRIGGER outbox_removed AFTER DELETE ON outbox BEGIN UPDATE counters "
            "SET value = value - 1 WHERE name = 'outbox'; END;"
            "UPDATE meta SET value = '3' WHERE key = 'schema_version';"
        )
    db.close()
    with capture_logs() as logs:
        state = State(path)
    try:
        (migrated,) = [e for e in logs if e["event"] == "state_migrated"]
        assert (migrated["from_schema"], migrated["to_schema"]) == (3, SCHEMA_VERSION)
        assert not state._scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger'")
        assert state.outbox_size() == 3
        due = [p.score for p in state.due(time.time(), 100)]
        assert sorted(s.id for s in due) == ["t1-a", "t1-b", "t1-c"]
        state.acknowledge(due[:2])
        assert state.outbox_size() == 1
        state.enqueue([replace(scores[0], value=0.9)])
        assert state.outbox_size() == 2 == state._scalar("SELECT COUNT(*) FROM outbox")
    finally:
        state.close()
