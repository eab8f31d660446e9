"""The fast citation pass equals the plain one it replaced (issue 18, item 4).

`split_answer` finds the numbers once over the whole answer and walks them
with an index, matches substantive-and-not-a-pleasantry in one regex, and
hands the cited sentences' refs to source concentration. The oracle below is
the per-sentence version it replaced, kept verbatim; concentration is checked
against its walk over the sentences.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from hypothesis import given
from hypothesis import strategies as st

from observer.model import Concentration, Sentence, Source
from observer.signals import SignalParams
from observer.signals.concentration import of_cited_refs
from observer.signals.numbers import NUMBER_RE
from observer.signals.sentences import sentence_re, split_answer
from observer.signals.text import prepare
from tests.budget import scaled

# Five times the profile's examples: the two passes can differ only where a number, a marker
# or a terminator meets a sentence boundary, which few draws hit; each example is cheap.
SETTINGS = scaled(5)

_NOISE = "\\s*_`#>|~\x01\x02"


@lru_cache(maxsize=16)
def _content_re(min_chars: int) -> re.Pattern[str]:
    return re.compile(rf"(?:[{_NOISE}]*+[^{_NOISE}]){{{min_chars}}}")


@lru_cache(maxsize=16)
def _pleasantry_re(prefixes: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(p) for p in prefixes) or "(?!)"
    return re.compile(rf"[{_NOISE}]*+(?:{alternatives})", re.IGNORECASE)


def oracle(
    answer: str, n_sources: int, params: SignalParams
) -> tuple[list[Sentence], set[int], int, int, list[tuple[list[str], tuple[int, ...]]]]:
    """split_answer before issue 18: each sentence searched on its own."""
    prepared = prepare(answer)
    text, scan, markers = prepared.text, prepared.scan, prepared.markers
    n_markers = len(markers)
    content_re = _content_re(params.min_chars)
    pleasantry_re = _pleasantry_re(params.pleasantry_prefixes)
    sentences: list[Sentence] = []
    numbers: list[tuple[list[str], tuple[int, ...]]] = []
    all_refs: set[int] = set()
    n_substantive = 0
    n_cited = 0
    next_marker = 0
    for match in sentence_re(params.abbreviations).finditer(scan):
        end = match.end()
        start = match.start(1)
        if end == start:
            continue
        refs: tuple[int, ...] = ()
        if next_marker < n_markers and markers[next_marker][0] < end:
            refs = markers[next_marker][2]
            next_marker += 1
            if next_marker < n_markers and markers[next_marker][0] < end:
                found = set(refs)
                while next_marker < n_markers and markers[next_marker][0] < end:
                    found.update(markers[next_marker][2])
                    next_marker += 1
                refs = tuple(sorted(found))
            all_refs.update(refs)
        segment = scan[start:end]
        cited = False
        if content_re.match(segment) is not None and pleasantry_re.match(segment) is None:
            substantive = True
            n_substantive += 1
            for ref in refs:
                if 0 < ref <= n_sources:
                    cited = True
                    n_cited += 1
                    break
            raw = NUMBER_RE.findall(scan, start, end)
            if raw:
                numbers.append((raw, refs))
        else:
            substantive = False
        sentences.append(Sentence(text[start:end].strip(), refs, substantive, cited))
    return sentences, all_refs, n_substantive, n_cited, numbers


def concentration_oracle(sentences: Sequence[Sentence], sources: Sequence[Source]) -> Concentration:
    """concentration before issue 18: a second walk over the sentences."""
    n = len(sources)
    per_sentence = [
        frozenset(sources[r - 1].doc_id or None for r in s.refs if 0 < r <= n)
        for s in sentences
        if s.cited
    ]
    citing: Counter[str] = Counter()
    alone: Counter[str] = Counter()
    for docs in per_sentence:
        citing.update(d for d in docs if d is not None)
        if len(docs) == 1:
            (only,) = docs
            if only is not None:
                alone[only] += 1
    cited_docs = tuple(sorted(citing))
    if not cited_docs:
        return Concentration(cited_docs, None, 0, len(per_sentence), None)
    top = min(cited_docs, key=lambda d: (-citing[d], -alone[d], d))
    ratio = alone[top] / len(per_sentence) if len(per_sentence) >= 2 else None
    return Concentration(cited_docs, top, alone[top], len(per_sentence), ratio)


# Pieces that meet at sentence, marker, number and code boundaries.
TOKENS = [
    "Fact",
    " ",
    "  ",
    "\n",
    "\n\n",
    "e",
    "A",
    "St",
    "U.S",
    "e.g",
    "Mr",
    "12",
    "1,200",
    "3.5",
    "0",
    "007",
    "2.1.0",
    "v2",
    "１２",
    "．",
    "％",
    "%",
    ".",
    ",",
    "。",
    "!",
    "?",
    ";",
    "…",
    "；",
    '"',
    "”",
    ")",
    "」",
    "*",
    "_",
    "[1]",
    "[2]",
    "[9]",
    "[0]",
    "[1,2]",
    "[1-3]",
    "[^2]",
    "[1](http://x.io/3)",
    "【2】",
    "[",
    "]",
    "`",
    "`3`",
    "```\n4 [1]\n```",
    "# ",
    "> ",
    "- ",
    "1. ",
    "| ",
    " |",
    "---",
    "hope this helps",
    "Hope This Helps",
    "希望以上",
    "数据",
    "sentence number seven",
]

answers = st.one_of(
    st.lists(st.sampled_from(TOKENS), max_size=40).map("".join),
    st.text(max_size=200),
)
params_strategy = st.builds(
    SignalParams,
    min_chars=st.integers(min_value=1, max_value=12),
    pleasantry_prefixes=st.sampled_from(
        [SignalParams().pleasantry_prefixes, (), ("fact", "12"), ("[",)]
    ),
)


@SETTINGS
@given(answers, st.integers(min_value=0, max_value=4), params_strategy)
def test_split_answer_equals_the_per_sentence_oracle(
    answer: str, n_sources: int, params: SignalParams
) -> None:
    split = split_answer(answer, n_sources, params)
    sentences, refs, substantive, cited, numbers = oracle(answer, n_sources, params)
    assert split.sentences == sentences
    assert [type(s) for s in split.sentences] == [Sentence] * len(sentences)
    assert split.refs == refs
    assert split.substantive == substantive
    assert split.cited == cited
    assert split.numbers == numbers
    assert split.cited_refs == [s.refs for s in sentences if s.cited]


@SETTINGS
@given(
    answers,
    st.lists(st.sampled_from(["A", "B", "C", "", None]), max_size=4),
)
def test_concentration_from_the_citation_pass_equals_the_walk_over_sentences(
    answer: str, docs: list[str | None]
) -> None:
    sources = [Source(text="s", doc_id=doc) for doc in docs]
    split = split_answer(answer, len(sources), SignalParams())
    assert of_cited_refs(split.cited_refs, sources) == concentration_oracle(
        split.sentences, sources
    )
