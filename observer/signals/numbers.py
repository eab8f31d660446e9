"""Numeric grounding: numbers of the answer found in its sources (docs/signals.md).

Numbers are integers, decimals and percentages; thousands separators and a
trailing `%` are dropped and full-width digits folded, so `1,200`, `１２００`
and `1200` are the same number, and so are `3.50` and `3.5`. A digit run glued
to a letter before it (`v2`, `H100`) is a name, not a number; a dotted run
with more than one dot (`2.1.0`, `10.0.0.1`) is a version or an address.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from observer.model import NumericGrounding
from observer.signals.text import fold

# Led by a digit (the look-behind on the character before it comes second) so
# the regex engine can skip to digits instead of trying every position.
NUMBER_RE = re.compile(
    r"[0-9](?<![A-Za-z0-9_.,\x00][0-9])(?:[0-9]{0,2}(?:,[0-9]{3})+|[0-9]*)"
    r"(?:\.[0-9]+)?(?![.,]?[0-9])"
)


# Cached: an answer and its sources repeat a handful of numbers, and the
# cached lookup runs in C (no Python frame), also through `map`.
@lru_cache(maxsize=4096)
def canonical(number: str) -> str:
    """`1,200.50` -> `1200.5`: digits and an optional decimal point."""
    if number.isdigit() and number[0] != "0":
        return number
    whole, _, fraction = number.replace(",", "").partition(".")
    whole = whole.lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}" if fraction else whole


def number_set(text: str) -> frozenset[str]:
    """The distinct canonical numbers of `text`."""
    return frozenset(map(canonical, set(NUMBER_RE.findall(fold(text)))))


def ground(
    sentences: Iterable[tuple[Sequence[str], Sequence[int]]],
    sources: Sequence[str],
) -> NumericGrounding:
    """Check each sentence's numbers against the sources it cites.

    `sentences` holds (numbers as written, refs) of the substantive
    sentences. A sentence with a valid ref is checked against those sources
    only; one without against all of them. A number counts once per sentence.
    """
    total = 0
    grounded = 0
    unsupported: dict[str, None] = {}
    per_source: list[frozenset[str]] | None = None
    anywhere: frozenset[str] = frozenset()
    for raw, refs in sentences:
        if per_source is None:
            per_source = [number_set(s) for s in sources]
            anywhere = frozenset().union(*per_source)
        n_sources = len(per_source)
        cited: list[frozenset[str]] = []
        for r in refs:
            if 0 < r <= n_sources:
                cited.append(per_source[r - 1])
        if not cited:
            allowed = anywhere
        elif len(cited) == 1:
            allowed = cited[0]
        else:
            allowed = frozenset().union(*cited)
        seen: set[str] = set()
        for number in map(canonical, raw):
            if number in seen:
                continue
            seen.add(number)
            total += 1
            if number in allowed:
                grounded += 1
            else:
                unsupported.setdefault(number)
    return NumericGrounding(numbers=total, grounded=grounded, unsupported=tuple(unsupported))
