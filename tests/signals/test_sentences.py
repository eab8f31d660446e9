"""Sentences, substantive sentences and citation coverage (docs/signals.md)."""

from __future__ import annotations

import pytest

from observer.signals import SignalParams
from observer.signals.params import DEFAULT_ABBREVIATIONS

from .conftest import sentence_texts, signals_of

# --- steps 1-3: what the answer is split into --------------------------------

# (id, answer, the sentences a user sees)
SPLIT_CASES = [
    # 1. fenced code removed, lines split
    (
        "fenced_code_removed",
        "Intro sentence is here.\n```\ncode line one. More code!\n```\nOutro sentence is here.",
        ["Intro sentence is here.", "Outro sentence is here."],
    ),
    (
        "lines_split",
        "First line has no stop\nSecond line has none",
        ["First line has no stop", "Second line has none"],
    ),
    # 2. leading structure stripped
    ("heading", "## Setup guide for users", ["Setup guide for users"]),
    ("quote", "> Quoted text is here.", ["Quoted text is here."]),
    ("bullet_dash", "- Bullet item is here", ["Bullet item is here"]),
    ("bullet_star", "* Bullet item is here", ["Bullet item is here"]),
    ("bullet_plus", "+ Bullet item is here", ["Bullet item is here"]),
    ("ordered_dot", "1. First step is here", ["First step is here"]),
    ("ordered_paren", "2) Second step is here", ["Second step is here"]),
    ("ordered_two_digits", "12. Twelfth step is here", ["Twelfth step is here"]),
    ("quoted_bullet", "> - Quoted bullet is here", ["Quoted bullet is here"]),
    # 3. terminators
    ("cjk_full_stop", "第一句话在这里。第二句话在这里。", ["第一句话在这里。", "第二句话在这里。"]),
    ("cjk_exclamation", "First part is here！Second part", ["First part is here！", "Second part"]),
    ("cjk_question", "First part is here？Second part", ["First part is here？", "Second part"]),
    ("exclamation", "First part is here!Second part", ["First part is here!", "Second part"]),
    ("question", "First part is here?Second part", ["First part is here?", "Second part"]),
    ("cjk_semicolon", "First part is here；Second part", ["First part is here；", "Second part"]),
    ("semicolon", "First part is here;Second part", ["First part is here;", "Second part"]),
    ("ellipsis", "First part is here…Second part", ["First part is here…", "Second part"]),
    (
        "dot_before_space",
        "One fact is here. Two fact is here.",
        ["One fact is here.", "Two fact is here."],
    ),
    (
        "dot_before_marker",
        "One fact is here.[1] Two fact is here.",
        ["One fact is here.[1]", "Two fact is here."],
    ),
    ("decimal_not_split", "The ratio is 3.5 times higher.", ["The ratio is 3.5 times higher."]),
    (
        "filename_not_split",
        "Check error.log for the details.",
        ["Check error.log for the details."],
    ),
    ("domain_not_split", "Visit example.com for more help.", ["Visit example.com for more help."]),
    ("terminator_run", "Is it real?! Yes it is real.", ["Is it real?!", "Yes it is real."]),
    # 3. abbreviations
    ("abbr_st", "He moved to St. Louis last year.", ["He moved to St. Louis last year."]),
    ("abbr_initials", "J. K. Rowling wrote the books.", ["J. K. Rowling wrote the books."]),
    ("abbr_us", "The U.S. team won the gold medal.", ["The U.S. team won the gold medal."]),
    ("abbr_dr", "Dr. Smith agreed with the plan.", ["Dr. Smith agreed with the plan."]),
    ("abbr_eg", "Use tools, e.g. hammers and saws.", ["Use tools, e.g. hammers and saws."]),
    ("abbr_ie", "Use the default, i.e. the first one.", ["Use the default, i.e. the first one."]),
    (
        "abbr_after_bracket",
        "Ask them (Dr. Smith agreed) first.",
        ["Ask them (Dr. Smith agreed) first."],
    ),
    ("abbr_after_quote", '"Mr. Brown is here," she said.', ['"Mr. Brown is here," she said.']),
    (
        "abbr_then_real_end",
        "I met Dr. Who today. He was nice.",
        ["I met Dr. Who today.", "He was nice."],
    ),
    ("abbr_case_sensitive", "We will visit st. louis soon.", ["We will visit st.", "louis soon."]),
    ("not_an_abbreviation", "It was done. Then we left.", ["It was done.", "Then we left."]),
    # 3. markers after the terminator belong to the sentence before it
    (
        "cjk_marker_after_stop",
        "结论是这样的没有问题。[1]其他内容也在这里。",
        ["结论是这样的没有问题。[1]", "其他内容也在这里。"],
    ),
    (
        "marker_glued_to_dot",
        "Fact is stated here.[1] Another fact here.",
        ["Fact is stated here.[1]", "Another fact here."],
    ),
    (
        "markers_after_space",
        "Fact is stated here. [1][2] Another fact here.",
        ["Fact is stated here. [1][2]", "Another fact here."],
    ),
    (
        "markers_then_dot",
        "Dead men tell no tales. [1][2]. Another fact here.",
        ["Dead men tell no tales. [1][2].", "Another fact here."],
    ),
    (
        "fullwidth_marker_after_stop",
        "结论是这样的没有问题。【2】其他内容也在这里。",
        ["结论是这样的没有问题。【2】", "其他内容也在这里。"],
    ),
    # 3. closing quotes and brackets after a terminator
    (
        "closer_double_quote",
        'He said "it is true." Then he left.',
        ['He said "it is true."', "Then he left."],
    ),
    (
        "closer_single_quote",
        "He said 'it is true.' Then he left.",
        ["He said 'it is true.'", "Then he left."],
    ),
    (
        "closer_curly_double",
        "He said “it is true.” Then he left.",
        ["He said “it is true.”", "Then he left."],
    ),
    (
        "closer_curly_single",
        "He said ‘it is true.’ Then he left.",
        ["He said ‘it is true.’", "Then he left."],
    ),
    (
        "closer_paren",
        "It was done (mostly right.) Then we left.",
        ["It was done (mostly right.)", "Then we left."],
    ),
    (
        "closer_corner",
        "他说「这是真的呀。」然后他走了出去。",
        ["他说「这是真的呀。」", "然后他走了出去。"],
    ),
    (
        "closer_white_corner",
        "他说『这是真的呀。』然后他走了出去。",
        ["他说『这是真的呀。』", "然后他走了出去。"],
    ),
    (
        "closer_fullwidth_paren",
        "他说（这是真的呀。）然后他走了出去。",
        ["他说（这是真的呀。）", "然后他走了出去。"],
    ),
    (
        "closer_then_marker",
        'He said "it is true." [1] Then he left.',
        ['He said "it is true." [1]', "Then he left."],
    ),
]


@pytest.mark.parametrize(
    ("answer", "expected"), [pytest.param(a, e, id=case_id) for case_id, a, e in SPLIT_CASES]
)
def test_split(answer: str, expected: list[str]) -> None:
    assert sentence_texts(signals_of(answer)) == expected


def test_table_row_pipes_stripped() -> None:
    (text,) = sentence_texts(signals_of("| Paris | capital of France [1] |"))
    assert text.startswith("Paris")


def test_markers_after_terminator_cite_the_sentence_before() -> None:
    cites = signals_of("Fact is stated here. [1][2] Another fact here.").citations
    assert [s.refs for s in cites.sentences] == [(1, 2), ()]
    assert [s.cited for s in cites.sentences] == [True, False]


@pytest.mark.parametrize(
    ("answer", "abbreviations", "expected"),
    [
        pytest.param(
            "The Ref. team won today.",
            frozenset(DEFAULT_ABBREVIATIONS),
            ["The Ref.", "team won today."],
            id="unknown_word_splits",
        ),
        pytest.param(
            "The Ref. team won today.",
            frozenset(DEFAULT_ABBREVIATIONS) | {"Ref"},
            ["The Ref. team won today."],
            id="added_abbreviation",
        ),
        pytest.param(
            "Dr. Smith agreed with the plan.",
            frozenset(),
            ["Dr.", "Smith agreed with the plan."],
            id="emptied_list",
        ),
        pytest.param(
            "J. K. Rowling wrote the books.",
            frozenset(),
            ["J. K. Rowling wrote the books."],
            id="initials_need_no_list",
        ),
    ],
)
def test_abbreviations_configurable(
    answer: str, abbreviations: frozenset[str], expected: list[str]
) -> None:
    params = SignalParams(abbreviations=abbreviations)
    assert sentence_texts(signals_of(answer, params=params)) == expected


# --- step 4: substantive sentences -------------------------------------------

# (id, one-sentence answer, substantive with the default parameters)
SUBSTANTIVE_CASES = [
    ("seven_chars", "Abcdefg", False),
    ("eight_chars", "Abcdefgh", True),
    ("punctuation_counts", "Abcdefg.", True),
    ("whitespace_not_counted", "a b c d e f g", False),
    ("bold_not_counted", "**Abcdefg**", False),
    ("underscores_not_counted", "__Abcdefg__", False),
    ("backticks_not_counted", "`Abcdefg`", False),
    ("strikethrough_not_counted", "~~Abcdefg~~", False),
    ("markers_not_counted", "Abcdefg [1][2][3]", False),
    ("cjk_seven", "这是七个字的句", False),
    ("cjk_eight", "这是八个字的句子", True),
    ("pleasantry_hope_this_helps", "Hope this helps you with the setup!", False),
    ("pleasantry_upper_case", "HOPE THIS HELPS you with the setup!", False),
    ("pleasantry_let_me_know", "Let me know if you need anything else.", False),
    ("pleasantry_feel_free", "Feel free to ask more questions.", False),
    ("pleasantry_zh_helpful", "希望对你有帮助，祝你一切顺利。", False),
    ("pleasantry_zh_above", "希望以上内容能够帮到你。", False),
    ("pleasantry_zh_other_questions", "如有其他问题请随时联系我们。", False),
    ("pleasantry_zh_if_more", "如果还有疑问请随时告诉我们。", False),
    ("pleasantry_after_markdown", "**Hope this helps** with your setup.", False),
    ("pleasantry_after_marker", "[1] Hope this helps with your setup.", False),
    ("pleasantry_not_at_start", "I hope this helps with your setup.", True),
]


@pytest.mark.parametrize(
    ("answer", "substantive"),
    [pytest.param(a, s, id=case_id) for case_id, a, s in SUBSTANTIVE_CASES],
)
def test_substantive(answer: str, substantive: bool) -> None:
    (sentence,) = signals_of(answer).citations.sentences
    assert sentence.substantive is substantive


@pytest.mark.parametrize(
    ("answer", "params", "substantive"),
    [
        pytest.param("Yes, ok.", SignalParams(), False, id="default_min_chars"),
        pytest.param("Yes, ok.", SignalParams(min_chars=5), True, id="lower_min_chars"),
        pytest.param("Abcdefgh", SignalParams(min_chars=9), False, id="higher_min_chars"),
        pytest.param(
            "Thanks for asking about the setup.",
            SignalParams(pleasantry_prefixes=("thanks for asking",)),
            False,
            id="custom_pleasantry",
        ),
        pytest.param(
            "THANKS FOR ASKING about the setup.",
            SignalParams(pleasantry_prefixes=("thanks for asking",)),
            False,
            id="custom_pleasantry_any_case",
        ),
        pytest.param(
            "Hope this helps you with the setup!",
            SignalParams(pleasantry_prefixes=("thanks for asking",)),
            True,
            id="custom_list_replaces_defaults",
        ),
    ],
)
def test_substantive_configurable(answer: str, params: SignalParams, substantive: bool) -> None:
    (sentence,) = signals_of(answer, params=params).citations.sentences
    assert sentence.substantive is substantive


# --- steps 5-6: cited sentences and coverage ---------------------------------

# (id, answer, cited, substantive, coverage) with three sources
COVERAGE_CASES = [
    ("all_cited", "Fact one is here [1]. Fact two is here [2].", 2, 2, 1.0),
    ("half_cited", "Fact one is here [1]. Fact two is here.", 1, 2, 0.5),
    ("third_cited", "Fact one is here [1]. Fact two is here. Fact three is here.", 1, 3, 1 / 3),
    ("none_cited", "Fact one is here. Fact two is here.", 0, 2, 0.0),
    ("ghost_only_not_cited", "Fact one is here [7].", 0, 1, 0.0),
    ("zero_not_cited", "Fact one is here [0].", 0, 1, 0.0),
    ("one_valid_among_ghosts", "Fact one is here [7][2][0].", 1, 1, 1.0),
    ("short_cited_not_counted", "Yes [1]. Fact two is here without a cite.", 0, 1, 0.0),
    ("pleasantry_not_counted", "Fact one is here [1]. Hope this helps you [2]!", 1, 1, 1.0),
    ("marker_in_code_not_cited", "Use `rows[1]` for the first row.", 0, 1, 0.0),
    ("cjk_cited", "巴黎是法国的首都城市[1]。里昂是法国的第三大城市。", 1, 2, 0.5),
]


@pytest.mark.parametrize(
    ("answer", "cited", "substantive", "coverage"),
    [pytest.param(a, c, s, v, id=case_id) for case_id, a, c, s, v in COVERAGE_CASES],
)
def test_coverage(answer: str, cited: int, substantive: int, coverage: float) -> None:
    cites = signals_of(answer).citations
    assert (cites.cited, cites.substantive) == (cited, substantive)
    assert cites.coverage == pytest.approx(coverage)
    assert cites.coverage_computed


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param("", id="empty"),
        pytest.param("Ok [1].", id="short_only"),
        pytest.param("Hope this helps you a lot!", id="pleasantry_only"),
        pytest.param("```\nprint('a long line of code here [1]')\n```", id="code_only"),
        pytest.param("# Title\n\n---\n", id="markdown_only"),
    ],
)
def test_coverage_not_computed_without_substantive(answer: str) -> None:
    cites = signals_of(answer).citations
    assert cites.substantive == 0
    assert cites.coverage is None
    assert not cites.coverage_computed


def test_fence_inside_list_item_removed() -> None:
    # CommonMark (markdown-it) renders the indented ``` block as a fence in item 1.
    answer = (
        "1. Install the package first:\n    ```bash\n    pip install foo\n    ```\n"
        "2. Then run it now."
    )
    assert sentence_texts(signals_of(answer)) == ["Install the package first:", "Then run it now."]


def test_fence_inside_quote_removed() -> None:
    answer = "> Quoted intro is here.\n> ```\n> print('hello world')\n> ```\n> Quoted outro."
    assert sentence_texts(signals_of(answer)) == ["Quoted intro is here.", "Quoted outro."]


@pytest.mark.parametrize(
    ("answer", "first", "refs"),
    [
        ("Fact.[1] The next sentence is here.", "Fact.[1]", (1,)),
        ("Fact. [1][2] The next sentence is here.", "Fact. [1][2]", (1, 2)),
        ("Dead. [1][2]. The next sentence is here.", "Dead. [1][2].", (1, 2)),
        ("结论。[1]下一句话在这里说明。", "结论。[1]", (1,)),
    ],
    ids=["dot_marker", "dot_space_markers", "markers_then_dot", "cjk_marker"],
)
def test_spec_examples_of_markers_after_the_terminator(
    answer: str, first: str, refs: tuple[int, ...]
) -> None:
    # docs/signals.md (splitting, rule 3) calls these cited sentences; they are shorter than the
    # default min_chars, so they are cited once min_chars lets them count.
    signals = signals_of(answer, params=SignalParams(min_chars=1))
    sentence = signals.citations.sentences[0]
    assert (sentence.text, sentence.refs, sentence.cited) == (first, refs, True)
    assert len(signals.citations.sentences) == 2
