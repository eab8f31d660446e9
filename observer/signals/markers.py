"""Citation markers (DESIGN §3.1).

A marker is a bracketed list of integers: `[1]`, `[1,2]`, `[1, 2]`, `[1，2]`,
`[1、2]`, ranges `[1-3]` / `[1–3]`, `【1】`, footnotes `[^1]` and links whose
text is a number `[1](url)`. The text handed in here has already had its
full-width digits folded to ASCII and its inline code masked (see
`observer.signals.text`), so only ASCII digits are matched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_RANGE = 50

_ITEM = r"[0-9]+(?:[ \t]*[-–][ \t]*[0-9]+)?"
_LIST = rf"{_ITEM}(?:[ \t]*[,，、][ \t]*{_ITEM})*"
MARKER_RE = re.compile(
    rf"\[\^?[ \t]*(?P<a>{_LIST})[ \t]*\](?:\([^()\s]*\))?|【[ \t]*(?P<b>{_LIST})[ \t]*】"
)
_ITEM_RE = re.compile(r"([0-9]+)(?:[ \t]*[-–][ \t]*([0-9]+))?")


@dataclass(frozen=True, slots=True)
class Marker:
    start: int
    end: int
    refs: tuple[int, ...]


def parse_refs(body: str) -> tuple[int, ...] | None:
    """The numbers a marker's body names, or None when it is not a marker.

    A range is expanded; a range running backwards or longer than 50 numbers
    makes the whole bracket an ordinary bracket, not a marker.
    """
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
    return tuple(refs)


def find_markers(text: str) -> list[Marker]:
    """Every marker in `text`, in order."""
    found: list[Marker] = []
    for match in MARKER_RE.finditer(text):
        refs = parse_refs(match.group("a") or match.group("b"))
        if refs is not None:
            found.append(Marker(match.start(), match.end(), refs))
    return found
