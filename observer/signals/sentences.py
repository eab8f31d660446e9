"""Sentences, substantive sentences and citation coverage (DESIGN §3.2)."""

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
    """
    by_length: dict[int, list[str]] = {1: ["[A-Z]"]}
    for word in sorted(abbreviations):
        by_length.setdefault(len(word), []).append(re.escape(word))
    word_start = rf"(?<![^\s{re.escape(_OPENERS)}])"
    after_abbreviation = "|".join(
        rf"(?<={word_start}(?:{'|'.join(words)}))" for _, words in sorted(by_length.items())
    )
    return re.compile(
        rf"[ \t\u3000\n]*+()"
        rf"(?:[^{_T}\n]++|(?:{after_abbreviation})\.|\.(?![{_C}]*+(?:\s|$|\x01)))*+"
        rf"(?:[{_T}]++[{_C}]*+(?:[ \t\u3000]*+\x01\x02*+[{_T}]*+[{_C}]*+)*+)?"
    )


_NOISE = "\\s*_`#>|~\x01\x02"  # markdown symbols, whitespace and masked markers


@lru_cache(maxsize=16)
def _content_re(min_chars: int) -> re.Pattern[str]:
    # Matches once min_chars content characters are seen, without counting the rest.
    return re.compile(rf"(?:[{_NOISE}]*+[^{_NOISE}]){{{min_chars}}}")


@lru_cache(maxsize=16)
def _pleasantry_re(prefixes: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(p) for p in prefixes) or "(?!)"
    return re.compile(rf"[{_NOISE}]*+(?:{alternatives})", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Split:
    """The sentences of one answer, and for the substantive ones their numbers."""

    sentences: list[Sentence]
    # (numbers as written, refs) of each substantive sentence that holds numbers.
    numbers: list[tuple[list[str], tuple[int, ...]]]


def is_substantive(scan_segment: str, params: SignalParams) -> bool:
    """DESIGN §3.2 step 4 on a segment of scan text (markers masked)."""
    if _content_re(params.min_chars).match(scan_segment) is None:
        return False
    return _pleasantry_re(params.pleasantry_prefixes).match(scan_segment) is None


def split_answer(answer: str, n_sources: int, params: SignalParams) -> Split:
    """The answer's sentences, in order, each with its refs and verdicts."""
    prepared = prepare(answer)
    text, scan, markers = prepared.text, prepared.scan, prepared.markers
    n_markers = len(markers)
    content_re = _content_re(params.min_chars)
    pleasantry_re = _pleasantry_re(params.pleasantry_prefixes)
    numbers_at = [(m.start(), m.group()) for m in NUMBER_RE.finditer(scan)]
    n_numbers = len(numbers_at)
    sentences: list[Sentence] = []
    numbers: list[tuple[list[str], tuple[int, ...]]] = []
    next_marker = 0
    next_number = 0
    for match in sentence_re(params.abbreviations).finditer(scan):
        end = match.end()
        start = match.start(1)
        if end == start:
            continue
        refs: tuple[int, ...] = ()
        if next_marker < n_markers and markers[next_marker][0] < end:
            found: set[int] = set()
            while next_marker < n_markers and markers[next_marker][0] < end:
                found.update(markers[next_marker][2])
                next_marker += 1
            refs = tuple(sorted(found))
        segment = scan[start:end]
        substantive = (
            content_re.match(segment) is not None and pleasantry_re.match(segment) is None
        )
        cited = False
        if substantive:
            for ref in refs:
                if 1 <= ref <= n_sources:
                    cited = True
                    break
        if next_number < n_numbers and numbers_at[next_number][0] < end:
            raw: list[str] = []
            while next_number < n_numbers and numbers_at[next_number][0] < end:
                raw.append(numbers_at[next_number][1])
                next_number += 1
            if substantive:
                numbers.append((raw, refs))
        sentences.append(Sentence(text[start:end].strip(), refs, substantive, cited))
    return Split(sentences, numbers)


def citations(split: Split, n_sources: int) -> Citations:
    """Valid and ghost references and coverage over an answer's sentences."""
    every_ref = {r for s in split.sentences for r in s.refs}
    substantive = sum(1 for s in split.sentences if s.substantive)
    cited = sum(1 for s in split.sentences if s.cited)
    return Citations(
        sentences=tuple(split.sentences),
        valid_refs=tuple(sorted(r for r in every_ref if 1 <= r <= n_sources)),
        invalid_refs=tuple(sorted(r for r in every_ref if not 1 <= r <= n_sources)),
        substantive=substantive,
        cited=cited,
        coverage=cited / substantive if substantive else None,
    )
