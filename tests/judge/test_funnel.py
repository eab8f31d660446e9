"""The judge's funnel over the resolver's findings: which claims the LLM sees, with what."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.judge.funnel import claim_needs_llm, fresh_sources, route
from observer.judge.protocol import Claim, Verdict
from observer.model import RagRecord, Source
from observer.resolver import ResolverFindings

RECORD = RagRecord(
    trace_id="tr-1",
    question="q",
    answer="x",
    sources=(
        Source(text="a", chunk_id="c1"),  # [1] fresh
        Source(text="b", chunk_id="c7"),  # [2] missing
        Source(text="c", chunk_id="c3"),  # [3] stale
        Source(text="d", chunk_id=None),  # [4] no chunk id
        Source(text="e", chunk_id="c8"),  # [5] missing
        Source(text="f", chunk_id="c5"),  # [6] not cited, not looked up
    ),
    observation_id="gen-1",
    timestamp="2026-11-20T08:30:01.100Z",
)
FOUND = ResolverFindings(missing=("c7", "c8"), stale=("c3",), unverifiable=1, looked_up=4)


@pytest.mark.parametrize(
    ("citations", "needs_llm", "reason"),
    [
        ((2,), False, "cited chunks missing from the store: c7"),
        ((5, 2), False, "cited chunks missing from the store: c7, c8"),
        ((3,), False, "cited chunks changed since the answer: c3"),
        (
            (2, 3),
            False,
            "cited chunks missing from the store: c7; cited chunks changed since the answer: c3",
        ),
        ((1, 2), True, ""),  # one fresh citation is enough to ask the LLM
        ((2, 4), True, ""),  # a source without chunk id cannot be ruled out
        ((6,), True, ""),
        ((), True, ""),  # an uncited claim: the context decides
        ((9,), True, ""),  # not a valid source number: the judge's own rules apply
    ],
)
def test_claim_needs_llm(citations: tuple[int, ...], needs_llm: bool, reason: str) -> None:
    decision = claim_needs_llm(citations, RECORD, FOUND)
    assert (decision.needs_llm, decision.reason) == (needs_llm, reason)


def test_without_findings_every_claim_goes_to_the_llm() -> None:
    assert claim_needs_llm((2,), RECORD, None).needs_llm
    nothing = ResolverFindings((), (), 0, 4)
    assert claim_needs_llm((2,), RECORD, nothing).needs_llm


def test_a_long_list_of_chunks_is_cut_in_the_reason() -> None:
    sources = tuple(Source(text=str(i), chunk_id=f"k{i}") for i in range(14))
    rec = RagRecord("t", "q", "a", sources, observation_id="g", timestamp="2026-11-20T08:30:01Z")
    gone = ResolverFindings(tuple(f"k{i}" for i in range(14)), (), 0, 14)
    reason = claim_needs_llm(range(1, 15), rec, gone).reason
    assert reason.endswith("k8, k9 and 4 more")


def test_fresh_sources() -> None:
    assert fresh_sources(RECORD, FOUND) == (1, 4, 6)
    assert fresh_sources(RECORD, FOUND, numbers=(3, 1, 1, 2, 9)) == (1,)
    assert fresh_sources(RECORD, None) == (1, 2, 3, 4, 5, 6)
    assert fresh_sources(RECORD, None, numbers=(2, 0)) == (2,)


def test_route_decides_claims_on_flagged_chunks_and_narrows_the_rest() -> None:
    claims = [
        Claim(1, "fresh", 0, (1,)),
        Claim(2, "gone", 1, (2, 5)),
        Claim(3, "mixed", 2, (1, 3)),
        Claim(4, "uncited", 3, ()),
        Claim(5, "changed", 4, (3,)),
    ]
    routed = route(claims, RECORD, FOUND)
    assert [(c.id, c.citations) for c in routed.asked] == [(1, (1,)), (3, (1,)), (4, ())]
    assert routed.decided == (
        Verdict(2, None, False, "cited chunks missing from the store: c7, c8"),
        Verdict(5, None, False, "cited chunks changed since the answer: c3"),
    )
    assert routed.keep == (1, 4, 6)


def test_route_without_flagged_findings_changes_nothing() -> None:
    claims = [Claim(1, "a", 0, (2,)), Claim(2, "b", 1, ())]
    for found in (None, ResolverFindings((), (), 3, 3)):
        routed = route(claims, RECORD, found)
        assert routed.asked == tuple(claims)
        assert routed.decided == ()
        assert routed.keep is None


@st.composite
def cases(draw: st.DrawFn) -> tuple[RagRecord, ResolverFindings, list[Claim]]:
    n = draw(st.integers(1, 8))
    ids = [draw(st.none() | st.sampled_from(["a", "b", "c", "d", "e"])) for _ in range(n)]
    sources = tuple(Source(text=f"s{i}", chunk_id=cid) for i, cid in enumerate(ids))
    rec = RagRecord("t", "q", "a", sources, observation_id="g", timestamp="2026-11-20T08:30:01Z")
    known = sorted({cid for cid in ids if cid})
    missing = draw(st.lists(st.sampled_from(known), unique=True)) if known else []
    rest = [cid for cid in known if cid not in missing]
    stale = draw(st.lists(st.sampled_from(rest), unique=True)) if rest else []
    found = ResolverFindings(tuple(missing), tuple(stale), 0, len(known))
    claims = [
        Claim(i, f"claim {i}", i, tuple(draw(st.lists(st.integers(1, n), max_size=4))))
        for i in range(draw(st.integers(0, 6)))
    ]
    return rec, found, claims


@given(cases())
def test_route_properties(case: tuple[RagRecord, ResolverFindings, list[Claim]]) -> None:
    rec, found, claims = case
    routed = route(claims, rec, found)
    flagged = set(found.missing) | set(found.stale)
    # Every claim is either asked or decided, once.
    assert sorted([c.id for c in routed.asked] + [v.id for v in routed.decided]) == [
        c.id for c in claims
    ]
    by_id = {c.id: c for c in claims}
    for verdict in routed.decided:
        cited = by_id[verdict.id].citations
        # Decided only when it cites something and everything it cites is flagged.
        assert cited and all(rec.sources[x - 1].chunk_id in flagged for x in cited)
        assert (verdict.supported, verdict.cited_support) == (None, False) and verdict.reason
    keep = set(routed.keep) if routed.keep is not None else set(range(1, len(rec.sources) + 1))
    for claim in routed.asked:
        # The LLM never sees a flagged chunk, neither as a citation nor in the sources.
        assert set(claim.citations) <= keep
        assert set(claim.citations) <= set(by_id[claim.id].citations)
        assert bool(claim.citations) == bool(by_id[claim.id].citations)
    assert all(rec.sources[x - 1].chunk_id not in flagged for x in keep)
