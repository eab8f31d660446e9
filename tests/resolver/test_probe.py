"""What `observer check` makes of a sample of recently cited chunks. Pure."""

from __future__ import annotations

import pytest

from observer.resolver import CitedChunk, CitedChunks, StoredChunk
from observer.resolver.core import sha256_hex
from observer.resolver.probe import sample_ids, sample_report
from observer.resolver.store import Fields


def cited(trace: str, *ids: str) -> CitedChunks:
    return CitedChunks(trace, tuple(CitedChunk(i, (1,), sha256_hex(i)) for i in ids), ())


CITED = [cited("t1", "a1", "a2", "a3"), cited("t2", "b1"), cited("t3", "c1", "a1", "c2")]


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (3, ["a1", "b1", "c1"]),  # one per trace first
        (5, ["a1", "b1", "c1", "a2", "a3"]),  # a1 cited twice is asked once
        (50, ["a1", "b1", "c1", "a2", "a3", "c2"]),
        (0, []),
    ],
)
def test_sample_ids_spread_over_traces(limit: int, expected: list[str]) -> None:
    assert sample_ids(CITED, limit) == expected


FIELDS = Fields()
FRESH = {i: StoredChunk(text=i, doc_id="d") for i in ("a1", "b1", "c1", "a2")}


@pytest.mark.parametrize(
    ("stored", "problem", "described"),
    [
        (
            FRESH | {"a3": StoredChunk(text="re-written")},
            None,
            "5 recently cited chunks looked up: 5 found (text_hash 0, text 5, doc_id 4, "
            "updated_at 0), 0 missing, 1 stale",
        ),
        ({}, "none of 5 recently cited chunk ids is in the store: is id_field 'chunk_id'", ""),
        (
            {i: StoredChunk(doc_id="d") for i in FRESH},
            "the 4 chunks found have no 'text_hash' or 'text'",
            "",
        ),
        (
            {"a1": StoredChunk(text_hash=sha256_hex("a1"))},
            None,
            "5 recently cited chunks looked up: 1 found (text_hash 1, text 0, doc_id 0, "
            "updated_at 0), 4 missing, 0 stale",
        ),
    ],
    ids=["healthy", "wrong_id_field", "no_hash_no_text", "mostly_missing"],
)
def test_sample_report(stored: dict[str, StoredChunk], problem: str | None, described: str) -> None:
    ids = sample_ids(CITED, 5)
    report = sample_report(CITED, ids, stored, FIELDS)
    if problem is None:
        assert report.problem is None
        assert report.describe() == described
    else:
        assert report.problem is not None and report.problem.startswith(problem)


def test_an_empty_sample_is_no_problem() -> None:
    report = sample_report([], [], {}, FIELDS)
    assert report.problem is None
    assert report.describe() == "no recently cited chunk ids to look up"


def test_fields_not_configured_are_not_reported() -> None:
    fields = Fields(hash_field="", updated_field="")
    report = sample_report(CITED, ["a1"], {"a1": StoredChunk(text="a1")}, fields)
    assert report.describe() == (
        "1 recently cited chunk looked up: 1 found (text 1, doc_id 0), 0 missing, 0 stale"
    )
    assert sample_report(CITED, ["a1"], {"a1": StoredChunk()}, fields).problem == (
        "the chunk found has no 'text': every citation would be unverifiable "
        "(set hash_field or text_field)"
    )
