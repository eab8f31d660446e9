"""Properties of `compute` over arbitrary records (docs/signals.md)."""

from __future__ import annotations

import math
import random

from hypothesis import given
from hypothesis import strategies as st

from observer.model import Band, RagRecord, Signals, Source
from observer.scores import score_events
from observer.signals import SignalParams, compute, retrieval_scores

PARAMS = SignalParams()

# Pieces real answers are made of, mixed with arbitrary text so markdown,
# markers, terminators and numbers meet each other in every order.
_MARKERS = ["[1]", "[2]", "[0]", "[9]", "[1,2]", "[1, 2]", "[1，3]", "[1-3]", "[2–4]", "[1-99]"]
_MARKERS += ["【2】", "[^1]", "[1](https://x.y/2)"]
_BREAKS = [". ", ".", "。", "！", "?", "…", "; ", "\n", "\n\n", '"', "」", "）"]
_MARKDOWN = ["```", "`", "~~~", "# ", "> ", "- ", "1. ", "2) ", "| ", " |", "**"]
_WORDS = ["3.5", "3.5%", "1,200", "１２０", "120", "Dr. ", "J. ", "U.S. ", "e.g. "]
_PHRASES = ["Hope this helps", "希望以上", "Paris is the capital of France", "收入为120百万"]
_PIECES = st.sampled_from(_MARKERS + _BREAKS + _MARKDOWN + _WORDS + _PHRASES)
answers = st.one_of(
    st.text(),
    st.lists(st.one_of(_PIECES, st.text(max_size=12)), max_size=30).map("".join),
)
scores = st.floats(allow_nan=True, allow_infinity=True) | st.floats(min_value=-0.5, max_value=1.5)
doc_ids = st.sampled_from([None, "", "handbook", "faq"])
source_texts = st.one_of(st.text(max_size=80), st.sampled_from(["Revenue was 120 in 2023.", ""]))


@st.composite
def records(draw: st.DrawFn) -> RagRecord:
    sources = draw(st.lists(st.tuples(source_texts, st.none() | scores, doc_ids), max_size=5))
    return RagRecord(
        trace_id="trace-p",
        question="q",
        answer=draw(answers),
        sources=tuple(Source(text=t, score=s, doc_id=d) for t, s, d in sources),
        rerank_scores=draw(st.none() | st.lists(scores, max_size=6).map(tuple)),
        needs_fallback=draw(st.none() | st.booleans()),
        low_confidence=draw(st.none() | st.booleans()),
    )


def _unit_or_none(value: float | None) -> bool:
    return value is None or (not math.isnan(value) and 0.0 <= value <= 1.0)


@given(records())
def test_scores_in_unit_interval_never_nan(record: RagRecord) -> None:
    signals = compute(record, PARAMS)
    assert _unit_or_none(signals.citations.coverage)
    assert _unit_or_none(signals.numeric.ratio)
    assert _unit_or_none(signals.concentration.ratio)
    for value in (signals.confidence, signals.rerank_top1):
        assert _unit_or_none(value)
    # Unknown only where the record has sources and no retrieval score at all.
    known = bool(retrieval_scores(record)) or not record.sources
    assert (signals.rerank_top1 is not None) is known
    assert (signals.crag is not None) is known


@given(st.text(), st.lists(st.text(), max_size=4), st.lists(scores, max_size=4))
def test_arbitrary_text_never_raises(answer: str, texts: list[str], floats: list[float]) -> None:
    sources = tuple(
        Source(text=text, score=floats[i] if i < len(floats) else None)
        for i, text in enumerate(texts)
    )
    record = RagRecord(trace_id="t", question="q", answer=answer, sources=sources)
    assert isinstance(compute(record, PARAMS), Signals)


@given(records())
def test_removing_retrieval_scores_only_removes_score_signals(record: RagRecord) -> None:
    """docs/signals.md#unknown-is-not-zero: a trace that lost its retrieval scores posts a
    subset of the scores it posted with them, each with the same value, and no new LOW."""
    bare = RagRecord(
        trace_id=record.trace_id,
        question=record.question,
        answer=record.answer,
        sources=tuple(Source(text=s.text, doc_id=s.doc_id) for s in record.sources),
        needs_fallback=record.needs_fallback,
        low_confidence=record.low_confidence,
    )
    with_scores = {e.name: e.value for e in score_events(record, compute(record, PARAMS), PARAMS)}
    without = {e.name: e.value for e in score_events(bare, compute(bare, PARAMS), PARAMS)}
    if not record.sources:  # no sources: no evidence, whatever scores the record holds
        assert without["crag_grade"] == "LOW"
        return
    for name, value in without.items():
        assert with_scores.get(name) == value, name


@given(records())
def test_same_record_same_signals(record: RagRecord) -> None:
    assert compute(record, PARAMS) == compute(record, PARAMS)


@given(records())
def test_refs_partition(record: RagRecord) -> None:
    cites = compute(record, PARAMS).citations
    n = len(record.sources)
    assert all(1 <= r <= n for r in cites.valid_refs)
    assert not any(1 <= r <= n for r in cites.invalid_refs)
    assert not set(cites.valid_refs) & set(cites.invalid_refs)
    for refs in (cites.valid_refs, cites.invalid_refs):
        assert list(refs) == sorted(set(refs))


@given(records())
def test_counts_consistent(record: RagRecord) -> None:
    cites = compute(record, PARAMS).citations
    assert 0 <= cites.cited <= cites.substantive
    assert cites.substantive == sum(s.substantive for s in cites.sentences)
    assert cites.cited == sum(s.cited for s in cites.sentences)
    assert cites.coverage_computed == (cites.substantive > 0)
    numeric = compute(record, PARAMS).numeric
    assert 0 <= numeric.grounded <= numeric.numbers
    assert len(numeric.unsupported) <= numeric.numbers - numeric.grounded


@given(records())
def test_forced_low_band(record: RagRecord) -> None:
    signals = compute(record, PARAMS)
    if signals.needs_fallback or signals.low_confidence:
        assert signals.band is Band.LOW


@given(records(), st.randoms(use_true_random=False))
def test_score_order_does_not_matter(record: RagRecord, rnd: random.Random) -> None:
    if record.rerank_scores is None:
        return
    shuffled = list(record.rerank_scores)
    rnd.shuffle(shuffled)
    again = RagRecord(
        trace_id=record.trace_id,
        question=record.question,
        answer=record.answer,
        sources=record.sources,
        rerank_scores=tuple(shuffled),
        needs_fallback=record.needs_fallback,
        low_confidence=record.low_confidence,
    )
    first, second = compute(record, PARAMS), compute(again, PARAMS)
    assert (first.crag_grade, first.rerank_top1, first.band) == (
        second.crag_grade,
        second.rerank_top1,
        second.band,
    )


@given(records())
def test_trailing_pleasantry_changes_nothing(record: RagRecord) -> None:
    # A closing pleasantry on its own line is neither substantive nor cited.
    longer = RagRecord(
        trace_id=record.trace_id,
        question=record.question,
        answer=record.answer + "\n\nHope this helps [1]!",
        sources=record.sources,
        rerank_scores=record.rerank_scores,
    )
    before, after = compute(record, PARAMS).citations, compute(longer, PARAMS).citations
    assert (after.substantive, after.cited, after.coverage) == (
        before.substantive,
        before.cited,
        before.coverage,
    )


# Prose pieces with no backtick or tilde, so no line of them can open or close a fence.
_CODE_BODY = st.lists(
    st.one_of(
        _PIECES.filter(lambda p: "`" not in p and "~" not in p),
        st.text(alphabet=st.characters(blacklist_characters="`~\r\n"), max_size=12),
    ),
    max_size=30,
).map("".join)


@given(_CODE_BODY)
def test_nothing_inside_a_fence_counts(body: str) -> None:
    # Only splitlines() boundaries matter; keep the body to "\n" line breaks.
    body = "\n".join(body.splitlines())
    record = RagRecord(
        trace_id="t",
        question="q",
        answer=f"Intro sentence is here.\n```\n{body}\n```\nOutro sentence is here [1].",
        sources=(Source(text="Revenue was 120 in 2023."),),
    )
    signals = compute(record, PARAMS)
    assert [s.text for s in signals.citations.sentences] == [
        "Intro sentence is here.",
        "Outro sentence is here [1].",
    ]
    assert (signals.citations.valid_refs, signals.citations.invalid_refs) == ((1,), ())
    assert signals.numeric.numbers == 0
