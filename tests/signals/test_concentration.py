"""Source concentration (docs/signals.md#source-concentration): tables and properties."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.model import Concentration, RagRecord, Sentence, Source
from observer.signals import SignalParams, cited_sources, compute
from observer.signals.concentration import concentration


def record(answer: str, docs: Sequence[str | None]) -> RagRecord:
    return RagRecord(
        trace_id="t",
        question="q",
        answer=answer,
        sources=tuple(
            Source(text=f"Source {i}.", chunk_id=f"c{i}", doc_id=doc)
            for i, doc in enumerate(docs, start=1)
        ),
    )


def of(answer: str, docs: Sequence[str | None]) -> Concentration:
    return compute(record(answer, docs), SignalParams()).concentration


S = "Sentence number {} says something"  # substantive


def answer(*markers: str) -> str:
    return " ".join(f"{S.format(i)} {m}." for i, m in enumerate(markers))


# (answer, doc of each source, cited_docs, top_doc, alone, cited sentences, ratio)
CASES = [
    pytest.param(answer("[1]", "[1]"), ["A"], ("A",), "A", 2, 2, 1.0, id="two-on-one-doc"),
    pytest.param(
        answer("[1]", "[1]", "[2]", "[1]", "[1]"),
        ["A", "B"],
        ("A", "B"),
        "A",
        4,
        5,
        0.8,
        id="four-of-five",
    ),
    pytest.param(answer("[1]"), ["A"], ("A",), "A", 1, 1, None, id="one-cited-sentence"),
    pytest.param(answer("[1]", "[2]"), [None, None], (), None, 0, 2, None, id="no-doc-ids"),
    pytest.param(answer("[1]", "[2]"), ["", ""], (), None, 0, 2, None, id="empty-doc-ids"),
    pytest.param(answer("[1][2]", "[1]"), ["A", "B"], ("A", "B"), "A", 1, 2, 0.5, id="mixed"),
    pytest.param(
        answer("[1][2]", "[2]"), ["A", "A"], ("A",), "A", 2, 2, 1.0, id="two-chunks-one-doc"
    ),
    pytest.param(answer("[1]", "[2]"), ["B", "A"], ("A", "B"), "A", 1, 2, 0.5, id="tie-smallest"),
    pytest.param(
        answer("[1,2]", "[2]", "[1,3]"),
        ["A", "B", "C"],
        ("A", "B", "C"),
        "B",
        1,
        3,
        1 / 3,
        id="tie-more-alone",
    ),
    pytest.param(
        answer("[1]", "[1][2]"), ["A", None], ("A",), "A", 1, 2, 0.5, id="unknown-doc-not-alone"
    ),
    pytest.param(answer("[1]", "[1][7]"), ["A", "B"], ("A",), "A", 2, 2, 1.0, id="ghost-ignored"),
    pytest.param(answer("[1]", "[7]"), ["A", "B"], ("A",), "A", 1, 1, None, id="ghost-only"),
    pytest.param(
        answer("[1]", "[2]") + " Yes [2].",
        ["A", "B"],
        ("A", "B"),
        "A",
        1,
        2,
        0.5,
        id="non-substantive-ignored",
    ),
    pytest.param(
        answer("[1]", "[1]") + " Uncited sentence here too.",
        ["A"],
        ("A",),
        "A",
        2,
        2,
        1.0,
        id="uncited-not-counted",
    ),
    pytest.param("No sources cited at all here.", ["A"], (), None, 0, 0, None, id="nothing"),
]


@pytest.mark.parametrize(("text", "docs", "cited_docs", "top", "alone", "cited", "ratio"), CASES)
def test_concentration(
    text: str,
    docs: list[str | None],
    cited_docs: tuple[str, ...],
    top: str | None,
    alone: int,
    cited: int,
    ratio: float | None,
) -> None:
    got = of(text, docs)
    assert got.cited_docs == cited_docs
    assert got.top_doc == top
    assert got.alone == alone
    assert got.cited_sentences == cited
    assert got.ratio == (None if ratio is None else pytest.approx(ratio))


def test_cited_sources_are_the_valid_refs_of_cited_sentences() -> None:
    signals = compute(
        record(answer("[2]", "[1][9]") + " Yes [3].", ["A", "B", "C"]), SignalParams()
    )
    assert cited_sources(signals.citations.sentences, 3) == (1, 2)
    assert signals.citations.valid_refs == (1, 2, 3)  # [3] is in a non-substantive sentence


# ---- properties over sentences and sources -------------------------------------------------

_DOCS = st.sampled_from(["A", "B", "C", "D", "", None])


@st.composite
def answers(draw: st.DrawFn) -> tuple[list[Sentence], list[Source]]:
    docs = draw(st.lists(_DOCS, max_size=6))
    sources = [Source(text="x", doc_id=d) for d in docs]
    refs = st.lists(st.integers(min_value=0, max_value=len(docs) + 2), max_size=4)
    sentences = [
        Sentence(
            "s",
            tuple(sorted(set(r))),
            substantive,
            substantive and any(0 < x <= len(docs) for x in r),
        )
        for r, substantive in draw(st.lists(st.tuples(refs, st.booleans()), max_size=8))
    ]
    return sentences, sources


@given(answers())
def test_ratio_in_unit_interval_and_null_rules(drawn: tuple[list[Sentence], list[Source]]) -> None:
    sentences, sources = drawn
    got = concentration(sentences, sources)
    assert got.cited_sentences == sum(s.cited for s in sentences)
    if got.cited_sentences < 2 or not got.cited_docs:
        assert got.ratio is None
    else:
        assert got.ratio is not None and not math.isnan(got.ratio)
        assert 0.0 <= got.ratio <= 1.0
        assert got.top_doc in got.cited_docs
        assert got.ratio == got.alone / got.cited_sentences
    assert list(got.cited_docs) == sorted(set(got.cited_docs))
    assert "" not in got.cited_docs


@given(answers(), st.randoms(use_true_random=False))
def test_order_of_sentences_and_sources_does_not_matter(
    drawn: tuple[list[Sentence], list[Source]], rnd: random.Random
) -> None:
    sentences, sources = drawn
    shuffled = sentences[:]
    rnd.shuffle(shuffled)
    # Renumber the sources: old number i becomes new[i-1]; refs follow, ghosts stay ghosts.
    n = len(sources)
    order = list(range(1, n + 1))
    rnd.shuffle(order)
    inverse = {new: old for old, new in enumerate(order, start=1)}
    renumbered_sources = [sources[inverse[j] - 1] for j in range(1, n + 1)]
    renumbered = [
        s._replace(refs=tuple(sorted(order[r - 1] if 0 < r <= n else r for r in s.refs)))
        for s in shuffled
    ]
    assert concentration(renumbered, renumbered_sources) == concentration(sentences, sources)
