"""Confidence, band and ungrounded (docs/signals.md)."""

from __future__ import annotations

import pytest

from observer.model import Band, Grade
from observer.signals import SignalParams
from observer.signals.params import CragParams

from .conftest import PLAIN_SOURCES, signals_of

CITED = "Paris is the capital of France [1]."  # coverage 1.0
HALF_CITED = "Paris is the capital of France [1]. Lyon is a large city."  # coverage 0.5
UNCITED = "Paris is the capital of France."  # coverage 0.0
NOTHING_SUBSTANTIVE = "Ok."  # coverage not computed


@pytest.mark.parametrize(
    ("scores", "top1"),
    [
        pytest.param([0.7], 0.7, id="in_range"),
        pytest.param([0.2, 0.9, 0.4], 0.9, id="highest_score"),
        pytest.param([1.7], 1.0, id="clamped_high"),
        pytest.param([-0.3], 0.0, id="clamped_low"),
        pytest.param([], None, id="no_scores_unknown"),
    ],
)
def test_rerank_top1(scores: list[float], top1: float | None) -> None:
    found = signals_of(CITED, rerank_scores=scores).rerank_top1
    assert found == (pytest.approx(top1) if top1 is not None else None)


def test_rerank_top1_is_zero_only_without_sources() -> None:
    """No evidence at all: the worst value, known (docs/signals.md#unknown-is-not-zero)."""
    assert signals_of(CITED, ()).rerank_top1 == 0.0
    assert signals_of(CITED, PLAIN_SOURCES).rerank_top1 is None


def test_rerank_top1_from_source_scores() -> None:
    signals = signals_of(CITED, PLAIN_SOURCES, [0.3, None, 0.8])
    assert signals.rerank_top1 == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("flag", "sources", "expected"),
    [
        pytest.param(True, PLAIN_SOURCES, True, id="flag_true_with_sources"),
        pytest.param(False, (), False, id="flag_false_without_sources"),
        pytest.param(None, (), True, id="derived_no_sources"),
        pytest.param(None, PLAIN_SOURCES, False, id="derived_with_sources"),
    ],
)
def test_needs_fallback(flag: bool | None, sources: tuple[str, ...], expected: bool) -> None:
    signals = signals_of(CITED, sources, rerank_scores=[0.9], needs_fallback=flag)
    assert signals.needs_fallback is expected


# (id, flag, rerank scores, sources, needs_fallback flag, expected low_confidence)
LOW_CONFIDENCE_CASES = [
    ("flag_false_beats_low_grade", False, [0.1], PLAIN_SOURCES, None, False),
    ("flag_true_beats_high_grade", True, [0.9], PLAIN_SOURCES, None, True),
    ("derived_low_grade", None, [0.1], PLAIN_SOURCES, None, True),
    ("derived_no_scores_unknown", None, [], PLAIN_SOURCES, None, None),
    ("derived_no_sources_is_a_fallback", None, [], (), None, False),
    ("derived_low_but_fallback_no_sources", None, [0.1], (), None, False),
    ("derived_low_but_fallback_flag", None, [0.1], PLAIN_SOURCES, True, False),
    ("derived_high_grade", None, [0.9], PLAIN_SOURCES, None, False),
    ("derived_ambiguous_grade", None, [0.5], PLAIN_SOURCES, None, False),
]


@pytest.mark.parametrize(
    ("flag", "scores", "sources", "fallback", "expected"),
    [
        pytest.param(f, s, src, fb, e, id=case_id)
        for case_id, f, s, src, fb, e in LOW_CONFIDENCE_CASES
    ],
)
def test_low_confidence(
    flag: bool | None,
    scores: list[float],
    sources: tuple[str, ...],
    fallback: bool | None,
    expected: bool | None,
) -> None:
    signals = signals_of(
        CITED, sources, rerank_scores=scores, low_confidence=flag, needs_fallback=fallback
    )
    assert signals.low_confidence is expected


@pytest.mark.parametrize(
    ("answer", "scores", "confidence"),
    [
        pytest.param(CITED, [0.8], 0.8, id="full_coverage"),
        pytest.param(HALF_CITED, [0.9], 0.45, id="half_coverage"),
        pytest.param(UNCITED, [0.9], 0.0, id="zero_coverage"),
        pytest.param(NOTHING_SUBSTANTIVE, [0.8], 0.8, id="coverage_not_computed"),
        pytest.param(HALF_CITED, [1.6], 0.5, id="top1_clamped"),
        pytest.param(CITED, [], None, id="no_scores_unknown"),
        pytest.param(NOTHING_SUBSTANTIVE, [], None, id="nothing_at_all_unknown"),
    ],
)
def test_confidence(answer: str, scores: list[float], confidence: float | None) -> None:
    found = signals_of(answer, rerank_scores=scores).confidence
    assert found == (pytest.approx(confidence) if confidence is not None else None)


@pytest.mark.parametrize(
    ("sources", "low_confidence", "needs_fallback", "band"),
    [
        pytest.param(PLAIN_SOURCES, None, None, None, id="unknown"),
        pytest.param(PLAIN_SOURCES, True, None, Band.LOW, id="the_apps_low_confidence_flag"),
        pytest.param(PLAIN_SOURCES, False, None, None, id="the_apps_flag_false_still_unknown"),
        pytest.param(PLAIN_SOURCES, None, True, Band.LOW, id="the_apps_fallback_flag"),
        pytest.param((), None, None, Band.LOW, id="no_sources_no_evidence"),
    ],
)
def test_without_retrieval_scores_the_band_is_the_apps_flags_or_unknown(
    sources: tuple[str, ...],
    low_confidence: bool | None,
    needs_fallback: bool | None,
    band: Band | None,
) -> None:
    signals = signals_of(
        CITED, sources, low_confidence=low_confidence, needs_fallback=needs_fallback
    )
    assert signals.band is band
    assert signals.scores_recorded is (not sources)


# A grade LOW with a high top1: the mean of the scores is low (0.4875 <= 0.75).
_STRICT_CRAG = SignalParams(crag=CragParams(high=0.95, low=0.7))

# (id, answer, rerank scores, needs_fallback, low_confidence, params, band)
BAND_CASES = [
    ("high_at_threshold", CITED, [0.85], None, None, SignalParams(), Band.HIGH),
    ("high_full", CITED, [1.0], None, None, SignalParams(), Band.HIGH),
    ("medium_just_below_high", CITED, [0.8499], None, None, SignalParams(), Band.MEDIUM),
    ("medium_at_threshold", CITED, [0.60], None, None, SignalParams(), Band.MEDIUM),
    ("low_just_below_medium", CITED, [0.5999], None, None, SignalParams(), Band.LOW),
    ("low_by_coverage", HALF_CITED, [1.0], None, None, SignalParams(), Band.LOW),
    ("high_without_coverage", NOTHING_SUBSTANTIVE, [0.9], None, None, SignalParams(), Band.HIGH),
    ("forced_by_fallback_flag", CITED, [1.0], True, None, SignalParams(), Band.LOW),
    ("forced_by_low_confidence_flag", CITED, [1.0], None, True, SignalParams(), Band.LOW),
    (
        "forced_by_derived_low_grade",
        CITED,
        [0.9, 0.85, 0.1, 0.1],
        None,
        None,
        _STRICT_CRAG,
        Band.LOW,
    ),
    (
        "flag_false_overrides_low_grade",
        CITED,
        [0.9, 0.85, 0.1, 0.1],
        None,
        False,
        _STRICT_CRAG,
        Band.HIGH,
    ),
]


@pytest.mark.parametrize(
    ("answer", "scores", "fallback", "low", "params", "band"),
    [pytest.param(a, s, f, lo, p, b, id=case_id) for case_id, a, s, f, lo, p, b in BAND_CASES],
)
def test_band(
    answer: str,
    scores: list[float],
    fallback: bool | None,
    low: bool | None,
    params: SignalParams,
    band: Band,
) -> None:
    signals = signals_of(
        answer, rerank_scores=scores, needs_fallback=fallback, low_confidence=low, params=params
    )
    assert signals.band is band


def test_forced_band_keeps_confidence() -> None:
    # A forced LOW band does not rewrite the confidence number itself.
    signals = signals_of(CITED, rerank_scores=[0.9, 0.85, 0.1, 0.1], params=_STRICT_CRAG)
    assert signals.crag.grade is Grade.LOW
    assert signals.confidence == pytest.approx(0.9)
    assert signals.band is Band.LOW


# (id, answer, rerank scores, sources, needs_fallback flag, ungrounded)
UNGROUNDED_CASES = [
    ("all_conditions", UNCITED, [0.1], PLAIN_SOURCES, None, True),
    ("no_scores_unknown", UNCITED, [], PLAIN_SOURCES, None, None),
    ("no_scores_but_the_apps_fallback_flag", UNCITED, [], PLAIN_SOURCES, True, False),
    ("no_sources_is_a_fallback", UNCITED, [], (), None, False),
    ("fallback_flag", UNCITED, [0.1], PLAIN_SOURCES, True, False),
    ("fallback_derived_no_sources", UNCITED, [0.1], (), None, False),
    ("grade_high", UNCITED, [0.9], PLAIN_SOURCES, None, False),
    ("grade_ambiguous", UNCITED, [0.5], PLAIN_SOURCES, None, False),
    ("coverage_not_computed", NOTHING_SUBSTANTIVE, [0.1], PLAIN_SOURCES, None, False),
    ("some_coverage", HALF_CITED, [0.1], PLAIN_SOURCES, None, False),
    ("full_coverage", CITED, [0.1], PLAIN_SOURCES, None, False),
    (
        "ghost_citations_only",
        "Paris is the capital of France [9].",
        [0.1],
        PLAIN_SOURCES,
        None,
        True,
    ),
]


@pytest.mark.parametrize(
    ("answer", "scores", "sources", "fallback", "ungrounded"),
    [pytest.param(a, s, src, f, u, id=case_id) for case_id, a, s, src, f, u in UNGROUNDED_CASES],
)
def test_ungrounded(
    answer: str,
    scores: list[float],
    sources: tuple[str, ...],
    fallback: bool | None,
    ungrounded: bool | None,
) -> None:
    signals = signals_of(answer, sources, rerank_scores=scores, needs_fallback=fallback)
    assert signals.ungrounded is ungrounded


def test_ungrounded_ignores_low_confidence_flag() -> None:
    signals = signals_of(UNCITED, rerank_scores=[0.1], low_confidence=False)
    assert signals.ungrounded is True
