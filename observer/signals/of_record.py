"""Every deterministic signal of one RagRecord: the passes of this package put together."""

from __future__ import annotations

from dataclasses import replace

from observer.model import Band, CragResult, Grade, NumericGrounding, RagRecord, Signals
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
    """The record's retrieval scores (`RagRecord.retrieval_scores`)."""
    return record.retrieval_scores()


def compute(record: RagRecord, params: SignalParams) -> Signals:
    """Every deterministic signal of `record`.

    Three-valued where evidence can be missing (docs/signals.md#unknown-is-not-zero): a
    record with sources but no retrieval score has no CRAG grade, rerank top-1,
    confidence or ungrounded flag, and a band only where the app's own flags set it LOW.
    Only a record without any source is a no-evidence answer (grade LOW, top-1 0)."""
    n_sources = len(record.sources)
    split = split_answer(record.answer, n_sources, params)
    cites = citations(split, n_sources)
    refused = abstained(split.sentences, params.refusal_phrases)
    if refused:  # a refusal makes no claim: nothing to cover, no number to ground
        cites = replace(cites, coverage=None)
    coverage = cites.coverage
    scores = record.retrieval_scores()
    crag = grade(scores, params.crag) if scores or n_sources == 0 else None
    rerank_top1: float | None = None
    if crag is not None:
        rerank_top1 = _clamp01(crag.top1) if crag.top1 is not None else 0.0
    needs_fallback = record.needs_fallback if record.needs_fallback is not None else n_sources == 0
    low_confidence = record.low_confidence
    if low_confidence is None:
        if needs_fallback:
            low_confidence = False
        elif crag is not None:
            low_confidence = crag.grade is Grade.LOW
    confidence: float | None = None
    if rerank_top1 is not None:
        confidence = _clamp01(coverage) * rerank_top1 if coverage is not None else rerank_top1
    numeric = _NO_NUMBERS if refused else ground(split.numbers, [s.text for s in record.sources])
    return Signals(
        trace_id=record.trace_id,
        citations=cites,
        crag=crag,
        rerank_top1=rerank_top1,
        confidence=confidence,
        band=_band(needs_fallback, low_confidence, confidence, params),
        needs_fallback=needs_fallback,
        low_confidence=low_confidence,
        ungrounded=_ungrounded(needs_fallback, crag, coverage),
        numeric=numeric,
        concentration=of_cited_refs(split.cited_refs, record.sources),
        crag_mismatch=_mismatch(record.app_crag_grade, crag),
        abstained=refused,
        over_refusal=_over_refusal(refused, crag, params),
        over_citation=over_cited(split.sentences, params.max_refs_per_sentence),
    )


def _band(
    needs_fallback: bool,
    low_confidence: bool | None,
    confidence: float | None,
    params: SignalParams,
) -> Band | None:
    if needs_fallback or low_confidence:
        return Band.LOW
    if confidence is None:
        return None
    if confidence >= params.band_high:
        return Band.HIGH
    return Band.MEDIUM if confidence >= params.band_medium else Band.LOW


def _ungrounded(
    needs_fallback: bool, crag: CragResult | None, coverage: float | None
) -> bool | None:
    if needs_fallback:
        return False
    if crag is None:
        return None
    return crag.grade is Grade.LOW and coverage is not None and coverage == 0.0


def _mismatch(app_grade: str | None, crag: CragResult | None) -> bool | None:
    if app_grade is None or crag is None:
        return None
    return app_grade.strip().upper() != crag.grade.value


def _over_refusal(refused: bool, crag: CragResult | None, params: SignalParams) -> bool | None:
    """Abstained while retrieval was HIGH; None without retrieval scores."""
    if crag is None or crag.top1 is None:
        return None
    return refused and crag.grade is Grade.HIGH and crag.top1 >= params.crag.high - _EPS
