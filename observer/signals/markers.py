"""Citation markers (docs/signals.md#citation-markers).

A marker is a bracketed list of integers: `[1]`, `[1,2]`, `[1, 2]`, `[1，2]`,
`[1、2]`, ranges `[1-3]` / `[1–3]`, `【1】`, footnotes `[^1]` and links whose
text is a number `[1](url)`. The text handed in here has already had its
full-width digits folded to ASCII and its inline code masked (see
`observer.signals.text`), so only ASCII digits are matched.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import accumulate
from typing import cast

MAX_RANGE = 50

# Possessive quantifiers throughout (a third cheaper than plain ones): what
# follows each part can never start with what it gave back, so giving back
# never helps a match and they match exactly what plain ones would.
_ITEM = r"[0-9]++(?:[ \t]*+[-–][ \t]*+[0-9]++)?+"
_LIST = rf"{_ITEM}(?:[ \t]*+[,，、][ \t]*+{_ITEM})*+"
# Two patterns, each led by a literal bracket, so the regex engine can skip
# ahead to candidates; an alternation of both is twice as slow on long text.
BRACKET_MARKER_RE = re.compile(rf"\[\^?+[ \t]*+({_LIST})[ \t]*+\](?:\([^()\s]*+\))?+")
LENTICULAR_MARKER_RE = re.compile(rf"【[ \t]*+({_LIST})[ \t]*+】")
_ITEM_RE = re.compile(r"([0-9]+)(?:[ \t]*[-–][ \t]*([0-9]+))?")


# The bracket marker and its body, for `re.split`.
_SPLIT_RE = re.compile(f"({BRACKET_MARKER_RE.pattern})")
_MAX_PLAIN = 64  # the longest marker `_mask_plain` masks
# The refs of `[0]` to `[99]` by body: a lookup costs a fifth of int().
_ONE_REF = {str(n): (n,) for n in range(100)}


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
    if "[" in text and "【" not in text:
        plain = _mask_plain(text, start_char, rest_char)
        if plain is not None:
            return plain
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


@lru_cache(maxsize=4)
def _masks(start_char: str, rest_char: str) -> tuple[str, ...]:
    """The mask of a marker of each length up to _MAX_PLAIN, by length."""
    return tuple(start_char + rest_char * (n - 1) for n in range(_MAX_PLAIN + 1))


def _mask_plain(text: str, start_char: str, rest_char: str) -> tuple[str, list[Marker]] | None:
    """`mask_markers` for `[...]` markers of one number each (`[3]`, `[^2]`, `[1](url)`), 0 to 99.

    One `re.split` and a few calls over all markers at once instead of a
    handful of Python-level calls per marker, the bulk of an answer's cost
    before. None when a marker holds a list, a range or a number past 99,
    or is longer than _MAX_PLAIN: `mask_markers` takes those.
    """
    parts = _SPLIT_RE.split(text)  # [text, marker, body, text, marker, body, ..., text]
    if len(parts) == 1:
        return text, []
    refs = list(map(_ONE_REF.get, parts[2::3]))
    if None in refs:  # a list, a range, a number past 99 or written with a leading 0
        return None
    masks = _masks(start_char, rest_char)
    lengths = list(map(len, parts[1::3]))
    if max(lengths) > _MAX_PLAIN:
        return None
    del parts[2::3]  # [text, marker, text, marker, ..., text]
    bounds = list(accumulate(map(len, parts)))  # start, end, start, end, ...
    found: list[Marker] = list(
        zip(bounds[0:-1:2], bounds[1::2], cast("list[tuple[int, ...]]", refs), strict=True)
    )
    parts[1::2] = map(masks.__getitem__, lengths)
    return "".join(parts), found


def _markers(pattern: re.Pattern[str], text: str) -> list[Marker]:
    found: list[Marker] = []
    for match in pattern.finditer(text):
        body = match[1]
        refs = (int(body),) if body.isdigit() else parse_refs(body)
        if refs is not None:
            found.append((match.start(), match.end(), refs))
    return found
