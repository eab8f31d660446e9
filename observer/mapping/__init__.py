"""Trace JSON (Observations API v2) -> RagRecord. Pure: no I/O."""

from __future__ import annotations

from observer.mapping.convention import MappingRules, Skip, map_trace

__all__ = ["MappingRules", "Skip", "map_trace"]
