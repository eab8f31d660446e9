"""What `observer check` makes of a sample of recently cited chunks (docs/resolver.md). Pure.

Reaching the store proves little: a wrong `id_field` or collection answers
every lookup with nothing, and a wrong `hash_field` and `text_field` make
every citation unverifiable. Looking up chunk ids that recent answers cited
shows both, before the daemon scores a single trace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from observer.resolver.core import CitedChunks, StoredChunk, findings
from observer.resolver.store import Fields


def sample_ids(cited: Sequence[CitedChunks], limit: int) -> list[str]:
    """Up to `limit` distinct chunk ids, taking one per trace in turn (not all from one)."""
    chosen: dict[str, None] = {}
    rounds = max((len(c.chunks) for c in cited), default=0)
    for index in range(rounds):
        for item in cited:
            if len(chosen) >= limit:
                return list(chosen)
            if index < len(item.chunks):
                chosen.setdefault(item.chunks[index].chunk_id, None)
    return list(chosen)


@dataclass(frozen=True, slots=True)
class SampleReport:
    looked_up: int
    found: int
    stale: int
    with_hash: int
    with_text: int
    with_doc: int
    with_updated: int
    fields: Fields

    @property
    def problem(self) -> str | None:
        """Why the resolver cannot work as configured, or None."""
        if self.looked_up and not self.found:
            return (
                f"none of {self.looked_up} recently cited chunk ids is in the store: is "
                f"id_field {self.fields.id_field!r} right, and the collection?"
            )
        if self.found and not (self.with_hash or self.with_text):
            named = " or ".join(
                repr(name) for name in (self.fields.hash_field, self.fields.text_field) if name
            )
            found = (
                "the chunk found has" if self.found == 1 else f"the {self.found} chunks found have"
            )
            return (
                f"{found} no {named or 'hash or text field'}: "
                "every citation would be unverifiable (set hash_field or text_field)"
            )
        return None

    def describe(self) -> str:
        if not self.looked_up:
            return "no recently cited chunk ids to look up"
        f = self.fields
        present = ", ".join(
            f"{name} {count}"
            for name, count in (
                (f.hash_field, self.with_hash),
                (f.text_field, self.with_text),
                (f.doc_field, self.with_doc),
                (f.updated_field, self.with_updated),
            )
            if name
        )
        chunks = "chunk" if self.looked_up == 1 else "chunks"
        return (
            f"{self.looked_up} recently cited {chunks} looked up: {self.found} found "
            f"({present}), {self.looked_up - self.found} missing, {self.stale} stale"
        )


def sample_report(
    cited: Sequence[CitedChunks],
    ids: Sequence[str],
    stored: Mapping[str, StoredChunk],
    fields: Fields,
) -> SampleReport:
    """What the store said of `ids` (chosen from `cited`); stale counted over those ids."""
    wanted = set(ids)
    found = [stored[i] for i in ids if i in stored]
    stale: set[str] = set()
    for item in cited:
        chunks = tuple(c for c in item.chunks if c.chunk_id in wanted)
        stale.update(findings(CitedChunks(item.trace_id, chunks, ()), stored).stale)
    return SampleReport(
        looked_up=len(ids),
        found=len(found),
        stale=len(stale),
        with_hash=sum(1 for c in found if c.text_hash),
        with_text=sum(1 for c in found if c.text),
        with_doc=sum(1 for c in found if c.doc_id),
        with_updated=sum(1 for c in found if c.updated_at),
        fields=fields,
    )
