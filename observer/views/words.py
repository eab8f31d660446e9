"""Counted nouns: `1 trace`, `2 traces`, `1,200 copies`."""

from __future__ import annotations


def counted(count: int | float, noun: str, plural: str | None = None) -> str:
    """`count` (thousands separated) and `noun`, plural (`plural`, else noun + s) unless
    the count is 1."""
    many = plural if plural is not None else f"{noun}s"
    return f"{count:,.0f} {noun if count == 1 else many}"
