"""Citation resolver (docs/resolver.md): are the chunks an answer cites still there, unchanged?

Pure core: `cited_chunks` (which chunk ids a record cites), `findings` (the
hash rules: missing, stale, unverifiable) and the scores
(`resolver_score_events`); the judge's funnel over the findings is
`observer.judge.funnel`.
`Resolver` batches, caches and counts lookups in one `ChunkStore`; the
adapters over each store's own client are in `observer.resolver.backends`
(imported on demand: their clients are the optional `resolver` extra).
"""

from __future__ import annotations

from observer.resolver.core import (
    CitedChunk,
    CitedChunks,
    ResolverFindings,
    StoredChunk,
    answer_hash,
    cited_chunks,
    findings,
)
from observer.resolver.front import Resolution, Resolver
from observer.resolver.scores import RESOLVER_SCORE_NAMES, resolver_score_events
from observer.resolver.store import ChunkStore, Fields, ResolverError

__all__ = [
    "RESOLVER_SCORE_NAMES",
    "ChunkStore",
    "CitedChunk",
    "CitedChunks",
    "Fields",
    "Resolution",
    "Resolver",
    "ResolverError",
    "ResolverFindings",
    "StoredChunk",
    "answer_hash",
    "cited_chunks",
    "findings",
    "resolver_score_events",
]
