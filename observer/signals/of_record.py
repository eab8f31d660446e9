"""Every deterministic signal of one RagRecord: the passes of this package put together."""

from __future__ import annotations

from dataclasses import replace

from observer.model import Band, Grade, NumericGrounding, RagRecord, Signals
from observer.signals.abstention import abstained, over_cited
from observer.signals.concentration import of_cited_refs
from observer.signals.crag import grade
from observer.signals.numbers import ground
from observer.signals.params import SignalParams
from observer.signals.sentences import citations, split_answer

_NO_NUMBERS = NumericGrounding(0, 0, ())
# Thresholds are compared with this slack, as the CRAG grade compares them.
_EPS = 1e-9


def _clamp01(value: float) -> float:
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else value


def retrieval_scores(record: RagRecord) -> tuple[float, ...]:
    """`rerank_scores` when given, else the sources' non-null scores."""
    if record.rerank_scores is not None:
        return record.rerank_scores
    return tuple(s.score for s in record.sources if s.score is not None)


def compute(record: RagRecord, params: SignalParams) -> Signals:
    """Every deterministic signal of `record`."""
    n_sources = len(record.sources)
    split = split_answer(record.answer, n_sources, params)
    cites = citations(split, n_sources)
    refused = abstained(split.sentences, params.refusal_phrases)
    if refused:  # a refusal makes no claim: nothing to cover, no number to ground
        cites = replace(cites, coverage=None)
    crag = grade(retrieval_scores(record), params.crag)
    over_refusal = None
    if crag.top1 is not None:
        over_refusal = refused and crag.grade is Grade.HIGH and crag.top1 >= params.crag.high - _EPS
    rerank_top1 = _clamp01(crag.top1) if crag.top1 is not None else 0.0

    needs_fallback = record.needs_fallback if record.needs_fallback is not None else n_sources == 0
    low_confidence = (
        record.low_confidence
        if record.low_confidence is not None
        else crag.grade is Grade.LOW and not needs_fallback
    )
    coverage = cites.coverage
    confidence = _clamp01(coverage) * rerank_top1 if coverage is not None else rerank_top1
    if needs_fallback or low_confidence:
        band = Band.LOW
    elif confidence >= params.band_high:
        band = Band.HIGH
    elif confidence >= params.band_medium:
        band = Band.MEDIUM
    else:
        band = Band.LOW
    ungrounded = (
        not needs_fallback and crag.grade is Grade.LOW and coverage is not None and coverage == 0.0
    )
    numeric = _NO_NUMBERS if refused else ground(split.numbers, [s.text for s in record.sources])
    mismatch = None
    if record.app_crag_grade is not None:
        mismatch = record.app_crag_grade.strip().upper() != crag.grade.value
    return Signals(
        trace_id=record.trace_id,
        citations=cites,
        crag=crag,
        rerank_top1=rerank_top1,
        confidence=confidence,
        band=band,
        needs_fallback=needs_fallback,
        low_confidence=low_confidence,
        ungrounded=ungrounded,
        numeric=numeric,
        concentration=of_cited_refs(split.cited_refs, record.sources),
        crag_mismatch=mismatch,
        abstained=refused,
        over_refusal=over_refusal,
        over_citation=over_cited(split.sentences, params.max_refs_per_sentence),
    )
