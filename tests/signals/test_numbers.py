"""Numeric grounding: numbers of the answer found in its sources (docs/signals.md)."""

from __future__ import annotations

import pytest

from .conftest import signals_of

SOURCES = (
    "Revenue was 120 million in 2023.",  # [1]
    "Growth reached 3.5% and the license costs 1,200 dollars.",  # [2]
    "Nothing numeric is said here.",  # [3]
)

# (id, answer, numbers, grounded, unsupported) against SOURCES
GROUNDING_CASES = [
    ("integer_in_cited_source", "Revenue was 120 million [1].", 1, 1, ()),
    ("integer_not_in_cited_source", "Revenue was 121 million [1].", 1, 0, ("121",)),
    ("decimal_percentage", "Growth reached 3.5% this year [2].", 1, 1, ()),
    ("percent_sign_normalised", "Growth reached 3.5 percent this year [2].", 1, 1, ()),
    ("decimal_differs", "Growth reached 3.6% this year [2].", 1, 0, ("3.6",)),
    ("decimal_is_not_integer", "Growth reached 35% this year [2].", 1, 0, ("35",)),
    ("thousands_separator_in_answer", "The license costs 1,200 dollars [2].", 1, 1, ()),
    ("thousands_separator_in_source", "The license costs 1200 dollars [2].", 1, 1, ()),
    ("fullwidth_digits", "Revenue was １２０ million [1].", 1, 1, ()),
    ("fullwidth_percentage", "Growth reached ３.５％ this year [2].", 1, 1, ()),
    ("cjk_text_around_number", "收入为120百万美元，来自年报[1]。", 1, 1, ()),
    (
        "two_sentences_two_sources",
        "Revenue was 120 million [1]. The license costs 1,200 [2].",
        2,
        2,
        (),
    ),
    # a cited sentence is checked against the sources it cites, and only those
    ("only_in_uncited_source", "Revenue was 120 million [2].", 1, 0, ("120",)),
    ("cites_source_without_numbers", "Revenue was 120 million [3].", 1, 0, ("120",)),
    ("in_one_of_two_cited_sources", "Revenue was 120 million [2][1].", 1, 1, ()),
    ("range_marker_cites_all", "Revenue was 120 million [1-3].", 1, 1, ()),
    # an uncited sentence is checked against every source
    ("uncited_found_anywhere", "Growth reached 3.5% this year.", 1, 1, ()),
    ("uncited_found_nowhere", "Growth reached 4.5% this year.", 1, 0, ("4.5",)),
    ("ghost_only_counts_as_uncited", "Revenue was 120 million [9].", 1, 1, ()),
    ("mixed_grounding", "Revenue was 120 million in 2023 and 99 more [1].", 3, 2, ("99",)),
    ("unsupported_normalised", "It costs 5,000 with 12.5% off [1].", 2, 0, ("12.5", "5000")),
    ("decimal_at_line_start_not_list", "1.5 million users signed up [1].", 1, 0, ("1.5",)),
    # a number is matched whole: 23 does not "appear" inside 2023 (the spec is silent)
    ("whole_numbers_only", "Revenue grew for 23 quarters [1].", 1, 0, ("23",)),
]


@pytest.mark.parametrize(
    ("answer", "numbers", "grounded", "unsupported"),
    [pytest.param(a, n, g, u, id=case_id) for case_id, a, n, g, u in GROUNDING_CASES],
)
def test_grounding(answer: str, numbers: int, grounded: int, unsupported: tuple[str, ...]) -> None:
    numeric = signals_of(answer, SOURCES).numeric
    assert (numeric.numbers, numeric.grounded) == (numbers, grounded)
    assert sorted(numeric.unsupported) == sorted(unsupported)
    assert numeric.ratio == pytest.approx(grounded / numbers)


# Answers whose only digits are not numbers of the answer: numeric_grounding is null.
NOT_NUMBERS_CASES = [
    ("no_digits", "Revenue is reported in the annual report [1]."),
    ("marker", "Revenue is reported in the annual report [2]."),
    ("marker_list", "Revenue is reported in the annual report [1, 2]."),
    ("marker_range", "Revenue is reported in the annual report [1-3]."),
    ("marker_fullwidth", "Revenue is reported in the annual report 【2】."),
    ("marker_footnote", "Revenue is reported in the annual report[^2]."),
    ("marker_link", "Revenue is reported in the report [1](https://example.com/2024/q4)."),
    ("ghost_marker", "Revenue is reported in the annual report [42]."),
    ("ordered_list_dot", "7. Revenue is reported in the annual report [1]."),
    ("ordered_list_paren", "7) Revenue is reported in the annual report [1]."),
    ("inline_code", "Run `report --year 2019` to see the revenue [1]."),
    ("fenced_code", "```\ntotal = 999 * 31\n```\nRevenue is reported in the annual report [1]."),
    ("not_substantive", "Ok, 42."),
]


@pytest.mark.parametrize(
    "answer", [pytest.param(a, id=case_id) for case_id, a in NOT_NUMBERS_CASES]
)
def test_not_numbers_of_the_answer(answer: str) -> None:
    numeric = signals_of(answer, SOURCES).numeric
    assert numeric.numbers == 0
    assert numeric.ratio is None
    assert numeric.unsupported == ()


def test_number_next_to_list_prefix_still_counts() -> None:
    # The list prefix `1.` is not a number; the 7 after it is one.
    numeric = signals_of("1. We found 7 errors in the report [1].", SOURCES).numeric
    assert (numeric.numbers, numeric.unsupported) == (1, ("7",))


def test_full_width_digits_in_source() -> None:
    numeric = signals_of("Revenue was 120 million [1].", ["收入为１２０百万美元。"]).numeric
    assert (numeric.numbers, numeric.grounded) == (1, 1)


def test_no_sources_nothing_grounded() -> None:
    numeric = signals_of("Revenue was 120 million last year.", ()).numeric
    assert (numeric.numbers, numeric.grounded, numeric.unsupported) == (1, 0, ("120",))


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            "1. Install the package first:\n    ```bash\n    pip install foo==1.2\n    ```\n"
            "2. Then run it and check the report [1].",
            id="list_item_fence_indented_4",
        ),
        pytest.param(
            "> Revenue is in the report [1].\n> ```\n> total = 999 * 31\n> ```",
            id="fence_in_blockquote",
        ),
    ],
)
def test_numbers_in_nested_fences_not_counted(answer: str) -> None:
    numeric = signals_of(answer, SOURCES).numeric
    assert (numeric.numbers, numeric.unsupported) == (0, ())
