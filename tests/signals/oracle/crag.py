"""CRAG retrieval grade from rerank scores (docs/signals.md#crag-grade)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from observer.model import CragResult, Grade
from observer.signals.params import CragParams

# Thresholds are compared with this slack so a gap that reads 0.15 counts as 0.15.
_EPS = 1e-9


def grade(scores: Sequence[float], params: CragParams) -> CragResult:
    """Grade retrieval from its scores; any failure grades AMBIGUOUS."""
    try:
        return _grade(scores, params)
    except Exception:  # a grade must never block scoring
        return CragResult(Grade.AMBIGUOUS, "error", None)


def _grade(scores: Sequence[float], params: CragParams) -> CragResult:
    ranked = sorted((s for s in scores if math.isfinite(s)), reverse=True)
    if not ranked:
        return CragResult(Grade.LOW, "no_evidence", None)
    top1 = ranked[0]
    if top1 >= params.high - _EPS:
        return CragResult(Grade.HIGH, "top1_high", top1)
    if top1 <= params.low + _EPS:
        return CragResult(Grade.LOW, "top1_low", top1)
    if params.mode == "disabled":
        return CragResult(Grade.AMBIGUOUS, "gray_zone", top1)
    if (
        len(ranked) >= 2
        and top1 >= (params.high + params.low) / 2 - _EPS
        and top1 - ranked[1] >= params.high_gap - _EPS
    ):
        return CragResult(Grade.HIGH, "gray_clear_winner", top1)
    if sum(ranked) / len(ranked) <= params.low + params.low_avg_buffer + _EPS:
        return CragResult(Grade.LOW, "gray_low_mean", top1)
    return CragResult(Grade.AMBIGUOUS, "gray_zone", top1)
