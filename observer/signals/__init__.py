"""Pure trust signals of one RagRecord (docs/signals.md). No I/O here.

`compute` and the text passes behind it (their regular expressions) are loaded on
first use: reading the parameters (`SignalParams`, as `observer config show` does)
needs none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from observer.signals.params import CragParams, SignalParams

if TYPE_CHECKING:
    from observer.signals.concentration import cited_sources
    from observer.signals.of_record import compute, retrieval_scores

__all__ = ["CragParams", "SignalParams", "cited_sources", "compute", "retrieval_scores"]

_LAZY = {
    "compute": "observer.signals.of_record",
    "retrieval_scores": "observer.signals.of_record",
    "cited_sources": "observer.signals.concentration",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value  # found directly from now on
    return value
