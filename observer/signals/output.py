"""The JSON shape of `observer score` output: one object per record."""

from __future__ import annotations

from typing import Any

import orjson

from observer.model import Signals


def dumps_line(obj: dict[str, Any]) -> bytes:
    """One JSON line, UTF-8, newline-terminated (orjson: ~3x json.dumps)."""
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


def signals_json(signals: Signals) -> dict[str, Any]:
    """Signals as the flat, stable JSON object documented in the README."""
    cites = signals.citations
    return {
        "trace_id": signals.trace_id,
        "valid_refs": list(cites.valid_refs),
        "invalid_refs": list(cites.invalid_refs),
        "substantive_sentences": cites.substantive,
        "cited_sentences": cites.cited,
        "coverage": cites.coverage,
        "coverage_computed": cites.coverage_computed,
        "scores_recorded": signals.scores_recorded,
        "rerank_top1": signals.rerank_top1,
        "crag_grade": signals.crag_grade,
        "crag_reason": None if signals.crag is None else signals.crag.reason,
        "confidence": signals.confidence,
        "band": signals.confidence_band,
        "needs_fallback": signals.needs_fallback,
        "low_confidence": signals.low_confidence,
        "ungrounded": signals.ungrounded,
        "numeric_grounding": signals.numeric.ratio,
        "unsupported_numbers": list(signals.numeric.unsupported),
        "cited_docs": list(signals.concentration.cited_docs),
        "citation_concentration": signals.concentration.ratio,
        "abstained": signals.abstained,
        "over_refusal": signals.over_refusal,
        "over_citation": signals.over_citation,
        "sentences": [
            {"text": s.text, "refs": list(s.refs), "substantive": s.substantive, "cited": s.cited}
            for s in cites.sentences
        ],
    }
