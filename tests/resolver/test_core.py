"""The resolver's pure core: cited chunks, hash rules, findings and scores."""

from __future__ import annotations

import hashlib

import pytest

from observer.model import RagRecord, Source
from observer.resolver import (
    RESOLVER_SCORE_NAMES,
    CitedChunks,
    ResolverFindings,
    StoredChunk,
    answer_hash,
    cited_chunks,
    findings,
    resolver_score_events,
)
from observer.resolver.core import normalise_hash
from observer.scores import score_id
from observer.signals import SignalParams, compute


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def record(answer: str, *sources: Source) -> RagRecord:
    return RagRecord(
        trace_id="tr-1",
        question="q",
        answer=answer,
        sources=sources,
        observation_id="gen-1",
        timestamp="2026-11-20T08:30:01.100Z",
        environment="production",
    )


def cited(rec: RagRecord) -> CitedChunks:
    return cited_chunks(rec, compute(rec, SignalParams()))


# ---- which chunks an answer cites -----------------------------------------------------------


def test_cited_chunks_are_the_valid_refs_of_cited_sentences() -> None:
    rec = record(
        "Refunds take five days [1][2]. Fees are waived for members [2]. Yes [3]. "
        "Shipping is free worldwide [4][9]. Hope this helps [5].",
        Source(text="refunds", chunk_id="c1"),
        Source(text="fees", chunk_id="c2", text_hash="AB"),
        Source(text="yes", chunk_id="c3"),  # cited only by a non-substantive sentence
        Source(text="shipping", chunk_id=None),  # cited, but no chunk id
        Source(text="pleasantry", chunk_id="c5"),  # cited only by a pleasantry
    )
    got = cited(rec)
    assert got.trace_id == "tr-1"
    assert got.chunk_ids == ("c1", "c2")
    assert got.chunks[0].numbers == (1,)
    assert got.chunks[0].answer_hash == sha("refunds")
    assert got.chunks[1].answer_hash == "ab"  # the logged hash wins, normalised
    assert got.without_id == (4,)


def test_a_chunk_cited_through_two_sources_is_looked_up_once() -> None:
    rec = record(
        "First fact stated here [1]. Second fact stated here [2].",
        Source(text="", chunk_id="c1"),  # no text, no hash: the next source's hash is used
        Source(text="same chunk", chunk_id="c1"),
    )
    got = cited(rec)
    assert len(got.chunks) == 1
    assert got.chunks[0].numbers == (1, 2)
    assert got.chunks[0].answer_hash == sha("same chunk")


def test_nothing_cited_nothing_to_look_up() -> None:
    got = cited(record("Nothing is cited in this answer.", Source(text="x", chunk_id="c1")))
    assert got.chunks == ()
    assert got.without_id == ()


# ---- the hash rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text_hash", "text", "expected"),
    [
        ("ABCDEF", "ignored", "abcdef"),  # the logged hash first, lower-cased
        ("sha256:ABCDEF", None, "abcdef"),  # a sha256: prefix dropped
        (" abc ", None, "abc"),
        (None, "héllo", sha("héllo")),  # else SHA-256 hex of the UTF-8 text
        ("", "text", sha("text")),  # an empty hash is no hash
        (None, "", None),  # an empty text is no text
        (None, None, None),
    ],
)
def test_hash_rules(text_hash: str | None, text: str | None, expected: str | None) -> None:
    assert answer_hash(text_hash, text) == expected
    assert StoredChunk(text_hash=text_hash, text=text).hash == expected


def test_any_text_hashes() -> None:
    assert answer_hash(None, "bad \udc80 surrogate") is not None
    assert StoredChunk(text="\ud800").hash is not None


def test_normalise_hash() -> None:
    assert normalise_hash(None) is None
    assert normalise_hash("  ") is None
    assert normalise_hash("SHA256:") is None


SRC = {
    "same": "Refunds take five days.",
    "old": "The fee is 20 euros.",
    "new": "The fee is 25 euros.",
}

# (answer-time source, what the store holds or None when absent, expected verdict)
FINDING_CASES = [
    pytest.param(Source(text=SRC["same"]), StoredChunk(text=SRC["same"]), "fresh", id="same-text"),
    pytest.param(
        Source(text=SRC["same"]), StoredChunk(text_hash=sha(SRC["same"])), "fresh", id="text-v-hash"
    ),
    pytest.param(
        Source(text="", text_hash=sha(SRC["same"])),
        StoredChunk(text=SRC["same"]),
        "fresh",
        id="hash-v-text",
    ),
    pytest.param(
        Source(text=SRC["old"]), StoredChunk(text=SRC["new"]), "stale", id="text-rewritten"
    ),
    pytest.param(
        Source(text=SRC["old"]),
        StoredChunk(text_hash=sha(SRC["new"]), text=SRC["old"]),
        "stale",
        id="stored-hash-wins",
    ),
    pytest.param(
        Source(text=SRC["old"], text_hash="LOGGED"),
        StoredChunk(text_hash="logged"),
        "fresh",
        id="logged-hash-wins",
    ),
    pytest.param(Source(text=SRC["old"]), None, "missing", id="deleted"),
    pytest.param(Source(text=SRC["old"]), StoredChunk(), "unverifiable", id="store-no-hash-text"),
    pytest.param(
        Source(text=SRC["old"]),
        StoredChunk(doc_id="d", updated_at="2026-12-01T00:00:00Z"),
        "unverifiable",
        id="store-only-metadata",
    ),
    pytest.param(Source(text=""), StoredChunk(text=SRC["new"]), "unverifiable", id="answer-none"),
]


@pytest.mark.parametrize(("source", "stored", "verdict"), FINDING_CASES)
def test_findings(source: Source, stored: StoredChunk | None, verdict: str) -> None:
    rec = record("A sentence that cites it [1].", Source(**{**_fields(source), "chunk_id": "c1"}))
    got = findings(cited(rec), {} if stored is None else {"c1": stored})
    expected = {
        "fresh": ResolverFindings((), (), 0, 1),
        "stale": ResolverFindings((), ("c1",), 0, 1),
        "missing": ResolverFindings(("c1",), (), 0, 1),
        "unverifiable": ResolverFindings((), (), 1, 1),
    }[verdict]
    assert got == expected
    assert got.flagged == (verdict in ("stale", "missing"))


def _fields(source: Source) -> dict[str, object]:
    return {name: getattr(source, name) for name in Source.__dataclass_fields__}


def test_findings_of_a_whole_answer_in_source_order() -> None:
    rec = record(
        "One [1]. Two sentences here [2]. Three sentences here [3]. Four of them here [4]. "
        "Five of them here [5].",
        Source(text="a", chunk_id="c9"),
        Source(text="b", chunk_id="c2"),
        Source(text="c", chunk_id="c7"),
        Source(text="d", chunk_id=None),
        Source(text="e", chunk_id="c1"),
    )
    stored = {"c2": StoredChunk(text="b changed"), "c1": StoredChunk(text="e"), "x": StoredChunk()}
    got = findings(cited(rec), stored)
    # "One [1]." is not substantive: c9 is not looked up.
    assert got == ResolverFindings(missing=("c7",), stale=("c2",), unverifiable=1, looked_up=3)


# ---- a record with missing, stale and unlooked-up chunks ---------------------------------------

FUNNEL_RECORD = record(
    "x",
    Source(text="a", chunk_id="c1"),  # [1] fresh
    Source(text="b", chunk_id="c7"),  # [2] missing
    Source(text="c", chunk_id="c3"),  # [3] stale
    Source(text="d", chunk_id=None),  # [4] no chunk id
    Source(text="e", chunk_id="c8"),  # [5] missing
    Source(text="f", chunk_id="c5"),  # [6] not cited, not looked up
)
FOUND = ResolverFindings(missing=("c7", "c8"), stale=("c3",), unverifiable=1, looked_up=4)


# ---- scores ---------------------------------------------------------------------------------


def test_score_events_name_the_chunks() -> None:
    rec = FUNNEL_RECORD
    events = {e.name: e for e in resolver_score_events(rec, FOUND)}
    assert tuple(events) == RESOLVER_SCORE_NAMES
    missing, stale = events["missing_chunks"], events["stale_citations"]
    assert (missing.data_type, missing.value) == ("NUMERIC", 2.0)
    assert missing.comment == "2 of 4 cited chunks missing from the store: c7, c8"
    assert (stale.data_type, stale.value) == ("NUMERIC", 1.0)
    assert stale.comment == (
        "1 of 2 cited chunks in the store changed since the answer: c3; "
        "1 unverifiable (no chunk id, hash or text)"
    )
    for event in (missing, stale):
        assert event.id == score_id("tr-1", event.name)
        assert event.timestamp == "2026-11-20T08:30:01.100Z"
        assert event.observation_id == "gen-1"
        assert event.environment == "production"


def test_score_comments_when_all_is_well() -> None:
    events = resolver_score_events(FUNNEL_RECORD, ResolverFindings((), (), 0, 1))
    assert [(e.value, e.comment) for e in events] == [
        (0.0, "1 cited chunk, none missing from the store"),
        (0.0, "1 cited chunk in the store, none changed since the answer"),
    ]


def test_long_id_lists_are_cut() -> None:
    ids = tuple(f"chunk-{i}" for i in range(25))
    events = resolver_score_events(FUNNEL_RECORD, ResolverFindings(ids, (), 0, 25))
    assert events[0].comment.endswith("chunk-8, chunk-9 and 15 more")


def test_no_scores_without_a_lookup() -> None:
    assert resolver_score_events(FUNNEL_RECORD, None) == []
    assert resolver_score_events(FUNNEL_RECORD, ResolverFindings((), (), 2, 0)) == []
