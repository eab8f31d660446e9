"""CRAG grade from retrieval scores (docs/signals.md#crag-grade)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from observer.model import Grade
from observer.signals import SignalParams
from observer.signals.crag import grade
from observer.signals.params import CragParams

from .conftest import signals_of

ANSWER = "Paris is the capital of France [1]."
HEURISTIC = SignalParams()
DISABLED = SignalParams(crag=CragParams(mode="disabled"))

# (id, rerank scores, params, grade) with the defaults high=0.65 low=0.25
# high_gap=0.15 low_avg_buffer=0.05: midpoint (high+low)/2 = 0.45, low mean <= 0.30.
GRADE_CASES = [
    # 1. no scores
    ("no_scores_unknown", [], HEURISTIC, None),
    # 2. clear cases, boundaries included
    ("top1_equals_high", [0.65], HEURISTIC, Grade.HIGH),
    ("top1_above_high", [0.9, 0.1], HEURISTIC, Grade.HIGH),
    ("top1_just_below_high_alone", [0.6499], HEURISTIC, Grade.AMBIGUOUS),
    ("top1_equals_low", [0.25], HEURISTIC, Grade.LOW),
    ("top1_equals_low_many", [0.25, 0.25, 0.2], HEURISTIC, Grade.LOW),
    ("top1_below_low", [0.1, 0.05], HEURISTIC, Grade.LOW),
    ("unsorted_scores", [0.1, 0.9], HEURISTIC, Grade.HIGH),
    # 4. gray zone, heuristic: clear winner
    ("gray_clear_winner", [0.5, 0.3], HEURISTIC, Grade.HIGH),
    ("gray_winner_at_both_boundaries", [0.45, 0.30], HEURISTIC, Grade.HIGH),
    ("gray_gap_exactly_high_gap", [0.6, 0.45], HEURISTIC, Grade.HIGH),
    ("gray_winner_unsorted", [0.3, 0.5], HEURISTIC, Grade.HIGH),
    ("gray_winner_beats_low_mean", [0.5, 0.1, 0.1, 0.1], HEURISTIC, Grade.HIGH),
    ("gray_gap_too_small", [0.5, 0.36], HEURISTIC, Grade.AMBIGUOUS),
    ("gray_top1_below_midpoint", [0.44, 0.2], HEURISTIC, Grade.AMBIGUOUS),
    ("gray_single_score_no_winner", [0.5], HEURISTIC, Grade.AMBIGUOUS),
    # 4. gray zone, heuristic: low mean
    ("gray_low_mean", [0.3, 0.28, 0.27], HEURISTIC, Grade.LOW),
    ("gray_mean_equals_low_plus_buffer", [0.35, 0.25], HEURISTIC, Grade.LOW),
    ("gray_mean_equals_boundary_two", [0.4, 0.2], HEURISTIC, Grade.LOW),
    ("gray_single_low_score", [0.26], HEURISTIC, Grade.LOW),
    ("gray_mean_just_above", [0.4, 0.22], HEURISTIC, Grade.AMBIGUOUS),
    ("gray_small_gap_low_tail", [0.5, 0.4, 0.1, 0.1, 0.05], HEURISTIC, Grade.LOW),
    # 3. gray zone, mode disabled
    ("disabled_gray_winner", [0.5, 0.3], DISABLED, Grade.AMBIGUOUS),
    ("disabled_gray_low_mean", [0.26], DISABLED, Grade.AMBIGUOUS),
    ("disabled_top1_equals_high", [0.65], DISABLED, Grade.HIGH),
    ("disabled_top1_equals_low", [0.25], DISABLED, Grade.LOW),
    ("disabled_no_scores_unknown", [], DISABLED, None),
    # thresholds are configuration
    (
        "custom_high_gray",
        [0.7],
        SignalParams(crag=CragParams(high=0.8, low=0.4)),
        Grade.AMBIGUOUS,
    ),
    ("custom_high_reached", [0.8], SignalParams(crag=CragParams(high=0.8, low=0.4)), Grade.HIGH),
    ("custom_low_reached", [0.4], SignalParams(crag=CragParams(high=0.8, low=0.4)), Grade.LOW),
]


@pytest.mark.parametrize(
    ("scores", "params", "expected"),
    [pytest.param(s, p, g, id=case_id) for case_id, s, p, g in GRADE_CASES],
)
def test_grade(scores: list[float], params: SignalParams, expected: Grade | None) -> None:
    signals = signals_of(ANSWER, rerank_scores=scores, params=params)
    assert signals.crag_grade == (expected.value if expected is not None else None)


def test_no_sources_is_no_evidence_and_sources_without_scores_no_grade() -> None:
    """docs/signals.md#unknown-is-not-zero: only an answer without any source is graded LOW
    for want of evidence; sources the trace recorded without scores leave it unknown."""
    crag = signals_of(ANSWER, (), rerank_scores=[]).crag
    assert crag is not None
    assert (crag.grade, crag.reason, crag.top1) == (Grade.LOW, "no_evidence", None)
    assert signals_of(ANSWER, rerank_scores=[]).crag is None


# (id, source scores, rerank scores, grade)
SCORE_SOURCE_CASES = [
    ("rerank_wins_over_source_scores", [0.9, 0.9, 0.9], [0.1], Grade.LOW),
    ("rerank_high_over_low_sources", [0.1, 0.1, 0.1], [0.9], Grade.HIGH),
    ("source_scores_when_rerank_null", [0.9, 0.2, 0.1], None, Grade.HIGH),
    ("empty_rerank_means_none_given", [0.9, 0.9, 0.9], [], Grade.HIGH),
    ("null_source_scores_ignored", [None, 0.7, None], None, Grade.HIGH),
    ("all_source_scores_null_unknown", [None, None, None], None, None),
    # A null read as 0.0 would make 0.5 a clear winner (HIGH); ignored, 0.5 stands alone.
    ("null_not_read_as_zero", [0.5, None, None], None, Grade.AMBIGUOUS),
]


@pytest.mark.parametrize(
    ("source_scores", "rerank", "expected"),
    [pytest.param(s, r, g, id=case_id) for case_id, s, r, g in SCORE_SOURCE_CASES],
)
def test_which_scores(
    source_scores: list[float | None], rerank: list[float] | None, expected: Grade | None
) -> None:
    texts = ["Source a.", "Source b.", "Source c."]
    signals = signals_of(ANSWER, texts, source_scores, rerank_scores=rerank)
    assert signals.crag_grade == (expected.value if expected is not None else None)


@pytest.mark.parametrize(
    "scores",
    [
        pytest.param(["0.9"], id="string_score"),
        pytest.param([object()], id="object_score"),
    ],
)
def test_error_while_grading_is_ambiguous(scores: Sequence[object]) -> None:
    result = grade(scores, CragParams())  # type: ignore[arg-type]
    assert result.grade is Grade.AMBIGUOUS


@pytest.mark.parametrize(
    ("app_grade", "scores", "mismatch"),
    [
        pytest.param("HIGH", [0.9], False, id="same"),
        pytest.param("LOW", [0.9], True, id="app_low_observer_high"),
        pytest.param("AMBIGUOUS", [0.1], True, id="app_ambiguous_observer_low"),
        pytest.param(None, [0.9], None, id="no_app_grade"),
    ],
)
def test_app_grade_mismatch(
    app_grade: str | None, scores: list[float], mismatch: bool | None
) -> None:
    signals = signals_of(ANSWER, rerank_scores=scores, app_crag_grade=app_grade)
    assert signals.crag_mismatch is mismatch
