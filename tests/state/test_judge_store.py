"""The judge's samples in the state file, including files written before the funnel."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson

from observer.resolver import ResolverFindings
from observer.state import State
from observer.state.judge import reserve_in


def reserve(
    state: State, trace_id: str, tokens: int, queued_at: str, findings: bytes | None = None
) -> None:
    """Queue a sample as the judge does: `reserve_in` in a write of the store's own."""
    state.judge.write(
        lambda db: reserve_in(db, trace_id, b"{}", "h", "d", tokens, queued_at, findings, None)
    )


def test_findings_travel_with_a_sample(tmp_path: Path) -> None:
    found = ResolverFindings(("kb-1",), ("kb-2",), 1, 3)
    state = State(tmp_path / "s.sqlite")
    try:
        reserve(state, "t1", 10, "2026-12-01T00:00:00Z", orjson.dumps(found))
        reserve(state, "t2", 10, "2026-12-01T00:00:01Z")
        first, second = state.judge.pending()
    finally:
        state.close()
    assert first.findings is not None
    assert ResolverFindings.from_obj(orjson.loads(first.findings)) == found
    assert second.findings is None


def test_a_state_file_from_before_the_funnel_opens_and_keeps_its_samples(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    State(path).close()
    db = sqlite3.connect(path)
    db.executescript(
        "DROP TABLE judge_pending; CREATE TABLE judge_pending (trace_id TEXT PRIMARY KEY, "
        "record BLOB NOT NULL, day TEXT NOT NULL, reserved INTEGER NOT NULL, "
        "queued_at TEXT NOT NULL);"
        "INSERT INTO judge_pending VALUES ('old', x'7b7d', 'd', 5, '2026-11-30T00:00:00Z');"
        "UPDATE meta SET value = '1' WHERE key = 'schema_version';"  # as observer < 0.4 wrote
    )
    db.close()
    state = State(path)
    try:
        (sample,) = state.judge.pending()
        assert (sample.trace_id, sample.reserved, sample.findings) == ("old", 5, None)
        reserve(state, "new", 1, "2026-12-01T00:00:00Z", b'{"missing":[]}')
        assert [s.findings for s in state.judge.pending()] == [None, b'{"missing":[]}']
    finally:
        state.close()
