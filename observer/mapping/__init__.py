"""Trace JSON (Observations API v2) -> RagRecord. Pure: no I/O.

`convention` reads a trace by the default convention and the `[mapping]` rules; the modules
beside it each hold one job (docs/trace-convention.md): `rules` (the settings, a skip, the
trail, the provenance), `messages` (chat messages, tool calls and results), `documents`
(lists of documents in every shape, copies merged), `sources` (finding and checking the
documents the model saw), `answer` (which generation answered, and what the user got),
`evidence` (the string-level content checks), `tree` (the order of observations),
`proposals` (what `observer discover` proposes).
"""

from __future__ import annotations

from observer.mapping.convention import Explained, explain_trace, map_trace, read_trace
from observer.mapping.rules import MappingRules, Provenance, Skip, Step

__all__ = [
    "Explained",
    "MappingRules",
    "Provenance",
    "Skip",
    "Step",
    "explain_trace",
    "map_trace",
    "read_trace",
]
