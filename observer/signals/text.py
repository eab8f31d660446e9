"""Markdown-aware preparation of answer text (DESIGN §3.2 steps 1–2).

Each prose line of an answer is handed on twice, with the same length:
`text` as written (what sentences show and count) and `scan`, where
full-width digits are folded to ASCII and inline code is masked, so markers,
terminators and numbers inside code are never seen.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

# Folding is one code point to one code point, so offsets in `scan` are offsets in `text`.
_FOLD = str.maketrans("０１２３４５６７８９．％", "0123456789.%")
MASK = "\x00"

_FENCE_RE = re.compile(r"[ \t]{0,3}(?:```|~~~)")
_INLINE_CODE_RE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
# Leading structure: heading #s, quote >, bullets, ordered-list prefixes and table pipes.
_LEAD_RE = re.compile(
    r"[ \t\u3000]*(?:#{1,6}(?=\s|$)|>|[-*+•](?=\s)|[0-9]{1,3}[.)](?=\s)|[0-9]{1,3}、|\|)"
)
# Lines with no words at all: horizontal rules, setext underlines, table delimiter rows.
_RULE_RE = re.compile(
    r"\s*(?:(?:[-*_=][ \t]*){3,}"
    r"|\|?(?:[ \t]*:?-+:?[ \t]*\|)+[ \t]*(?::?-+:?)?[ \t]*)$"
)


@dataclass(frozen=True, slots=True)
class Line:
    text: str
    scan: str


def _mask_code(match: re.Match[str]) -> str:
    return MASK * (match.end() - match.start())


def prose_lines(answer: str) -> Iterator[Line]:
    """The answer's lines outside fenced code, leading structure stripped.

    An unclosed fence runs to the end of the answer, as markdown renders it.
    """
    in_fence = False
    for raw in answer.splitlines():
        if _FENCE_RE.match(raw):
            in_fence = not in_fence
            continue
        if in_fence or not raw or raw.isspace() or _RULE_RE.match(raw):
            continue
        start = 0
        while (lead := _LEAD_RE.match(raw, start)) is not None and lead.end() > start:
            start = lead.end()
        body = raw[start:].strip()
        if body.endswith("|"):
            body = body.rstrip("| \t")
        if not body:
            continue
        scan = body.translate(_FOLD)
        if "`" in scan:
            scan = _INLINE_CODE_RE.sub(_mask_code, scan)
        yield Line(body, scan)
