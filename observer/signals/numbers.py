"""Numeric grounding: numbers of the answer found in its sources (DESIGN §3.5).

Numbers are integers, decimals and percentages; thousands separators and a
trailing `%` are dropped and full-width digits folded, so `1,200`, `１２００`
and `1200` are the same number. A digit run glued to a letter before it
(`v2`, `H100`) is a name, not a number; a dotted run with more than one dot
(`2.1.0`, `10.0.0.1`) is a version or an address, not a number.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from observer.model import NumericGrounding

_FOLD = str.maketrans("０１２３４５６７８９．％", "0123456789.%")
NUMBER_RE = re.compile(
    r"(?<![A-Za-z0-9_.,\x00])(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?![.,]?[0-9])"
)


def canonical(number: str) -> str:
    """`1,200.50` -> `1200.5`: digits and an optional decimal point."""
    whole, _, fraction = number.replace(",", "").partition(".")
    whole = whole.lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}" if fraction else whole


def numbers_in(scan_text: str) -> list[str]:
    """Canonical numbers of already-folded text, in order, repeats kept."""
    return [canonical(m.group()) for m in NUMBER_RE.finditer(scan_text)]


def source_numbers(source_text: str) -> frozenset[str]:
    return frozenset(numbers_in(source_text.translate(_FOLD)))


def ground(
    sentences: Iterable[tuple[str, Sequence[int]]],
    sources: Sequence[str],
) -> NumericGrounding:
    """Check each sentence's numbers against the sources it cites.

    `sentences` are (folded text without markers, refs) of the substantive
    sentences. A sentence with a valid ref is checked against those sources
    only; one without against all of them.
    """
    total = 0
    grounded = 0
    unsupported: dict[str, None] = {}
    per_source: list[frozenset[str]] | None = None
    anywhere: frozenset[str] = frozenset()
    for text, refs in sentences:
        found = dict.fromkeys(numbers_in(text))
        if not found:
            continue
        if per_source is None:
            per_source = [source_numbers(s) for s in sources]
            anywhere = frozenset().union(*per_source)
        cited = [per_source[r - 1] for r in refs if 1 <= r <= len(per_source)]
        allowed = frozenset().union(*cited) if cited else anywhere
        for number in found:
            total += 1
            if number in allowed:
                grounded += 1
            else:
                unsupported.setdefault(number)
    return NumericGrounding(numbers=total, grounded=grounded, unsupported=tuple(unsupported))
