"""Sentences, substantive sentences and citation coverage (docs/signals.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from observer.model import Citations, Sentence
from observer.signals.numbers import NUMBER_RE
from observer.signals.params import SignalParams
from observer.signals.text import prepare

_T = "。！？!?；;…."  # terminators; a dot is one only where the body below lets it end
_C = "\"'”’」』)）*_"  # closing quotes and brackets (and emphasis) a sentence keeps
_OPENERS = "([{\"'“‘「『（【*_"


@lru_cache(maxsize=16)
def sentence_re(abbreviations: frozenset[str]) -> re.Pattern[str]:
    """One sentence of the scan text (see observer.signals.text).

    A body that stops at a terminator, then the terminator run, closers, and
    any markers that follow, spaces between allowed. A dot stops the body only
    before a space, the line end or a marker (closers allowed between), and
    not after an abbreviation: a single capital letter or a listed word, the
    word being the run of non-space characters before the dot, leading
    brackets and quotes dropped. Python's look-behinds need a fixed width, so
    the words are grouped by length. Possessive quantifiers: no backtracking.
    A dot inside a word (`3.5`) is tried before the abbreviations, and those
    only after a character that ends one: both alternatives take the one dot,
    so the order changes nothing but the look-behinds run less often.
    """
    by_length: dict[int, list[str]] = {1: ["[A-Z]"]}
    for word in sorted(abbreviations):
        by_length.setdefault(len(word), []).append(re.escape(word))
    word_start = rf"(?<![^\s{re.escape(_OPENERS)}])"
    after_abbreviation = "|".join(
        rf"(?<={word_start}(?:{'|'.join(words)}))" for _, words in sorted(by_length.items())
    )
    if "" not in abbreviations:
        last = "".join(sorted({re.escape(word[-1]) for word in abbreviations}))
        after_abbreviation = rf"(?<=[A-Z{last}])(?:{after_abbreviation})"
    return re.compile(
        rf"[ \t\u3000\n]*+()"
        rf"(?:[^{_T}\n]++|\.(?![{_C}]*+(?:\s|$|\x01))|(?:{after_abbreviation})\.)*+"
        rf"(?:[{_T}]++[{_C}]*+(?:[ \t\u3000]*+\x01\x02*+[{_T}]*+[{_C}]*+)*+)?"
    )


_NOISE = "\\s*_`#>|~\x01\x02"  # markdown symbols, whitespace and masked markers


@lru_cache(maxsize=16)
def substantive_re(min_chars: int, prefixes: tuple[str, ...]) -> re.Pattern[str]:
    """Matches at the start of a substantive sentence (step 4), in one call.

    Not a pleasantry (its prefixes compared case-insensitively after leading
    noise), then min_chars content characters, without counting the rest.
    Used with `match(scan, start, end)`: it has no look-behind, so the bounds
    make it see the sentence alone.
    """
    alternatives = "|".join(re.escape(p) for p in prefixes) or "(?!)"
    # Up to 64, the content characters written out min_chars times rather
    # than as a counted group (`(?:...){8}`): the same match, without the
    # engine's bookkeeping per repetition (15 % cheaper).
    content = rf"[{_NOISE}]*+[^{_NOISE}]"
    content = content * min_chars if min_chars <= 64 else rf"(?:{content}){{{min_chars}}}"
    return re.compile(rf"(?![{_NOISE}]*+(?i:{alternatives}))" + content)


@dataclass(frozen=True, slots=True)
class Split:
    """The sentences of one answer, their counts, and the numbers to ground."""

    sentences: list[Sentence]
    refs: set[int]
    substantive: int
    cited: int
    # (numbers as written, refs) of each substantive sentence that holds numbers.
    numbers: list[tuple[list[str], tuple[int, ...]]]
    # The refs of each cited sentence, in order: what source concentration counts.
    cited_refs: list[tuple[int, ...]]


_new_sentence = tuple.__new__  # Sentence(...) goes through a Python-level __new__


def split_answer(answer: str, n_sources: int, params: SignalParams) -> Split:  # noqa: C901 - the hot loop, kept inline for speed
    """The answer's sentences, in order, each with its refs and verdicts.

    The hot loop of observer: it runs once per sentence of every answer, so it
    walks the markers and the numbers (each found once over the whole answer)
    with an index instead of searching each sentence, and keeps work out of
    sentences that cannot need it. tests/signals/test_split_oracle.py checks
    it against the plain per-sentence version.
    """
    prepared = prepare(answer)
    text, scan, markers = prepared.text, prepared.scan, prepared.markers
    n_markers = len(markers)
    is_substantive = substantive_re(params.min_chars, params.pleasantry_prefixes).match
    # (start, end, as written) of every number; none straddles a sentence's end
    # (a sentence ends after a terminator, closer or marker, or at a line's end).
    found_numbers = [(m.start(), m.end(), m.group()) for m in NUMBER_RE.finditer(scan)]
    n_numbers = len(found_numbers)
    next_number = 0
    next_number_at = found_numbers[0][0] if n_numbers else len(scan) + 1
    sentences: list[Sentence] = []
    numbers: list[tuple[list[str], tuple[int, ...]]] = []
    cited_refs: list[tuple[int, ...]] = []
    all_refs: set[int] = set()
    n_substantive = 0
    next_marker = 0
    next_marker_at = markers[0][0] if n_markers else len(scan) + 1
    for match in sentence_re(params.abbreviations).finditer(scan):
        end = match.end()
        start = match.start(1)
        if end == start:
            continue
        refs: tuple[int, ...] = ()
        if next_marker_at < end:
            refs = markers[next_marker][2]
            next_marker += 1
            if next_marker < n_markers and markers[next_marker][0] < end:
                found = set(refs)
                while next_marker < n_markers and markers[next_marker][0] < end:
                    found.update(markers[next_marker][2])
                    next_marker += 1
                refs = tuple(sorted(found))
            next_marker_at = markers[next_marker][0] if next_marker < n_markers else end + len(scan)
            all_refs.update(refs)
        cited = False
        # Step 4: min_chars of content (markers, markdown and whitespace aside), no pleasantry.
        if is_substantive(scan, start, end) is not None:
            substantive = True
            n_substantive += 1
            for ref in refs:
                if 0 < ref <= n_sources:
                    cited = True
                    cited_refs.append(refs)
                    break
            if next_number_at < end:
                raw = _numbers_in(found_numbers, next_number, start, end)
                if raw is None:  # a number across a bound: search the sentence alone
                    raw = NUMBER_RE.findall(scan, start, end)
                if raw:
                    numbers.append((raw, refs))
        else:
            substantive = False
        if next_number_at < end:
            while next_number < n_numbers and found_numbers[next_number][0] < end:
                next_number += 1
            next_number_at = (
                found_numbers[next_number][0] if next_number < n_numbers else end + len(scan)
            )
        sentences.append(
            _new_sentence(Sentence, (text[start:end].strip(), refs, substantive, cited))
        )
    return Split(sentences, all_refs, n_substantive, len(cited_refs), numbers, cited_refs)


def _numbers_in(
    found: list[tuple[int, int, str]], index: int, start: int, end: int
) -> list[str] | None:
    """The numbers from `found[index]` on within [start, end), or None if one crosses a bound."""
    raw: list[str] = []
    n = len(found)
    while index < n:
        number_start, number_end, written = found[index]
        if number_start >= end:
            break
        if number_start >= start:
            if number_end > end:
                return None
            raw.append(written)
        elif number_end > start:
            return None
        index += 1
    return raw


def citations(split: Split, n_sources: int) -> Citations:
    """Valid and ghost references and coverage over an answer's sentences."""
    ordered = sorted(split.refs)
    return Citations(
        sentences=tuple(split.sentences),
        valid_refs=tuple(r for r in ordered if 0 < r <= n_sources),
        invalid_refs=tuple(r for r in ordered if not 0 < r <= n_sources),
        substantive=split.substantive,
        cited=split.cited,
        coverage=split.cited / split.substantive if split.substantive else None,
    )
