"""Trace JSON (Observations API v2) -> RagRecord. Pure: no I/O."""

from __future__ import annotations

from observer.mapping.convention import (
    Explained,
    MappingRules,
    Skip,
    Step,
    explain_trace,
    map_trace,
)

__all__ = ["Explained", "MappingRules", "Skip", "Step", "explain_trace", "map_trace"]
