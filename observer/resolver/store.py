"""What every chunk store adapter is: the Protocol, its field names, its one error.

::

    ResolverError(reason, message)   every failure of a store, translated at the edge
      reason "unreachable"   the store cannot be reached (refused, DNS, connect timeout)
      reason "timeout"       it was reached but did not answer within timeout_s
      reason "bad_field"     the configured collection, table or a field does not exist
      reason "error"         anything else (permissions, a broken hook, a bad reply)

The message names the store and the problem; it never holds a secret (the
adapters redact their token, password or DSN, and any URL credentials).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from observer.resolver.core import StoredChunk

Reason = Literal["unreachable", "timeout", "bad_field", "error"]
REASONS: tuple[Reason, ...] = ("unreachable", "timeout", "bad_field", "error")


class ResolverError(Exception):
    """A chunk store failed; `reason` is one of REASONS, the message holds no secret."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason: Reason = reason
        self.detail = message


@dataclass(frozen=True, slots=True)
class Fields:
    """Where a store keeps each piece of a chunk; "" for a field the store does not have."""

    id_field: str = "chunk_id"
    hash_field: str = "text_hash"
    text_field: str = "text"
    doc_field: str = "doc_id"
    updated_field: str = "updated_at"

    def __post_init__(self) -> None:
        if not self.id_field:
            raise ValueError("id_field must name the field holding the chunk id")

    @property
    def read(self) -> tuple[str, ...]:
        """The fields to fetch: the id first, then those configured, each once."""
        names = [self.id_field]
        for name in (self.hash_field, self.text_field, self.doc_field, self.updated_field):
            if name and name not in names:
                names.append(name)
        return tuple(names)


class ChunkStore(Protocol):
    """A live chunk store, looked up by chunk id. Raises only ResolverError."""

    kind: str
    max_ids_per_query: int

    def lookup(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        """The chunks of `chunk_ids` the store holds, by id; absent ids are left out."""
        ...

    def close(self) -> None: ...
