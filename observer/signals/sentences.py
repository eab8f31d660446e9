"""Sentences, substantive sentences and citation coverage (DESIGN §3.2)."""

from __future__ import annotations

import re

from observer.model import Citations, Sentence
from observer.signals.markers import Marker, find_markers
from observer.signals.params import SignalParams
from observer.signals.text import Line, prose_lines

_TERMINATORS = "。！？!?；;…"
_TERMINATOR_RE = re.compile(r"[。！？!?；;….]")
_CLOSERS = "\"'”’」』)）*_"
_RUN_AFTER = _TERMINATORS + "."
_NOT_CONTENT_RE = re.compile(r"[\s*_`#>|~]+")
_LEADING_MARKDOWN = " \t\u3000*_`#>|~"
_WORD_OPENERS = "([{\"'“‘「『（【*_"


class _Piece:
    """A sentence in the making: its span in the line and the markers inside."""

    __slots__ = ("end", "markers", "start")

    def __init__(self, start: int, end: int, markers: list[Marker]) -> None:
        self.start = start
        self.end = end
        self.markers = markers


def _skip(scan: str, pos: int, chars: str) -> int:
    n = len(scan)
    while pos < n and scan[pos] in chars:
        pos += 1
    return pos


def _is_abbreviation(text: str, dot: int, line_start: int, params: SignalParams) -> bool:
    begin = dot
    while begin > line_start and not text[begin - 1].isspace():
        begin -= 1
    word = text[begin:dot].lstrip(_WORD_OPENERS)
    if len(word) == 1 and word.isupper():
        return True
    return word in params.abbreviations


def _split_line(line: Line, markers: list[Marker], params: SignalParams) -> list[_Piece]:
    scan, text = line.scan, line.text
    n = len(scan)
    starts = {m.start: m for m in markers}
    pieces: list[_Piece] = []
    pos = 0
    marker_index = 0
    for term in _TERMINATOR_RE.finditer(scan):
        i = term.start()
        if i < pos:
            continue
        while marker_index < len(markers) and markers[marker_index].end <= i:
            marker_index += 1
        if marker_index < len(markers) and markers[marker_index].start <= i:
            continue  # a dot inside a link marker's URL
        end = _skip(scan, i + 1, _RUN_AFTER)
        end = _skip(scan, end, _CLOSERS)
        if scan[i] == ".":
            # A dot ends a sentence only before a space, the line end or a marker.
            if end < n and not scan[end].isspace() and end not in starts:
                continue
            if _is_abbreviation(text, i, pos, params):
                continue
        # Markers after the terminator, spaces between allowed, belong to this sentence.
        while True:
            gap = end
            while gap < n and scan[gap] in " \t\u3000":
                gap += 1
            marker = starts.get(gap)
            if marker is None:
                break
            end = _skip(scan, marker.end, _RUN_AFTER)
            end = _skip(scan, end, _CLOSERS)
        pieces.append(_Piece(pos, end, []))
        pos = end
    if pos < n:
        pieces.append(_Piece(pos, n, []))
    if markers:
        k = 0
        for piece in pieces:
            while k < len(markers) and markers[k].start < piece.end:
                piece.markers.append(markers[k])
                k += 1
    return pieces


def _without_markers(text: str, start: int, end: int, markers: list[Marker]) -> str:
    if not markers:
        return text[start:end]
    parts: list[str] = []
    cursor = start
    for marker in markers:
        parts.append(text[cursor : marker.start])
        cursor = marker.end
    parts.append(text[cursor:end])
    return " ".join(parts)


def is_substantive(plain: str, params: SignalParams) -> bool:
    """`plain` is sentence text with its markers removed."""
    if len(_NOT_CONTENT_RE.sub("", plain)) < params.min_chars:
        return False
    return not plain.lower().lstrip(_LEADING_MARKDOWN).startswith(params.pleasantry_prefixes)


class SplitSentence:
    """A sentence with what the other signals need beyond `Sentence`."""

    __slots__ = ("number_text", "sentence")

    def __init__(self, sentence: Sentence, number_text: str) -> None:
        self.sentence = sentence
        # The scan text without markers: where the numbers of the sentence are read.
        self.number_text = number_text


def split_answer(answer: str, n_sources: int, params: SignalParams) -> list[SplitSentence]:
    """The answer's sentences, in order, each with its refs and verdicts."""
    result: list[SplitSentence] = []
    for line in prose_lines(answer):
        markers = find_markers(line.scan) if ("[" in line.scan or "【" in line.scan) else []
        for piece in _split_line(line, markers, params):
            raw = line.text[piece.start : piece.end]
            if not raw.strip():
                continue
            refs = tuple(sorted({r for m in piece.markers for r in m.refs}))
            plain = _without_markers(line.text, piece.start, piece.end, piece.markers)
            substantive = is_substantive(plain, params)
            cited = substantive and any(1 <= r <= n_sources for r in refs)
            number_text = (
                _without_markers(line.scan, piece.start, piece.end, piece.markers)
                if substantive
                else ""
            )
            result.append(
                SplitSentence(Sentence(raw.strip(), refs, substantive, cited), number_text)
            )
    return result


def citations(sentences: list[SplitSentence], n_sources: int) -> Citations:
    """Valid and ghost references and coverage over split sentences."""
    every_ref = {r for s in sentences for r in s.sentence.refs}
    substantive = sum(1 for s in sentences if s.sentence.substantive)
    cited = sum(1 for s in sentences if s.sentence.cited)
    return Citations(
        sentences=tuple(s.sentence for s in sentences),
        valid_refs=tuple(sorted(r for r in every_ref if 1 <= r <= n_sources)),
        invalid_refs=tuple(sorted(r for r in every_ref if not 1 <= r <= n_sources)),
        substantive=substantive,
        cited=cited,
        coverage=cited / substantive if substantive else None,
    )
