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
    """The sentences of one answer, their counts, and the numbers to ground."""

    sentences: list[Sentence]
    refs: set[int]
    substantive: int
    cited: int
    # (numbers as written, refs) of each substantive sentence that holds numbers.
    numbers: list[tuple[list[str], tuple[int, ...]]]


def split_answer(answer: str, n_sources: int, params: SignalParams) -> Split:
    """The answer's sentences, in order, each with its refs and verdicts.

    The hot loop of observer: it runs once per sentence of every answer, so it
    walks the markers with an index instead of searching, and keeps work out
    of sentences that cannot need it.
    """
    prepared = prepare(answer)
    text, scan, markers = prepared.text, prepared.scan, prepared.markers
    n_markers = len(markers)
    content_re = _content_re(params.min_chars)
    pleasantry_re = _pleasantry_re(params.pleasantry_prefixes)
    find_numbers = NUMBER_RE.findall
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
        # Step 4: min_chars of content (markers, markdown and whitespace aside), no pleasantry.
        if content_re.match(segment) is not None and pleasantry_re.match(segment) is None:
            substantive = True
            n_substantive += 1
            for ref in refs:
                if 0 < ref <= n_sources:
                    cited = True
                    n_cited += 1
                    break
            raw = find_numbers(scan, start, end)
            if raw:
                numbers.append((raw, refs))
        else:
            substantive = False
        sentences.append(Sentence(text[start:end].strip(), refs, substantive, cited))
    return Split(sentences, all_refs, n_substantive, n_cited, numbers)


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
