"""Refusals, over-refusal and over-citation (docs/signals.md#abstention-and-over-citation)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.signals import SignalParams
from observer.signals.abstention import REFUSAL_MAX_CHARS, normalise, refusal_phrase
from observer.signals.params import DEFAULT_REFUSAL_PHRASES

from .conftest import n_sources, signals_of

DOC = Path(__file__).resolve().parents[2] / "docs" / "signals.md"
PHRASES = DEFAULT_REFUSAL_PHRASES


# -- normalisation and phrases --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("I don't know.", "i dont know"),
        ("I DON’T   KNOW!!", "i dont know"),
        ("Ｉ ＤＯＮ’Ｔ ＫＮＯＷ．", "i dont know"),  # full width
        ("知识库 未匹配。", "知识库未匹配"),
        ("抱歉，知识库中没有找到相关信息。", "抱歉知识库中没有找到相关信息"),
        ("No_information -- here", "no information here"),
        ("no\tinformation\n[1]", "no information 1"),
    ],
)
def test_normalise(text: str, normalised: str) -> None:
    assert normalise(text) == normalised


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("I dont know", "i dont know"),
        ("Sorry — I could not find that.", "i could not find"),
        ("There is no information on it.", "no information"),
        ("很抱歉，知识库未匹配到您的问题。", "知识库未匹配"),
        ("我们没有找到足够的证据", "没有找到足够的证据"),
        # whole words at an ASCII end
        ("no informational value", None),
        ("Lino information desk", None),
        ("I don't knowingly share data", None),
        ("The docs are clear.", None),
    ],
)
def test_refusal_phrase_found(text: str, found: str | None) -> None:
    assert refusal_phrase(text, PHRASES) == found


def test_no_phrases_finds_nothing() -> None:
    assert refusal_phrase("I don't know.", ()) is None
    assert not signals_of("I don't know.", params=SignalParams(refusal_phrases=())).abstained


def test_configured_phrases_replace_the_defaults() -> None:
    params = SignalParams(refusal_phrases=("Beats me",))
    assert signals_of("BEATS ME, honestly.", params=params).abstained
    assert not signals_of("I don't know.", params=params).abstained


# -- the rule: cites nothing, short, opens with the refusal ----------------------------

FILLER = "The token is rotated from the settings page by an admin. "


@pytest.mark.parametrize(
    ("answer", "abstained"),
    [
        pytest.param("I don't know.", True, id="bare"),
        pytest.param("No info.", False, id="not_a_phrase"),
        pytest.param("I couldn't find this. Please contact support.", True, id="with_pointer"),
        pytest.param("Hi! I couldn't find this in the docs.", True, id="greeting_first"),
        pytest.param("抱歉，知识库中没有找到相关信息。建议直接咨询行政部同事。", True, id="zh"),
        pytest.param("您好！知识库未匹配到您的问题。", True, id="zh_greeting"),
        pytest.param("I don't know [1].", False, id="cites_a_source"),
        # false positives the rule keeps out
        pytest.param("Rotate it in Settings [1]. I don't know of another way.", False, id="cited"),
        pytest.param(
            "Tokens last a day. I don't know whether that can change.", False, id="substance_first"
        ),
        pytest.param("I don't know, but " + FILLER * 8, False, id="long"),
        pytest.param(
            "The FAQ says there is no information about it [1].", False, id="cited_phrase"
        ),
        pytest.param("Yes.", False, id="short_answer"),
        pytest.param("", False, id="empty"),
        pytest.param("```\nI don't know\n```\nRun the script.", False, id="phrase_in_code"),
    ],
)
def test_abstained(answer: str, abstained: bool) -> None:
    assert signals_of(answer).abstained is abstained


def test_the_length_bound_is_inclusive() -> None:
    head = "I don't know."
    fits = head + " " + "x" * (REFUSAL_MAX_CHARS - len(head.replace(" ", "")))  # whitespace aside
    assert signals_of(fits).abstained
    assert not signals_of(fits + "x").abstained


def test_a_refusal_has_no_coverage_no_grounding_and_is_never_ungrounded() -> None:
    signals = signals_of("I don't know the 2024 figure.", rerank_scores=[0.1])
    assert signals.abstained
    assert signals.citations.coverage is None and not signals.citations.coverage_computed
    assert signals.numeric.ratio is None
    assert signals.confidence == pytest.approx(0.1)  # rerank_top1, coverage not computed
    assert not signals.ungrounded  # the same answer without the phrase is ungrounded
    assert signals_of("We know the 2024 figure.", rerank_scores=[0.1]).ungrounded


@pytest.mark.parametrize(
    ("scores", "over_refusal"),
    [
        pytest.param([0.9], True, id="high"),
        pytest.param([0.65], True, id="at_crag_high"),
        pytest.param([0.5, 0.3], False, id="high_by_clear_winner_below_crag_high"),
        pytest.param([0.5], False, id="ambiguous"),
        pytest.param([0.1], False, id="low"),
        pytest.param([], None, id="no_scores"),
    ],
)
def test_over_refusal(scores: list[float], over_refusal: bool | None) -> None:
    assert signals_of("I don't know.", rerank_scores=scores).over_refusal is over_refusal


def test_an_answer_that_is_no_refusal_is_no_over_refusal() -> None:
    assert (
        signals_of("Tokens are rotated in Settings [1].", rerank_scores=[0.9]).over_refusal is False
    )
    assert signals_of("Tokens are rotated in Settings [1].").over_refusal is None


@pytest.mark.parametrize(
    ("answer", "limit", "count"),
    [
        ("One fact here [1][2][3].", 3, 0),
        ("One fact here [1][2][3][4].", 3, 1),
        ("One fact here [1-5]. Two facts here [1,2,3,4].", 3, 2),
        ("One fact here [1][1][1][2].", 3, 0),
        ("Ghosts count too [1][2][8][9].", 3, 1),
        ("Ok [1][2][3][4].", 3, 1),  # not substantive, still over-cited
        ("One fact here [1][2].", 1, 1),
    ],
)
def test_over_citation(answer: str, limit: int, count: int) -> None:
    params = SignalParams(max_refs_per_sentence=limit)
    assert signals_of(answer, n_sources(5), params=params).over_citation == count


# -- the hand cases of docs/signals.md -------------------------------------------------


def hand_cases() -> list[tuple[str, int, list[float] | None, list[str]]]:
    """(answer, sources, scores, expected columns) of the section's example table."""
    section = DOC.read_text().split("## Abstention and over-citation", 1)[1]
    rows = re.findall(r"^\| `(.+?)` \| (\d+) \| (.+?) \| (.+) \|$", section, re.M)
    assert len(rows) >= 10, "the examples table of docs/signals.md is gone"
    cases = []
    for answer, sources, scores, rest in rows:
        expected = [cell.strip().strip("*") for cell in rest.split("|")]
        cases.append(
            (
                answer,
                int(sources),
                None if scores == "–" else json.loads(scores.strip("`")),
                expected,
            )
        )
    return cases


@pytest.mark.parametrize(("answer", "sources", "scores", "expected"), hand_cases())
def test_the_documented_examples(
    answer: str, sources: int, scores: list[float] | None, expected: list[str]
) -> None:
    srcs = n_sources(sources)
    signals = signals_of(answer, srcs, scores if scores is not None else [None] * sources)
    coverage = signals.citations.coverage
    got = [
        json.dumps(signals.abstained),
        json.dumps(signals.over_refusal),
        str(signals.over_citation),
        "null" if coverage is None else f"{coverage:.1f}",
        json.dumps(signals.ungrounded),
    ]
    assert got == expected


# -- properties --------------------------------------------------------------------------

_WORDS = st.sampled_from(
    [
        "tokens",
        "rotate",
        "settings",
        "admin",
        "workspace",
        "keeps",
        "working",
        "hours",
        "的",
        "工牌",
    ]
)
_CITED = st.tuples(st.lists(_WORDS, min_size=3, max_size=12).map(" ".join), st.integers(1, 3)).map(
    lambda sentence: f"{sentence[0].capitalize()} here [{sentence[1]}]."
)
_REFUSALS = st.sampled_from(PHRASES).map(lambda p: f" {p.capitalize()}.")


@given(st.lists(_CITED, min_size=1, max_size=8).map(" ".join), _REFUSALS, st.booleans())
def test_a_phrase_never_makes_a_cited_answer_a_refusal(
    answer: str, phrase: str, first: bool
) -> None:
    """Appended or put first, a refusal phrase leaves a cited answer an answer."""
    assert not signals_of(answer).abstained
    assert not signals_of(answer + phrase if not first else phrase + " " + answer).abstained


@given(_REFUSALS, st.lists(_WORDS, max_size=40).map(" ".join), st.sampled_from([[], [0.9], [0.2]]))
def test_a_refusal_is_never_ungrounded_nor_covered(
    phrase: str, tail: str, scores: list[float]
) -> None:
    signals = signals_of(phrase + " " + tail, rerank_scores=scores)
    if signals.abstained:
        assert signals.citations.coverage is None and not signals.ungrounded
        assert signals.over_refusal is (None if not scores else scores[0] >= 0.65)
    else:
        assert signals.over_refusal is (None if not scores else False)


@given(st.text(max_size=60), st.integers(1, 6))
def test_over_citation_is_bounded_by_the_sentences(answer: str, limit: int) -> None:
    signals = signals_of(answer, params=SignalParams(max_refs_per_sentence=limit))
    assert 0 <= signals.over_citation <= len(signals.citations.sentences)
