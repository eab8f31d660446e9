"""The resolver's scores, `missing_chunks` and `stale_citations` (docs/scores.md). Pure.

Written only when cited chunks were looked up; the ids, timestamps and
environment follow observer.scores' rules (`score_events_of`).
"""

from __future__ import annotations

from observer.model import RagRecord, ScoreEvent
from observer.resolver.core import ResolverFindings
from observer.scores import catalogue, score_events_of
from observer.scores.catalogue import Producer, ScoreEntry

RESOLVER_SCORE_NAMES = catalogue.names_of(Producer.RESOLVER)
_SHOWN = 10


def _ids(ids: tuple[str, ...]) -> str:
    shown = ", ".join(ids[:_SHOWN])
    return shown + (f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else "")


def _chunks(count: int) -> str:
    return "1 cited chunk" if count == 1 else f"{count} cited chunks"


def resolver_score_events(record: RagRecord, found: ResolverFindings | None) -> list[ScoreEvent]:
    """`missing_chunks` and `stale_citations` of one record; none without a lookup."""
    if found is None or found.looked_up == 0:
        return []
    looked = found.looked_up
    if found.missing:
        missing = (
            f"{len(found.missing)} of {_chunks(looked)} missing from the store: "
            f"{_ids(found.missing)}"
        )
    else:
        missing = f"{_chunks(looked)}, none missing from the store"
    present = looked - len(found.missing)
    if found.stale:
        stale = (
            f"{len(found.stale)} of {_chunks(present)} in the store changed since the answer: "
            f"{_ids(found.stale)}"
        )
    else:
        stale = f"{_chunks(present)} in the store, none changed since the answer"
    if found.unverifiable:
        stale += f"; {found.unverifiable} unverifiable (no chunk id, hash or text)"
    entries: list[ScoreEntry] = [
        catalogue.MISSING_CHUNKS.entry(float(len(found.missing)), missing),
        catalogue.STALE_CITATIONS.entry(float(len(found.stale)), stale),
    ]
    return score_events_of(record, entries)
