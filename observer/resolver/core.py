"""Which chunks an answer cites, and what the store says of them (docs/resolver.md). Pure.

- `cited_chunks(record, signals)`: the chunk ids of the sources that the
  cited sentences' valid refs point to, each with its answer-time hash; a
  cited source without a `chunk_id` cannot be looked up (unverifiable).
- `findings(cited, stored)`: given what the store holds for those ids,
  which are missing (absent from the store), stale (present, hash differs)
  and unverifiable (no hash and no text on one side: never stale).

Hash rules: the answer-time hash is the source's logged `text_hash`, else the
SHA-256 hex of its UTF-8 text; the stored hash is the stored `text_hash`,
else the SHA-256 hex of the stored text. Hashes are compared as lower-case
hex, a leading `sha256:` dropped. An empty string is no hash and no text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from observer.model import RagRecord, Signals
from observer.signals import cited_sources


def sha256_hex(text: str) -> str:
    """SHA-256 hex of the UTF-8 text; a lone surrogate (not UTF-8) is hashed, never raised."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def normalise_hash(value: str | None) -> str | None:
    """Lower-case hex without a `sha256:` prefix; None for no hash (None or blank)."""
    if value is None:
        return None
    cleaned = value.strip().lower()
    cleaned = cleaned.removeprefix("sha256:")
    return cleaned or None


def _hash_of(text_hash: str | None, text: str | None) -> str | None:
    logged = normalise_hash(text_hash)
    if logged is not None:
        return logged
    return sha256_hex(text) if text else None


def answer_hash(text_hash: str | None, text: str | None) -> str | None:
    """The answer-time hash of a source: its logged hash, else SHA-256 of its text."""
    return _hash_of(text_hash, text)


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk as the store holds it now; any field may be absent."""

    text_hash: str | None = None
    text: str | None = None
    doc_id: str | None = None
    updated_at: str | None = None

    @property
    def hash(self) -> str | None:
        """The stored `text_hash`, else SHA-256 of the stored text; None without either."""
        return _hash_of(self.text_hash, self.text)


@dataclass(frozen=True, slots=True)
class CitedChunk:
    """One distinct chunk id the answer cites, the sources citing it, its answer-time hash."""

    chunk_id: str
    numbers: tuple[int, ...]  # the source numbers ([n]) that carry this chunk id
    answer_hash: str | None


@dataclass(frozen=True, slots=True)
class CitedChunks:
    """What one record's cited sentences cite, ready to be looked up."""

    trace_id: str
    chunks: tuple[CitedChunk, ...]  # distinct chunk ids, in source order
    without_id: tuple[int, ...]  # cited source numbers without a chunk_id

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        return tuple(c.chunk_id for c in self.chunks)


def cited_chunks(record: RagRecord, signals: Signals) -> CitedChunks:
    """The chunks behind the valid refs of the record's cited sentences.

    A chunk id cited through several sources is looked up once; its
    answer-time hash is the first one its sources give.
    """
    by_id: dict[str, tuple[list[int], str | None]] = {}
    without_id: list[int] = []
    for number in cited_sources(signals.citations.sentences, len(record.sources)):
        source = record.sources[number - 1]
        if not source.chunk_id:
            without_id.append(number)
            continue
        numbers, known = by_id.setdefault(source.chunk_id, ([], None))
        numbers.append(number)
        if known is None:
            by_id[source.chunk_id] = (numbers, answer_hash(source.text_hash, source.text))
    chunks = tuple(
        CitedChunk(chunk_id, tuple(numbers), hashed)
        for chunk_id, (numbers, hashed) in by_id.items()
    )
    return CitedChunks(record.trace_id, chunks, tuple(without_id))


@dataclass(frozen=True, slots=True)
class ResolverFindings:
    """What the store said about one record's cited chunks (docs/resolver.md)."""

    missing: tuple[str, ...]  # cited chunk ids absent from the store, in source order
    stale: tuple[str, ...]  # present, but the text changed since the answer
    unverifiable: int  # cited sources without chunk_id, and chunks without hash or text
    looked_up: int  # distinct cited chunk ids looked up

    @property
    def flagged(self) -> bool:
        """Missing or stale citations: the judge oversamples such traces."""
        return bool(self.missing or self.stale)

    @classmethod
    def from_obj(cls, obj: Mapping[str, object]) -> ResolverFindings:
        """Back from the JSON of the dataclass (a judge sample kept in the state file)."""
        missing, stale = obj.get("missing", ()), obj.get("stale", ())
        unverifiable, looked_up = obj.get("unverifiable", 0), obj.get("looked_up", 0)
        if not (
            isinstance(missing, list | tuple)
            and isinstance(stale, list | tuple)
            and isinstance(unverifiable, int)
            and isinstance(looked_up, int)
        ):
            raise ValueError("resolver findings are malformed")
        return cls(tuple(map(str, missing)), tuple(map(str, stale)), unverifiable, looked_up)


def findings(cited: CitedChunks, stored: Mapping[str, StoredChunk]) -> ResolverFindings:
    """Missing, stale and unverifiable chunks, given the store's answer for these ids.

    `stored` holds every chunk the store returned (others may be there too);
    an id of `cited` absent from it is missing.
    """
    missing: list[str] = []
    stale: list[str] = []
    unverifiable = len(cited.without_id)
    for chunk in cited.chunks:
        now = stored.get(chunk.chunk_id)
        if now is None:
            missing.append(chunk.chunk_id)
            continue
        now_hash = now.hash
        if chunk.answer_hash is None or now_hash is None:
            unverifiable += 1
        elif chunk.answer_hash != now_hash:
            stale.append(chunk.chunk_id)
    return ResolverFindings(tuple(missing), tuple(stale), unverifiable, len(cited.chunks))
