"""Refusals and over-citation, without the model (docs/signals.md#abstention-and-over-citation).

Pure. An answer is **abstained** (a refusal) when all of these hold:

1. it cites nothing: no substantive sentence holds a valid reference;
2. it is short: its sentences hold at most `REFUSAL_MAX_CHARS` characters,
   whitespace aside;
3. it opens with the refusal: a sentence holding a refusal phrase comes before
   any substantive sentence without one (a greeting such as `您好！` may precede).

The phrases (`signals.refusal_phrases`) and each sentence are compared after
`normalise`: case, full and half width, apostrophes and punctuation do not
matter, nor do spaces next to a CJK character. A phrase whose end is an ASCII
letter or digit matches only at a word boundary (`no information` is not in
`no informational`).

An answer that cites, runs long, or gets to its substance before it refuses
answers something, and its citation coverage and grounding are what to watch:
it is not a refusal even when it says "I don't know" in passing.

**Over-citation**: a sentence carrying more than `signals.max_refs_per_sentence`
distinct reference numbers (`[1][2][3][4]`, `[1-5]`), valid or not; the count of
such sentences.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from observer.model import Sentence

REFUSAL_MAX_CHARS = 300

_APOSTROPHES = str.maketrans("", "", "'’‘ʼ´`")
_SEPARATORS = re.compile(r"[\W_]+")
# A space left beside a non-ASCII character goes: `知识库 未匹配` is `知识库未匹配`.
_CJK_GAP = re.compile(r"(?<=[^\x00-\x7f]) | (?=[^\x00-\x7f])")
_ASCII_WORD = re.compile(r"[a-z0-9]")


def normalise(text: str) -> str:
    """`text` as refusal phrases are compared: NFKC (full width to half width),
    case-folded, apostrophes dropped (`don't` is `dont`), every run of other
    punctuation and whitespace one space, and no space beside a non-ASCII character."""
    folded = unicodedata.normalize("NFKC", text).casefold().translate(_APOSTROPHES)
    return _CJK_GAP.sub("", _SEPARATORS.sub(" ", folded)).strip()


@lru_cache(maxsize=8)
def phrase_re(phrases: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern for the normalised phrases (None without any): an ASCII word
    character at either end of a phrase must not continue into the text."""
    parts: list[str] = []
    for key in sorted({normalise(p) for p in phrases} - {""}, key=len, reverse=True):
        before = r"(?<![a-z0-9])" if _ASCII_WORD.match(key[0]) else ""
        after = r"(?![a-z0-9])" if _ASCII_WORD.match(key[-1]) else ""
        parts.append(before + re.escape(key) + after)
    return re.compile("|".join(parts)) if parts else None


def refusal_phrase(text: str, phrases: tuple[str, ...]) -> str | None:
    """The first refusal phrase in `text`, normalised, or None."""
    pattern = phrase_re(phrases)
    if pattern is None:
        return None
    found = pattern.search(normalise(text))
    return found.group() if found else None


def abstained(sentences: Sequence[Sentence], phrases: tuple[str, ...]) -> bool:
    """Whether an answer of these sentences is a refusal (the three rules above)."""
    if any(s.cited for s in sentences):
        return False
    if sum(len(s.text) for s in sentences) > REFUSAL_MAX_CHARS and (
        sum(len("".join(s.text.split())) for s in sentences) > REFUSAL_MAX_CHARS
    ):
        return False
    for sentence in sentences:
        if refusal_phrase(sentence.text, phrases) is not None:
            return True
        if sentence.substantive:
            return False
    return False


def over_cited(sentences: Sequence[Sentence], max_refs: int) -> int:
    """How many sentences carry more than `max_refs` distinct reference numbers."""
    return sum(1 for s in sentences if len(s.refs) > max_refs)
