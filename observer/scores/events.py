"""The scores of docs/scores.md for one record: values, ids, comments. Pure."""

from __future__ import annotations

import hashlib
import uuid

from observer.model import CragResult, RagRecord, ScoreEvent, Signals
from observer.scores import catalogue
from observer.scores.catalogue import Producer, ScoreEntry
from observer.signals.abstention import refusal_phrase
from observer.signals.of_record import retrieval_scores
from observer.signals.params import SignalParams

# Fixed forever: changing it would change every score id and duplicate scores.
SCORE_ID_NAMESPACE = uuid.UUID("6f1c3d2e-8a4b-5c6d-9e0f-1a2b3c4d5e6f")
_NAMESPACE = SCORE_ID_NAMESPACE.bytes
SIGNAL_SCORE_NAMES = catalogue.names_of(Producer.SIGNALS)
_COMMENT_MAX = 500


def score_id(trace_id: str, name: str) -> str:
    """Deterministic: the same trace and name give the same id, on any replica, for the
    trace's whole life (docs/scores.md#ids-and-timestamps). A late generation or a
    second root updates the trace's scores; an id from the generation would give the
    trace a second set."""
    # uuid.uuid5(SCORE_ID_NAMESPACE, ...) as RFC 4122 makes it, without the UUID object
    # (a third of the cost of a trace's score set): the same text, tested against it.
    digest = bytearray(hashlib.sha1(_NAMESPACE + f"{trace_id}\x1f\x1f{name}".encode()).digest())
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = digest[:16].hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def score_events_of(
    record: RagRecord, entries: list[ScoreEntry], metadata: dict[str, str] | None = None
) -> list[ScoreEvent]:
    """Scores of one record: every one on the generation, with the id and timestamp rules.

    The timestamp is the record's, which the daemon sets to the trace's earliest root
    (Langfuse keys a score by id, name and the day of its timestamp: both fixed).
    `metadata` goes on every one of them (the judge's: which judge wrote it)."""
    return [
        ScoreEvent(
            id=score_id(record.trace_id, name),
            trace_id=record.trace_id,
            observation_id=record.observation_id,
            name=name,
            value=value,
            data_type=data_type,
            comment=comment[:_COMMENT_MAX],
            timestamp=record.timestamp,
            environment=record.environment,
            metadata=dict(metadata) if metadata else None,
        )
        for name, value, data_type, comment in entries
    ]


def _refs(refs: tuple[int, ...] | tuple[str, ...], limit: int = 10) -> str:
    shown = ", ".join(str(r) for r in refs[:limit])
    return f"[{shown}{', ...' if len(refs) > limit else ''}]"


def _crag_comment(crag: CragResult, signals: Signals, params: SignalParams) -> str:
    top1 = f"{crag.top1:.2f}" if crag.top1 is not None else "n/a"
    reasons = {
        "top1_high": f"top1 {top1} >= high {params.crag.high}",
        "top1_low": f"top1 {top1} <= low {params.crag.low}",
        "gray_clear_winner": f"gray zone, top1 {top1} leads top2 by >= {params.crag.high_gap}",
        "gray_low_mean": (
            f"gray zone, mean score <= {params.crag.low + params.crag.low_avg_buffer:.2f}"
        ),
        "gray_zone": f"gray zone, top1 {top1}",
        "no_evidence": "no sources: an answer without evidence",
        "error": "grading failed; conservative AMBIGUOUS",
    }
    text = f"{crag.grade.value}: {reasons.get(crag.reason, crag.reason)}"
    if signals.crag_mismatch:
        text += "; differs from the app's own grade"
    return text


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def concentration_comment(signals: Signals) -> str:
    """`4/5 cited sentences rest on doc "handbook-v3" alone; 2 documents cited`."""
    conc = signals.concentration
    return (
        f"{conc.alone}/{conc.cited_sentences} cited sentences rest on doc "
        f'"{conc.top_doc}" alone; {_plural(len(conc.cited_docs), "document")} cited'
    )


def score_events(record: RagRecord, signals: Signals, params: SignalParams) -> list[ScoreEvent]:
    """Every signal score (docs/scores.md) written for this record, with comments. The
    score signals only where they are known (docs/signals.md#unknown-is-not-zero)."""
    cites = signals.citations
    numeric = signals.numeric
    ghost = f"; ghost refs {_refs(cites.invalid_refs)}" if cites.invalid_refs else ""
    entries: list[ScoreEntry] = []
    if signals.confidence is not None and signals.rerank_top1 is not None:
        entries.append(catalogue.CONFIDENCE.entry(signals.confidence, _confidence_comment(signals)))
    if cites.coverage is not None:
        entries.append(
            catalogue.CITATION_COVERAGE.entry(
                cites.coverage,
                f"{cites.cited}/{cites.substantive} substantive sentences cited{ghost}",
            )
        )
    entries += _retrieval_entries(record, signals, params)
    entries.append(
        catalogue.INVALID_CITATIONS.entry(
            float(len(cites.invalid_refs)),
            f"ghost refs {_refs(cites.invalid_refs)} with {len(record.sources)} sources"
            if cites.invalid_refs
            else f"no ghost refs ({len(record.sources)} sources)",
        )
    )
    if numeric.ratio is not None:
        unsupported = f"; unsupported {_refs(numeric.unsupported)}" if numeric.unsupported else ""
        entries.append(
            catalogue.NUMERIC_GROUNDING.entry(
                numeric.ratio,
                f"{numeric.grounded}/{numeric.numbers} numbers found in the cited sources"
                f"{unsupported}",
            )
        )
    if signals.concentration.ratio is not None:
        entries.append(
            catalogue.CITATION_CONCENTRATION.entry(
                signals.concentration.ratio, concentration_comment(signals)
            )
        )
    entries += _abstention_entries(signals, params)
    return score_events_of(record, entries)


def _confidence_comment(signals: Signals) -> str:
    coverage, top1 = signals.citations.coverage, signals.rerank_top1
    if coverage is not None:
        return f"coverage {coverage:.2f} x rerank top1 {top1:.2f} = {signals.confidence:.2f}"
    if signals.abstained:
        return f"a refusal, nothing to cover; rerank top1 {top1:.2f}"
    return f"no substantive sentence; rerank top1 {top1:.2f}"


def _retrieval_entries(
    record: RagRecord, signals: Signals, params: SignalParams
) -> list[ScoreEntry]:
    """`rerank_top1`, `crag_grade`, `ungrounded` and `confidence_band`, those known."""
    cites = signals.citations
    entries: list[ScoreEntry] = []
    if signals.crag is not None and signals.rerank_top1 is not None:
        n_scores = len(retrieval_scores(record))
        entries += [
            catalogue.RERANK_TOP1.entry(
                signals.rerank_top1,
                f"top of {n_scores} retrieval scores" if n_scores else "no sources",
            ),
            catalogue.CRAG_GRADE.entry(
                signals.crag.grade.value, _crag_comment(signals.crag, signals, params)
            ),
        ]
    if signals.ungrounded is not None:
        if signals.ungrounded:
            why = f"LOW retrieval; none of {cites.substantive} substantive sentences cites a source"
        elif signals.needs_fallback:
            why = "not ungrounded (fallback answer)"
        else:
            why = "not ungrounded" + (" (a refusal)" if signals.abstained else "")
        entries.append(catalogue.UNGROUNDED.entry(1.0 if signals.ungrounded else 0.0, why))
    if signals.band is not None:
        if signals.needs_fallback:
            band_comment = "fallback answer (no evidence)"
        elif signals.low_confidence:
            band_comment = "low-confidence answer"
        else:
            band_comment = f"confidence {signals.confidence:.2f}"
        entries.append(
            catalogue.CONFIDENCE_BAND.entry(
                signals.band.value, f"{signals.band.value}: {band_comment}"
            )
        )
    return entries


def _abstention_entries(signals: Signals, params: SignalParams) -> list[ScoreEntry]:
    """`abstained`, `over_refusal` (with retrieval scores) and `over_citation`."""
    crag = signals.crag
    if signals.abstained:
        phrase = next(
            (
                found
                for s in signals.citations.sentences
                if (found := refusal_phrase(s.text, params.refusal_phrases)) is not None
            ),
            "",
        )
        abstained = f'a refusal ("{phrase}"): no coverage computed'
    else:
        abstained = "not a refusal"
    entries = [catalogue.ABSTAINED.entry(1.0 if signals.abstained else 0.0, abstained)]
    if signals.over_refusal is not None and crag is not None and crag.top1 is not None:
        if signals.over_refusal:
            why = f"a refusal with HIGH retrieval (top1 {crag.top1:.2f} >= high {params.crag.high})"
        elif signals.abstained:
            why = f"a refusal with {crag.grade.value} retrieval (top1 {crag.top1:.2f})"
        else:
            why = "not a refusal"
        entries.append(catalogue.OVER_REFUSAL.entry(1.0 if signals.over_refusal else 0.0, why))
    limit = params.max_refs_per_sentence
    over = signals.over_citation
    entries.append(
        catalogue.OVER_CITATION.entry(
            float(over),
            f"{_plural(over, 'sentence')} {'cites' if over == 1 else 'cite'} more than {limit} "
            "sources"
            if over
            else f"no sentence cites more than {limit} sources",
        )
    )
    return entries
