"""The resolver front: a page of records in, findings per record out. No threads.

`Resolver.resolve(page)` collects the distinct chunk ids a page of records
cites, answers what it can from a TTL cache (absent ids are cached too), asks
the store for the rest in batches of at most `batch_size`, and returns one
`Resolution` per record, in order. A store error never raises: the first
failing batch stops the lookups of this call, every record that needed an
id left unanswered gets `findings=None` with the reason, and the failure is
counted in `stats.errors` and logged once per call. Records whose ids were
all answered still get their findings. After a failure the store is left
alone for `error_backoff_s`: a store that is down or slow would otherwise
cost up to timeout_s on every page. Meanwhile records whose ids are not
cached get the last error's reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from observer.model import RagRecord, Signals
from observer.resolver.core import (
    CitedChunks,
    ResolverFindings,
    StoredChunk,
    cited_chunks,
    findings,
)
from observer.resolver.store import REASONS, ChunkStore, Reason, ResolverError

log = structlog.get_logger("observer.resolver")


@dataclass(frozen=True, slots=True)
class Resolution:
    """The resolver's answer for one record: findings, or why there are none."""

    trace_id: str
    findings: ResolverFindings | None
    error: Reason | None = None
    message: str | None = None  # the store's error, secrets redacted


def _zero_errors() -> dict[Reason, int]:
    return dict.fromkeys(REASONS, 0)


@dataclass
class ResolverStats:
    """Monotonic counters since start, for metrics; every reason present from the start."""

    ids_cited: int = 0  # distinct chunk ids per page, cached or not
    cache_hits: int = 0  # of those, answered from the cache
    lookups: int = 0  # queries (batches) sent to the store, failed ones included
    errors: dict[Reason, int] = field(default_factory=_zero_errors)  # failed batches by reason


_Entry = tuple[float, StoredChunk | None]  # (expires at, the chunk or None for absent)


class Resolver:
    """Looks the cited chunks of pages of records up in one store, with a TTL cache."""

    def __init__(
        self,
        store: ChunkStore,
        *,
        cache_ttl_s: float = 300.0,
        batch_size: int = 500,
        max_cached: int = 100_000,
        error_backoff_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.store = store
        self.cache_ttl_s = cache_ttl_s
        self.batch_size = min(batch_size, store.max_ids_per_query)
        self.max_cached = max_cached
        self.error_backoff_s = error_backoff_s
        self.clock = clock
        self.stats = ResolverStats()
        self._cache: dict[str, _Entry] = {}
        self._last_error: ResolverError | None = None
        self._paused_until = float("-inf")

    def resolve_records(self, page: Sequence[tuple[RagRecord, Signals]]) -> list[Resolution]:
        """`resolve` over records and their signals."""
        return self.resolve([cited_chunks(record, signals) for record, signals in page])

    def resolve(self, page: Sequence[CitedChunks]) -> list[Resolution]:
        """One Resolution per item of `page`, in order. Never raises for a store's failure."""
        now = self.clock()
        known: dict[str, StoredChunk | None] = {}
        wanted: dict[str, None] = {}  # insertion-ordered set
        for cited in page:
            for chunk_id in cited.chunk_ids:
                if chunk_id in known or chunk_id in wanted:
                    continue
                entry = self._cache.get(chunk_id)
                if entry is not None and entry[0] > now:
                    known[chunk_id] = entry[1]
                else:
                    wanted[chunk_id] = None
        self.stats.ids_cited += len(known) + len(wanted)
        self.stats.cache_hits += len(known)
        skipped = bool(wanted) and now < self._paused_until and self._last_error is not None
        if skipped:
            assert self._last_error is not None
            last = self._last_error
            failure: ResolverError | None = ResolverError(
                last.reason,
                f"{last.detail} (not asked again for {self._paused_until - now:.0f}s)",
            )
        else:
            failure = self._fetch(list(wanted), known)
        stored = {k: v for k, v in known.items() if v is not None}
        results = []
        failed = 0
        for cited in page:
            if all(c in known for c in cited.chunk_ids):
                results.append(Resolution(cited.trace_id, findings(cited, stored)))
            else:
                assert failure is not None
                results.append(Resolution(cited.trace_id, None, failure.reason, failure.detail))
                failed += 1
        if failure is not None and not skipped:
            log.warning(
                "resolver_lookup_failed",
                store=self.store.kind,
                reason=failure.reason,
                error=failure.detail,
                ids_unanswered=sum(1 for c in wanted if c not in known),
                records_without_findings=failed,
            )
        return results

    def _fetch(
        self, wanted: list[str], known: dict[str, StoredChunk | None]
    ) -> ResolverError | None:
        """Looks `wanted` up batch by batch into `known` and the cache; the first error stops."""
        for start in range(0, len(wanted), self.batch_size):
            batch = wanted[start : start + self.batch_size]
            self.stats.lookups += 1
            try:
                got = self.store.lookup(batch)
            except ResolverError as error:
                return self._failed(error)
            except Exception as error:  # an adapter's bug must not stop scoring either
                return self._failed(
                    ResolverError("error", f"{self.store.kind}: {type(error).__name__}")
                )
            expires = self.clock() + self.cache_ttl_s
            for chunk_id in batch:
                chunk = got.get(chunk_id)
                known[chunk_id] = chunk
                self._remember(chunk_id, (expires, chunk))
        return None

    def _failed(self, error: ResolverError) -> ResolverError:
        self.stats.errors[error.reason] += 1
        self._last_error = error
        self._paused_until = self.clock() + self.error_backoff_s
        return error

    def _remember(self, chunk_id: str, entry: _Entry) -> None:
        if self.cache_ttl_s <= 0 or self.max_cached <= 0:
            return
        self._cache.pop(chunk_id, None)
        self._cache[chunk_id] = entry
        while len(self._cache) > self.max_cached:
            del self._cache[next(iter(self._cache))]

    def close(self) -> None:
        """Closes the store's client; the resolver is not used afterwards."""
        self.store.close()
