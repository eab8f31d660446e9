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

Every expression here is linear in the answer's length by construction (an
answer is text an end user can make the model write): each is anchored at a
newline or at the start of a maximal run, and its quantifiers are possessive
where giving back could never help; inline code is paired by a scan over the
backtick runs, not a regular expression (tests/redteam/test_linear_text.py
feeds every such expression its attack inputs at `limits.max_answer_chars`).
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
_FENCE_RE = re.compile(
    r"\n[ \t>]*+(`{3,}+|~{3,}+).*?(?:\n[ \t>]*+\1[`~]*+[ \t]*+(?=\n|\Z)|\Z)", re.S
)
# Lines with no words at all: horizontal rules, setext underlines, table delimiter rows.
_RULE_RE = re.compile(
    r"\n[ \t]*+(?:(?:[-*_=][ \t]*+){3,}+"
    r"|\|?+(?:[ \t]*+:?+-++:?+[ \t]*+\|)++[ \t]*+(?::?+-++:?+)?+[ \t]*+)"
    r"(?=\n|\Z)"
)
_LEAD_RE = re.compile(
    r"\n(?:[ \t\u3000]*+(?:#{1,6}(?=\s|\Z)|>|[-*+•](?=\s)|[0-9]{1,3}[.)](?=\s)|[0-9]{1,3}、|\|))++"
    r"[ \t\u3000]*+"
)
# From the first pipe of a line's trailing run of pipes and blanks: tried only where such a
# run starts (a look-behind), so a run of 100,000 pipes is walked once, not once per pipe.
_TRAILING_PIPE_RE = re.compile(r"(?<![ \t|])([ \t]*+)\|[ \t|]*+(?=\n|\Z)")
_TICKS_RE = re.compile(r"`++")


@dataclass(frozen=True, slots=True)
class PreparedText:
    text: str
    scan: str
    markers: list[Marker]


def _mask_inline_code(scan: str) -> str:
    """Inline code's inside masked with NUL, its backticks kept; in one pass over the runs.

    As CommonMark pairs them within a line, and as the regular expression
    `(`+)(?!`)[^\n]*?(?<!`)\1(?!`)` did (tests/signals/oracle): from each
    backtick run, the longest tail of it that a later run of exactly its length
    on the same line closes opens a code span; a run nothing closes is text.
    Each run's closer is looked up in a table of the runs after it (built from
    the right), so the work is linear in the answer, where the expression was
    quadratic in a run's length.
    """
    runs = [(m.start(), m.end()) for m in _TICKS_RE.finditer(scan)]
    closes: list[tuple[int, int] | None] = [None] * len(runs)  # (tail length, closer)
    later: dict[int, int] = {}  # run length -> the first such run after, on the line
    for index in range(len(runs) - 1, -1, -1):
        start, end = runs[index]
        if index + 1 < len(runs) and scan.find("\n", end, runs[index + 1][0]) >= 0:
            later.clear()
        length = end - start
        if len(later) < length:  # the fewer of the lengths seen and the tails to try
            tail = max((n for n in later if n <= length), default=0)
        else:
            tail = next((n for n in range(length, 0, -1) if n in later), 0)
        if tail:
            closes[index] = (tail, later[tail])
        later[length] = index
    pieces: list[str] = []
    cursor = index = 0
    while index < len(runs):
        found = closes[index]
        if found is None:
            index += 1
            continue
        inside, closer = runs[index][1], runs[found[1]][0]
        pieces += (scan[cursor:inside], CODE_MASK * (closer - inside))
        cursor, index = closer, found[1] + 1
    pieces.append(scan[cursor:])
    return "".join(pieces)


def fold(text: str) -> str:
    """Full-width digits, dot and percent sign to ASCII, length unchanged."""
    # str.translate walks a non-ASCII string character by character; look
    # first, with one `in` per character: six times cheaper than a regex search.
    if text.isascii() or not any(map(text.__contains__, _FULL_WIDTH)):
        return text
    return text.translate(FOLD)


def prepare(answer: str) -> PreparedText:
    """The answer's prose with its markers, ready for sentence splitting."""
    text = "\n" + "\n".join(answer.splitlines())
    if "```" in text or "~~~" in text:
        # A fence runs to its closing line or, unclosed, to the end (as markdown renders it).
        text = _FENCE_RE.sub("\n", text)
    text = _RULE_RE.sub("\n", text)
    text = _LEAD_RE.sub("\n", text)
    if "|" in text:
        text = _TRAILING_PIPE_RE.sub(r"\1", text)
    text = text[1:]
    scan = fold(text)
    if "`" in scan:
        scan = _mask_inline_code(scan)
    markers: list[Marker] = []
    if "[" in scan or "【" in scan:
        scan, markers = mask_markers(scan, MARKER_START, MARKER_REST)
    return PreparedText(text, scan, markers)
