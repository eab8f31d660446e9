"""Helpers shared by the signal tests: build a RagRecord, compute its signals.

The tests import these plain functions (`from .conftest import ...`) rather
than taking fixtures, so hypothesis properties can call them freely.
"""

from __future__ import annotations

from collections.abc import Sequence

from observer.model import RagRecord, Signals, Source
from observer.signals import SignalParams, compute

# Three sources with no numbers in them, for tests that only count markers.
PLAIN_SOURCES: tuple[str, ...] = (
    "The first source text.",
    "The second source text.",
    "The third source text.",
)


def make_record(
    answer: str,
    sources: Sequence[str] = PLAIN_SOURCES,
    scores: Sequence[float | None] | None = None,
    *,
    rerank_scores: Sequence[float] | None = None,
    needs_fallback: bool | None = None,
    low_confidence: bool | None = None,
    app_crag_grade: str | None = None,
) -> RagRecord:
    """A record with `sources` as [1], [2], ...; `scores` are the sources' own scores."""
    if scores is None:
        scores = [None] * len(sources)
    assert len(scores) == len(sources), "one score (or None) per source"
    return RagRecord(
        trace_id="trace-1",
        question="What does the answer say?",
        answer=answer,
        sources=tuple(
            Source(text=text, chunk_id=f"c{i}", score=score)
            for i, (text, score) in enumerate(zip(sources, scores, strict=True), start=1)
        ),
        rerank_scores=None if rerank_scores is None else tuple(rerank_scores),
        needs_fallback=needs_fallback,
        low_confidence=low_confidence,
        app_crag_grade=app_crag_grade,
    )


def signals_of(
    answer: str,
    sources: Sequence[str] = PLAIN_SOURCES,
    scores: Sequence[float | None] | None = None,
    *,
    params: SignalParams | None = None,
    rerank_scores: Sequence[float] | None = None,
    needs_fallback: bool | None = None,
    low_confidence: bool | None = None,
    app_crag_grade: str | None = None,
) -> Signals:
    """`compute` on a record built by `make_record`, default parameters unless given."""
    record = make_record(
        answer,
        sources,
        scores,
        rerank_scores=rerank_scores,
        needs_fallback=needs_fallback,
        low_confidence=low_confidence,
        app_crag_grade=app_crag_grade,
    )
    return compute(record, params if params is not None else SignalParams())


def n_sources(n: int) -> tuple[str, ...]:
    """`n` sources without numbers in their text."""
    return tuple(f"Source text number {chr(ord('a') + i % 26)}." for i in range(n))


def sentence_texts(signals: Signals) -> list[str]:
    return [s.text for s in signals.citations.sentences]
