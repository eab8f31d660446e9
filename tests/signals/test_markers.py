"""Citation markers (docs/signals.md): which [n] an answer cites, valid or ghost."""

from __future__ import annotations

import pytest

from .conftest import n_sources, signals_of

# (id, answer, number of sources, valid_refs, invalid_refs)
MARKER_CASES = [
    ("single", "Paris is the capital of France [1].", 3, (1,), ()),
    ("two_adjacent_markers", "Paris is the capital of France [1][2].", 3, (1, 2), ()),
    ("comma_list", "Paris is the capital of France [1,2].", 3, (1, 2), ()),
    ("comma_space_list", "Paris is the capital of France [1, 2].", 3, (1, 2), ()),
    ("fullwidth_comma_list", "Paris is the capital of France [1，2].", 3, (1, 2), ()),
    ("ideographic_comma_list", "巴黎是法国的首都城市[1、2]。", 3, (1, 2), ()),
    ("range_hyphen", "Paris is the capital of France [1-3].", 3, (1, 2, 3), ()),
    ("range_en_dash", "Paris is the capital of France [1–3].", 3, (1, 2, 3), ()),
    ("range_in_list", "Paris is the capital of France [1, 3-4].", 5, (1, 3, 4), ()),
    ("range_past_sources", "Paris is the capital of France [1-3].", 2, (1, 2), (3,)),
    (
        "range_of_50_is_marker",
        "Paris is the capital of France [1-50].",
        50,
        tuple(range(1, 51)),
        (),
    ),
    ("range_of_51_not_marker", "Paris is the capital of France [1-51].", 60, (), ()),
    ("range_of_100_not_marker", "Paris is the capital of France [1-100].", 3, (), ()),
    ("fullwidth_brackets", "巴黎是法国的首都城市【1】。", 3, (1,), ()),
    ("fullwidth_brackets_list", "巴黎是法国的首都城市【1，3】。", 3, (1, 3), ()),
    ("footnote", "Paris is the capital of France[^1].", 3, (1,), ()),
    ("link_with_number_text", "Paris is the capital [1](https://example.com/paris).", 3, (1,), ()),
    ("link_with_word_text", "Paris is the capital [see](https://example.com/2).", 3, (), ()),
    ("plain_brackets_not_marker", "Use the [optional] flag [a, b] here.", 3, (), ()),
    (
        "fenced_code_not_counted",
        "```python\nrow = table[2]\n```\nParis is the capital [1].",
        3,
        (1,),
        (),
    ),
    ("fenced_code_ghost_ignored", "```\nx = [7]\n```\nParis is the capital [1].", 3, (1,), ()),
    ("tilde_fence_not_counted", "~~~\nx = [7]\n~~~\nParis is the capital [1].", 3, (1,), ()),
    ("inline_code_not_counted", "Index it with `items[2]` as shown [1].", 3, (1,), ()),
    ("inline_code_ghost_ignored", "Write `[9]` to index the list here.", 3, (), ()),
    ("zero_is_ghost", "Paris is the capital of France [0].", 3, (), (0,)),
    ("beyond_sources_is_ghost", "Paris is the capital of France [4].", 3, (), (4,)),
    ("last_source_valid", "Paris is the capital of France [3].", 3, (3,), ()),
    ("no_sources_all_ghost", "Paris is the capital of France [1].", 0, (), (1,)),
    ("valid_and_ghosts", "Paris is the capital of France [2][7][0].", 3, (2,), (0, 7)),
    (
        "sorted_without_repeats",
        "Lyon is a city [3]. Paris is the capital [3][1]. Nice is nice [3, 1, 1].",
        3,
        (1, 3),
        (),
    ),
    (
        "ghosts_sorted_without_repeats",
        "One claim [9]. Two claim [5]. Three claim [9][5].",
        3,
        (),
        (5, 9),
    ),
]


@pytest.mark.parametrize(
    ("answer", "sources", "valid", "invalid"),
    [pytest.param(a, n, v, i, id=case_id) for case_id, a, n, v, i in MARKER_CASES],
)
def test_markers_refs(
    answer: str, sources: int, valid: tuple[int, ...], invalid: tuple[int, ...]
) -> None:
    cites = signals_of(answer, n_sources(sources)).citations
    assert cites.valid_refs == valid
    assert cites.invalid_refs == invalid


def test_invalid_citations_count_is_the_ghosts() -> None:
    # The `invalid_citations` score is the number of distinct ghost refs.
    cites = signals_of("Claim one [4]. Claim two [0][4]. Claim three [2].").citations
    assert len(cites.invalid_refs) == 2


@pytest.mark.parametrize(
    ("answer", "refs"),
    [
        pytest.param("Paris is the capital of France [1][2].", (1, 2), id="two_markers"),
        pytest.param("Paris is the capital of France [2-3].", (2, 3), id="range"),
        pytest.param("Paris is the capital of France [7].", (7,), id="ghost_kept_on_sentence"),
    ],
)
def test_sentence_carries_its_refs(answer: str, refs: tuple[int, ...]) -> None:
    (sentence,) = signals_of(answer).citations.sentences
    assert sentence.refs == refs


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param("Index the list with `rows[1]` in Python.", id="inline_code"),
        pytest.param("```\nrows[1]\n```\nIndex the list like that in Python.", id="fenced_code"),
        pytest.param("Paris is the capital of France [1-51].", id="range_too_long"),
    ],
)
def test_non_markers_do_not_cite(answer: str) -> None:
    signals = signals_of(answer, n_sources(60))
    assert signals.citations.cited == 0
    assert signals.citations.coverage == 0.0


# Fenced code blocks inside list items and block quotes are fenced code blocks
# too (CommonMark; markdown-it renders each of these as a `fence`), and LLM
# answers write them all the time. docs/signals.md#citation-markers: markers inside do not count.
# (id, answer)
NESTED_FENCE_CASES = [
    (
        "ordered_item_fence_indented_4",
        "1. Install the package first:\n    ```bash\n    pip install foo  # see [7]\n    ```\n"
        "2. Then run it now.",
    ),
    (
        "bullet_item_fence_indented_4",
        "- Step one is here.\n\n    ```\n    x = rows[7]\n    ```\n- Step two is here.",
    ),
    (
        "ordered_item_fence_indented_3",
        "1. Step one is here.\n\n   ```\n   x = rows[7]\n   ```\n2. Step two is here.",
    ),
    (
        "fence_in_blockquote",
        "> Quoted intro is here.\n> ```\n> x = rows[7]\n> ```\n> Quoted outro.",
    ),
    (
        "longer_fence_holds_shorter",
        "````markdown\n```\nsee [7]\n```\n````\nAfter text is here.",
    ),
]


@pytest.mark.parametrize(
    "answer",
    [pytest.param(a, id=case_id) for case_id, a in NESTED_FENCE_CASES],
)
def test_markers_in_nested_fences_not_counted(answer: str) -> None:
    cites = signals_of(answer).citations
    assert (cites.valid_refs, cites.invalid_refs) == ((), ())
