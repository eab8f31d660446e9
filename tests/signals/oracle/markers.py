"""Citation markers (docs/signals.md#citation-markers).

A marker is a bracketed list of integers: `[1]`, `[1,2]`, `[1, 2]`, `[1，2]`,
`[1、2]`, ranges `[1-3]` / `[1–3]`, `【1】`, footnotes `[^1]` and links whose
text is a number `[1](url)`. The text handed in here has already had its
full-width digits folded to ASCII and its inline code masked (see
`observer.signals.text`), so only ASCII digits are matched.
"""

from __future__ import annotations

import re

MAX_RANGE = 50

_ITEM = r"[0-9]+(?:[ \t]*[-–][ \t]*[0-9]+)?"
_LIST = rf"{_ITEM}(?:[ \t]*[,，、][ \t]*{_ITEM})*"
# Two patterns, each led by a literal bracket, so the regex engine can skip
# ahead to candidates; an alternation of both is twice as slow on long text.
BRACKET_MARKER_RE = re.compile(rf"\[\^?[ \t]*({_LIST})[ \t]*\](?:\([^()\s]*\))?")
LENTICULAR_MARKER_RE = re.compile(rf"【[ \t]*({_LIST})[ \t]*】")
_ITEM_RE = re.compile(r"([0-9]+)(?:[ \t]*[-–][ \t]*([0-9]+))?")


# (start, end, refs): a marker's span in the scan text and the numbers it names.
# A plain tuple: an answer holds dozens and building a NamedTuple costs 3x more.
Marker = tuple[int, int, tuple[int, ...]]


def parse_refs(body: str) -> tuple[int, ...] | None:
    """The numbers a marker's body names, sorted without repeats, or None when it is not a marker.

    A range is expanded; a range running backwards or longer than 50 numbers
    makes the whole bracket an ordinary bracket, not a marker.
    """
    if body.isdigit():
        return (int(body),)
    refs: list[int] = []
    for item in _ITEM_RE.finditer(body):
        first = int(item.group(1))
        if item.group(2) is None:
            refs.append(first)
            continue
        last = int(item.group(2))
        if last < first or last - first + 1 > MAX_RANGE:
            return None
        refs.extend(range(first, last + 1))
    return tuple(sorted(set(refs)))


def mask_markers(text: str, start_char: str, rest_char: str) -> tuple[str, list[Marker]]:
    """`text` with every marker replaced by `start_char` + `rest_char`s, and the markers.

    The replacement keeps the length, so offsets stay valid.
    """
    found: list[Marker] = []
    if "[" in text:
        found = _markers(BRACKET_MARKER_RE, text)
    if "【" in text:
        found.extend(_markers(LENTICULAR_MARKER_RE, text))
        found.sort()
    if not found:
        return text, found
    pieces: list[str] = []
    cursor = 0
    for start, end, _refs in found:
        pieces.append(text[cursor:start])
        pieces.append(start_char + rest_char * (end - start - 1))
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces), found


def _markers(pattern: re.Pattern[str], text: str) -> list[Marker]:
    found: list[Marker] = []
    for match in pattern.finditer(text):
        body = match[1]
        refs = (int(body),) if body.isdigit() else parse_refs(body)
        if refs is not None:
            found.append((match.start(), match.end(), refs))
    return found
