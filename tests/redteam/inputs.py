"""The hostile inputs of the red-team suite, kept as regressions (issue 43).

An answer is text an end user can make the model write, up to
`limits.max_answer_chars`; `attack(motif)` repeats a motif to that length
between a newline (line-anchored expressions start there) and a letter (a run
that ends at the line's end is the easy case). The motifs are the ones found
quadratic (runs of `|`, of backticks, of blanks after a newline) and the
shapes the first attack tried (brackets, digits, unclosed markers, markers by
the hundred thousand), plus every character the text expressions give a
meaning to.
"""

from __future__ import annotations

from functools import cache
from typing import Final

from observer.config import Settings

MAX_ANSWER_CHARS: Final = Settings().limits.max_answer_chars

MOTIFS: Final = (
    # Found quadratic (issue 43, finding 1): the answer's text preparation.
    "|",
    " |",
    "| ",
    "`",
    "`a",
    "a`",
    " ",
    "\t",
    # The first attack's shapes: brackets, digits, unclosed markers, many markers.
    "[",
    "]",
    "[1",
    "[1,",
    "[1-",
    "[^",
    "[1]",
    "[1](",
    "【",
    "【1",
    "1",
    "1,",
    "1.",
    # Every character the sentence, marker, code and markdown expressions give a meaning.
    ".",
    ",",
    "-",
    "|-",
    ":-",
    "- ",
    "1. ",
    "> ",
    "#",
    "*",
    "_",
    "~",
    "(",
    ")",
    "\n",
    "\n ",
    "\n|",
    "```\n",
    "\u3000",
    "x.",
    "St.",
    "。",
    "…",
    "\x01",
    "\x02",
    "<",
    "</sources>",
    "Source 1: ",
)

# What a random adversarial string is drawn from (tests/redteam/test_linear_text.py).
ALPHABET: Final = "|`[]【】()^-–,，、.:;!?。…#>*_~ \t\n\u3000\x00\x01\x021aA<>/\"'"


# Whole answers found quadratic (issue 43, finding 1): a run of pipes or backticks after a
# word (at a line's start they are markdown structure, stripped first), blanks on a line.
RUNS: Final = (("|", "a"), (" |", "a"), ("`", "a"), (" ", "\n"), ("\t", "\n"))


@cache
def attack(motif: str, length: int = MAX_ANSWER_CHARS, lead: str = "\n") -> str:
    """`motif` repeated to `length` characters, after `lead` (a newline) and before a letter."""
    size = length - len(lead) - 1
    body = motif * (size // len(motif) + 1)
    return lead + body[:size] + "x"
