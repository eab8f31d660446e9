"""The SQLite state: outbox semantics and clear errors."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from observer.model import ScoreEvent
from observer.state import OutboxFull, State, StateError, TraceWrite
from observer.state.rows import Row
from tests.budget import scaled

NOW = datetime(2026, 11, 20, 8, 30, tzinfo=UTC)


def score(name: str, value: float = 0.5, trace: str = "t1") -> ScoreEvent:
    return ScoreEvent(
        id=f"{trace}-{name}",
        trace_id=trace,
        observation_id="g",
        name=name,
        value=value,
        data_type="NUMERIC",
        comment="c",
        timestamp="2026-11-20T08:30:01.100Z",
        environment="production",
    )


def test_watermark_and_fingerprints_survive_reopening(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    state.set_watermark(NOW)
    state.record_trace("t1", "fp", NOW, [score("a"), score("b")], NOW)
    state.close()
    again = State(tmp_path / "s.sqlite")
    assert again.watermark() == NOW
    assert again.fingerprint("t1") == "fp"
    assert [p.score for p in again.due(0, 10)] == [score("a"), score("b")]


def test_requeued_score_is_not_lost_by_an_older_acknowledgement(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    state.record_trace("t1", "fp1", NOW, [score("a", 0.1)], NOW)
    sent = [p.score for p in state.due(0, 10)]
    state.record_trace("t1", "fp2", NOW, [score("a", 0.9)], NOW)  # changed while in flight
    state.acknowledge(sent)
    assert [p.score.value for p in state.due(0, 10)] == [0.9]


def test_the_last_acknowledged_score_of_a_trace_tells_its_activity_once(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    active = NOW - timedelta(seconds=42)
    state.record_trace("t1", "fp", NOW, [score("a"), score("b")], NOW, activity=active)
    state.record_trace("t2", "fp", NOW, [score("a", trace="t2")], NOW)  # no activity known
    first, second = (p.score for p in state.due(0, 10) if p.score.trace_id == "t1")
    assert state.acknowledge([first]) == []  # t1's b is still queued
    assert state.acknowledge([second, score("a", trace="t2")]) == [("t1", active.timestamp())]
    assert state.acknowledge([second]) == []  # already acknowledged: not told again
    state.close()


def test_a_rescore_in_flight_keeps_the_trace_open_until_its_new_scores_land(
    tmp_path: Path,
) -> None:
    state = State(tmp_path / "s.sqlite")
    state.record_trace("t1", "fp1", NOW, [score("a", 0.1)], NOW, activity=NOW)
    sent = [p.score for p in state.due(0, 10)]
    later = NOW + timedelta(seconds=60)
    state.record_trace("t1", "fp2", NOW, [score("a", 0.9)], later, activity=later)
    assert state.acknowledge(sent) == []  # the old value: the new one still waits
    assert state.acknowledge([score("a", 0.9)]) == [("t1", later.timestamp())]
    state.close()


def test_an_outbox_of_an_older_version_gets_the_activity_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    state = State(path)
    state.record_trace("t1", "fp", NOW, [score("a")], NOW, activity=NOW)
    state.close()
    with sqlite3.connect(path) as db:
        db.execute("DROP INDEX outbox_trace")
        db.execute("ALTER TABLE outbox DROP COLUMN activity")
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")  # observer < 0.4
    again = State(path)
    assert [p.score for p in again.due(0, 10)] == [score("a")]
    assert again.acknowledge([score("a")]) == []  # queued before: no activity known
    again.record_trace("t1", "fp2", NOW, [score("a", 0.7)], NOW, activity=NOW)
    assert again.acknowledge([score("a", 0.7)]) == [("t1", NOW.timestamp())]
    again.close()


def test_retry_later_hides_scores_until_due(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    state.record_trace("t1", "fp", NOW, [score("a")], NOW)
    state.retry_later([score("a")], 100.0, "boom")
    assert state.due(50.0, 10) == []
    assert [p.attempts for p in state.due(100.0, 10)] == [1]
    assert state.next_due() == 100.0


def test_full_outbox_refuses_the_trace_whole(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite", max_outbox=2)
    state.record_trace("t1", "fp", NOW, [score("a")], NOW)
    with pytest.raises(OutboxFull):
        state.record_trace("t2", "fp", NOW, [score("a", trace="t2"), score("b", trace="t2")], NOW)
    assert state.fingerprint("t2") is None  # seen again next pass, not lost
    assert state.outbox_size() == 1


def test_prune_forgets_only_old_traces(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    state.record_trace("old", "fp", datetime(2026, 1, 1, tzinfo=UTC), [], NOW)
    state.record_trace("new", "fp", NOW, [], NOW)
    assert state.prune_traces(datetime(2026, 6, 1, tzinfo=UTC)) == 1
    assert state.fingerprints(["old", "new"]) == {"new": "fp"}


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="does not exist"):
        State(tmp_path / "nope" / "s.sqlite")


def test_a_database_with_other_tables_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("CREATE TABLE orders (id INTEGER)")
    db.close()
    with pytest.raises(StateError, match=r"not observer's: it holds other tables \(orders\)"):
        State(path)


def test_observers_own_tables_without_a_version_open(tmp_path: Path) -> None:
    """A first open cut short between creating the tables and writing the version."""
    path = tmp_path / "s.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE traces (trace_id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL,"
            " root_start TEXT NOT NULL, seen_at TEXT NOT NULL)"
        )
    db.close()
    State(path).close()


def test_a_state_file_with_a_table_this_version_does_not_know_opens(tmp_path: Path) -> None:
    """observer's own file (its schema_version says so), with a table added by another version."""
    path = tmp_path / "s.sqlite"
    State(path).close()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE later_feature (x INTEGER)")
    db.close()
    State(path).close()


def test_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateError, match="not usable"):
        State(path)


def test_read_only_file_is_a_clear_error(tmp_path: Path) -> None:
    """A read-only file (or, for root, who writes read-only files, a read-only mount)."""
    import subprocess

    path = tmp_path / "s.sqlite"
    State(path).close()
    if os.geteuid() != 0:
        path.chmod(0o444)
        with pytest.raises(StateError):
            State(path)
        return
    mount = tmp_path / "ro"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (mount / "s.sqlite").write_bytes(path.read_bytes())
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        with pytest.raises(StateError, match=r"s\.sqlite"):
            State(mount / "s.sqlite")
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_outbox_size_is_kept_not_recounted(tmp_path: Path) -> None:
    """During an outage every pass writes to the outbox: no full count per write."""
    state = State(tmp_path / "s.sqlite")
    statements: list[str] = []
    state._db.set_trace_callback(statements.append)
    state.record_trace("t1", "fp", NOW, [score("a"), score("b")], NOW)
    state.enqueue([score("c")])
    state.acknowledge([score("a")])
    state._db.set_trace_callback(None)
    assert not [s for s in statements if s.strip().upper() == "SELECT COUNT(*) FROM OUTBOX"]
    assert state.outbox_size() == 2
    state.close()


# A fifth of the profile's examples: each is a new state file and up to 25 writes.
@settings(scaled(0.2))
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["record", "enqueue", "ack"]),
            st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4),
            st.floats(0, 1),
        ),
        max_size=25,
    )
)
def test_outbox_size_always_matches_the_rows(
    operations: list[tuple[str, list[str], float]],
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        state = State(Path(scratch) / "s.sqlite")
        for kind, names, value in operations:
            scores = [score(n, value) for n in names]
            if kind == "record":
                state.record_trace("t1", f"fp{value}", NOW, scores, NOW)
            elif kind == "enqueue":
                state.enqueue(scores)
            else:
                state.acknowledge(scores)
            assert state.outbox_size() == state._scalar("SELECT COUNT(*) FROM outbox")
        state.close()


def test_a_new_state_file_is_private(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    state.record_trace("t1", "fp", NOW, [score("a")], NOW)
    assert (tmp_path / "s.sqlite").stat().st_mode & 0o777 == 0o600
    wal = tmp_path / "s.sqlite-wal"
    assert not wal.exists() or wal.stat().st_mode & 0o077 == 0
    state.close()


@pytest.mark.parametrize(
    ("max_bytes", "taken"),
    [(None, 5), (10**6, 5), (3, 3), (1, 1), (0, 1)],  # in scores' payloads; at least one
)
def test_due_takes_as_many_scores_as_fit_in_a_byte_budget(
    tmp_path: Path, max_bytes: int | None, taken: int
) -> None:
    state = State(tmp_path / "s.sqlite")
    scores = [score(name) for name in "abcde"]
    state.record_trace("t1", "fp", NOW, scores, NOW)
    each = _payload_size(state)  # max_bytes counts scores here, 10**6 is bytes
    budget = max_bytes if max_bytes is None or max_bytes >= 10**6 else max_bytes * each
    due = state.due(0, 10, budget)
    assert [p.score for p in due] == scores[:taken]
    assert [p.score for p in state.due(0, 2, budget)] == scores[: min(2, taken)]


def _payload_size(state: State) -> int:
    """One demo score's payload in the outbox (they are all the same length here)."""
    row = state._db.execute("SELECT length(payload) FROM outbox LIMIT 1").fetchone()
    return int(row[0])


# -- many traces in one transaction (the event path's settling step) -----------------------


def trace_write(trace: str, names: str, **kw: object) -> TraceWrite:
    row = Row(100.0, {"confidence": 0.5}, trace, None, "production", "howto")
    return TraceWrite(trace, f"fp-{trace}", NOW, [score(n, trace=trace) for n in names], NOW,
                      row, **kw)  # type: ignore[arg-type]  # fmt: skip


def written(state: State) -> tuple[set[str], list[str], list[str | None]]:
    """(traces with a fingerprint, trace of each queued score in queue order, history rows)."""
    fingerprints = set(state.fingerprints(["t1", "t2", "t3", "t4"]))
    queued = [p.score.trace_id for p in state.due(0, 100)]
    rows = [r.trace_id for r in state.history.rows(0, 1e10)]
    return fingerprints, queued, rows


def test_many_traces_are_recorded_with_one_commit_in_their_order(tmp_path: Path) -> None:
    told: list[str | None] = []
    state = State(tmp_path / "s.sqlite", on_row=lambda row: told.append(row.trace_id))
    state.record_trace("t1", "fp", NOW, [score("a")], NOW)
    statements: list[str] = []
    state._db.set_trace_callback(statements.append)
    results = state.record_traces([trace_write("t2", "ab"), trace_write("t3", "a")])
    state._db.set_trace_callback(None)
    assert results == [0, 0]
    assert [s for s in statements if s.strip().upper() == "COMMIT"] == ["COMMIT"]
    assert not [s for s in statements if "MAX(seq)" in s]  # no scan of the outbox to queue
    assert written(state) == ({"t1", "t2", "t3"}, ["t1", "t2", "t2", "t3"], ["t2", "t3"])
    assert told == ["t2", "t3"]
    state.close()
    again = State(tmp_path / "s.sqlite")  # the queue goes on where it was after a restart
    again.record_trace("t4", "fp", NOW, [score("a", trace="t4")], NOW)
    assert [p.score.trace_id for p in again.due(0, 100)] == ["t1", "t2", "t2", "t3", "t4"]
    again.close()


def test_a_trace_failing_in_a_batch_writes_nothing_of_its_own_and_the_others_are_written(
    tmp_path: Path,
) -> None:
    told: list[str | None] = []
    state = State(tmp_path / "s.sqlite", max_outbox=4, on_row=lambda r: told.append(r.trace_id))

    def broken(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO meta (key, value) VALUES ('half', 'written')")
        raise ValueError("a reservation that cannot be written")

    results = state.record_traces(
        [
            trace_write("t1", "ab"),
            trace_write("t2", "ab", during=broken),  # its scores and fingerprint rolled back
            trace_write("t3", "abc"),  # 2 + 3 > 4: no room
            trace_write("t4", "a"),  # 2 + 1: fits
        ]
    )
    assert results[0] == 0 and results[3] == 0
    assert isinstance(results[1], ValueError) and isinstance(results[2], OutboxFull)
    assert written(state) == ({"t1", "t4"}, ["t1", "t1", "t4"], ["t1", "t4"])
    assert told == ["t1", "t4"]
    assert state.noted("half") is None and state._file.get_meta("half") is None
    assert state.outbox_size() == 3
    state.close()


def test_the_file_failing_mid_batch_writes_none_of_it_and_the_retry_doubles_nothing(
    tmp_path: Path,
) -> None:
    """A write the file refuses (here a trigger's abort on the third trace, as a full disk
    refuses one) rolls the whole batch back: no score, fingerprint or history row of any
    of its traces; written again, each trace is there once."""
    told: list[str | None] = []
    state = State(tmp_path / "s.sqlite", on_row=lambda row: told.append(row.trace_id))
    with sqlite3.connect(tmp_path / "s.sqlite") as other:
        other.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON traces WHEN NEW.trace_id = 't3' "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    other.close()
    writes = [trace_write(t, "ab") for t in ("t1", "t2", "t3", "t4")]
    with pytest.raises(StateError, match="refused"):
        state.record_traces(writes)
    assert written(state) == (set(), [], [])
    assert told == [] and state.outbox_size() == 0
    with sqlite3.connect(tmp_path / "s.sqlite") as other:
        other.execute("DROP TRIGGER refuse")
    other.close()
    assert state.record_traces(writes) == [0, 0, 0, 0]
    state.record_traces(writes)  # and once more, as a retry after a crash would
    fingerprints, queued, rows = written(state)
    assert fingerprints == {"t1", "t2", "t3", "t4"}
    assert sorted(queued) == ["t1", "t1", "t2", "t2", "t3", "t3", "t4", "t4"]
    assert sorted(rows) == ["t1", "t2", "t3", "t4"]  # type: ignore[type-var]
    assert state.outbox_size() == 8
    state.close()
