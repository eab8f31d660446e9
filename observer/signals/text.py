"""Markdown-aware preparation of answer text (docs/signals.md, sentences and markers).

`prepare` returns the answer twice, with the same length, so an offset in one
is an offset in the other:

- `text`: fenced code, rules and table delimiter rows removed, leading
  structure (heading #s, quote >, bullets, `1.` / `1)` / `1、` list prefixes,
  table pipes) and trailing table pipes stripped. Sentences show this text.
- `scan`: the same with full-width digits folded to ASCII, the inside of
  inline code masked with NUL, and each citation marker masked as SOH
  followed by STX characters. Terminators, markers and numbers are searched
  here only, so nothing inside code or a marker's URL is ever seen.

Working on the whole answer with a handful of compiled regular expressions,
rather than character by character, is what keeps Python's work per answer
to a few calls per sentence (bench/signals.py and the README's Figures have
the numbers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from observer.signals.markers import Marker, mask_markers

_FULL_WIDTH = "０１２３４５６７８９．％"
FOLD = str.maketrans(_FULL_WIDTH, "0123456789.%")
CODE_MASK = "\x00"
MARKER_START = "\x01"
MARKER_REST = "\x02"

# Every line-anchored pattern starts with a literal newline (the text is
# prefixed with one): the regex engine then jumps from newline to newline
# instead of trying each position, which is most of the speed of `prepare`.
# A fence may be indented (inside a list item) or quoted; it closes at a line
# holding only a fence at least as long (so ```` can hold ```), or at the end.
_FENCE_RE = re.compile(r"\n[ \t>]*(`{3,}|~{3,}).*?(?:\n[ \t>]*\1[`~]*[ \t]*(?=\n|\Z)|\Z)", re.S)
# Lines with no words at all: horizontal rules, setext underlines, table delimiter rows.
_RULE_RE = re.compile(
    r"\n[ \t]*(?:(?:[-*_=][ \t]*){3,}|\|?(?:[ \t]*:?-+:?[ \t]*\|)+[ \t]*(?::?-+:?)?[ \t]*)"
    r"(?=\n|\Z)"
)
_LEAD_RE = re.compile(
    r"\n(?:[ \t\u3000]*(?:#{1,6}(?=\s|\Z)|>|[-*+•](?=\s)|[0-9]{1,3}[.)](?=\s)|[0-9]{1,3}、|\|))+"
    r"[ \t\u3000]*"
)
_TRAILING_PIPE_RE = re.compile(r"\|[ \t|]*(?=\n|\Z)")
_INLINE_CODE_RE = re.compile(r"(`+)(?!`)[^\n]*?(?<!`)\1(?!`)")


@dataclass(frozen=True, slots=True)
class Prepared:
    text: str
    scan: str
    markers: list[Marker]


def _mask_code(match: re.Match[str]) -> str:
    ticks = len(match.group(1))
    return match.group(1) + CODE_MASK * (match.end() - match.start() - 2 * ticks) + match.group(1)


def fold(text: str) -> str:
    """Full-width digits, dot and percent sign to ASCII, length unchanged."""
    # str.translate walks a non-ASCII string character by character; look
    # first, with one `in` per character: six times cheaper than a regex search.
    if text.isascii() or not any(map(text.__contains__, _FULL_WIDTH)):
        return text
    return text.translate(FOLD)


def prepare(answer: str) -> Prepared:
    """The answer's prose with its markers, ready for sentence splitting."""
    text = "\n" + "\n".join(answer.splitlines())
    if "```" in text or "~~~" in text:
        # A fence runs to its closing line or, unclosed, to the end (as markdown renders it).
        text = _FENCE_RE.sub("\n", text)
    text = _RULE_RE.sub("\n", text)
    text = _LEAD_RE.sub("\n", text)
    if "|" in text:
        text = _TRAILING_PIPE_RE.sub("", text)
    text = text[1:]
    scan = fold(text)
    if "`" in scan:
        scan = _INLINE_CODE_RE.sub(_mask_code, scan)
    markers: list[Marker] = []
    if "[" in scan or "【" in scan:
        scan, markers = mask_markers(scan, MARKER_START, MARKER_REST)
    return Prepared(text, scan, markers)
