"""The Resolver front: dedupe, TTL cache, batches, errors kept from the caller, stats."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from observer.model import RagRecord, Source
from observer.resolver import (
    CitedChunk,
    CitedChunks,
    Resolution,
    Resolver,
    ResolverError,
    ResolverFindings,
    StoredChunk,
)
from observer.signals import SignalParams, compute


class FakeStore:
    """A chunk store in a dict; `fail` makes the next lookups raise it."""

    kind = "fake"

    def __init__(self, chunks: dict[str, StoredChunk], max_ids_per_query: int = 500) -> None:
        self.chunks = chunks
        self.max_ids_per_query = max_ids_per_query
        self.calls: list[list[str]] = []
        self.fail: Exception | None = None
        self.fail_after = 0  # lookups that succeed before `fail` applies
        self.closed = False

    def lookup(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        self.calls.append(list(chunk_ids))
        if self.fail is not None and len(self.calls) > self.fail_after:
            raise self.fail
        return {i: self.chunks[i] for i in chunk_ids if i in self.chunks}

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cited(trace_id: str, *ids: str) -> CitedChunks:
    return CitedChunks(
        trace_id, tuple(CitedChunk(i, (n,), "h") for n, i in enumerate(ids, start=1)), ()
    )


SAME = StoredChunk(text_hash="h")
CHANGED = StoredChunk(text_hash="other")


def make(
    store: FakeStore, clock: Clock | None = None, *, cache_ttl_s: float = 300, batch_size: int = 500
) -> Resolver:
    return Resolver(store, clock=clock or Clock(), cache_ttl_s=cache_ttl_s, batch_size=batch_size)


def test_one_lookup_per_page_ids_deduped() -> None:
    store = FakeStore({"a": SAME, "b": CHANGED})
    resolver = make(store)
    got = resolver.resolve([cited("t1", "a", "b"), cited("t2", "b", "c"), cited("t3")])
    assert store.calls == [["a", "b", "c"]]
    assert got == [
        Resolution("t1", ResolverFindings((), ("b",), 0, 2)),
        Resolution("t2", ResolverFindings(("c",), ("b",), 0, 2)),
        Resolution("t3", ResolverFindings((), (), 0, 0)),
    ]
    assert (resolver.stats.ids_cited, resolver.stats.cache_hits) == (3, 0)
    assert resolver.stats.lookups == 1


def test_cache_answers_until_the_ttl_runs_out_absent_ids_too() -> None:
    store = FakeStore({"a": SAME})
    clock = Clock()
    resolver = make(store, clock, cache_ttl_s=60)
    resolver.resolve([cited("t1", "a", "gone")])
    clock.now += 59
    again = resolver.resolve([cited("t2", "a", "gone")])
    assert len(store.calls) == 1
    assert again[0].findings == ResolverFindings(("gone",), (), 0, 2)
    assert resolver.stats.cache_hits == 2
    clock.now += 2
    store.chunks["gone"] = SAME  # re-indexed meanwhile
    later = resolver.resolve([cited("t3", "a", "gone")])
    assert store.calls[-1] == ["a", "gone"]
    assert later[0].findings == ResolverFindings((), (), 0, 2)


def test_no_cache_with_ttl_zero() -> None:
    store = FakeStore({"a": SAME})
    resolver = make(store, cache_ttl_s=0)
    resolver.resolve([cited("t1", "a")])
    resolver.resolve([cited("t1", "a")])
    assert len(store.calls) == 2


def test_cache_is_bounded() -> None:
    store = FakeStore({})
    resolver = Resolver(store, clock=Clock(), max_cached=2)
    resolver.resolve([cited("t", "a", "b", "c")])
    resolver.resolve([cited("t", "a")])  # evicted first
    resolver.resolve([cited("t", "c")])  # still cached
    assert store.calls == [["a", "b", "c"], ["a"]]


def test_batches_at_most_batch_size_and_the_store_limit() -> None:
    store = FakeStore({}, max_ids_per_query=4)
    resolver = make(store, batch_size=10)
    resolver.resolve([cited("t", *(f"c{i}" for i in range(10)))])
    assert [len(c) for c in store.calls] == [4, 4, 2]
    resolver = make(FakeStore({}), batch_size=3)
    assert resolver.batch_size == 3


def test_a_store_error_leaves_findings_out_with_the_reason_and_never_raises() -> None:
    store = FakeStore({"a": SAME}, max_ids_per_query=2)
    store.fail = ResolverError("unreachable", "fake: connection refused")
    store.fail_after = 1  # the first batch works, the second fails, the third is not tried
    clock = Clock()
    resolver = make(store, clock)
    page = [cited("t1", "a", "b"), cited("t2", "c"), cited("t3", "e", "f"), cited("t4", "a")]
    with structlog.testing.capture_logs() as logs:
        got = resolver.resolve(page)
    assert store.calls == [["a", "b"], ["c", "e"]]
    assert got[0].findings == ResolverFindings(("b",), (), 0, 2)
    assert got[1] == Resolution("t2", None, "unreachable", "fake: connection refused")
    assert got[2].findings is None and got[2].error == "unreachable"
    assert got[3].findings == ResolverFindings((), (), 0, 1)
    assert resolver.stats.errors == {"unreachable": 1, "timeout": 0, "bad_field": 0, "error": 0}
    [event] = [e for e in logs if e["event"] == "resolver_lookup_failed"]
    assert event["reason"] == "unreachable" and event["records_without_findings"] == 2
    # Once the back-off is over, what was answered stays cached; only the rest is asked for.
    store.fail = None
    clock.now += 31
    resolver.resolve([cited("t2", "c"), cited("t1", "a", "b")])
    assert store.calls[-1] == ["c"]


def test_after_a_failure_the_store_is_left_alone_for_the_backoff() -> None:
    store = FakeStore({"a": SAME})
    store.fail = ResolverError("timeout", "fake: no answer within 5s")
    clock = Clock()
    resolver = Resolver(store, clock=clock, error_backoff_s=30)
    resolver.resolve([cited("t1", "b")])
    store.fail = None
    clock.now += 29
    with structlog.testing.capture_logs() as logs:
        [got] = resolver.resolve([cited("t2", "a")])
    assert len(store.calls) == 1  # not asked
    assert (got.findings, got.error) == (None, "timeout")
    assert got.message == "fake: no answer within 5s (not asked again for 1s)"
    assert resolver.stats.errors["timeout"] == 1  # one real failure
    assert logs == []  # logged when it failed, not on every page after
    [empty] = resolver.resolve([cited("t3")])  # nothing to ask: findings all the same
    assert empty.findings == ResolverFindings((), (), 0, 0)
    clock.now += 2
    [got] = resolver.resolve([cited("t2", "a")])
    assert got.findings == ResolverFindings((), (), 0, 1)
    assert len(store.calls) == 2


def test_an_adapter_bug_is_an_error_not_a_crash() -> None:
    store = FakeStore({})
    store.fail = KeyError("oops")
    resolver = make(store)
    [got] = resolver.resolve([cited("t1", "a")])
    assert (got.findings, got.error, got.message) == (None, "error", "fake: KeyError")
    assert resolver.stats.errors["error"] == 1


def test_stats_start_at_zero_for_every_reason() -> None:
    stats = make(FakeStore({})).stats
    assert stats.errors == {"unreachable": 0, "timeout": 0, "bad_field": 0, "error": 0}
    assert (stats.lookups, stats.ids_cited, stats.cache_hits) == (0, 0, 0)


def test_resolve_records_from_records_and_signals() -> None:
    record = RagRecord(
        trace_id="t1",
        question="q",
        answer="The fee is twenty euros [1]. Refunds take five days [2].",
        sources=(Source(text="fee", chunk_id="c1"), Source(text="refunds", chunk_id="c2")),
    )
    store = FakeStore({"c1": StoredChunk(text="fee"), "c2": StoredChunk(text="refunds, changed")})
    resolver = make(store)
    [got] = resolver.resolve_records([(record, compute(record, SignalParams()))])
    assert got.findings == ResolverFindings((), ("c2",), 0, 2)
    resolver.close()
    assert store.closed


def test_bad_batch_size() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        Resolver(FakeStore({}), batch_size=0)


# ---- properties -----------------------------------------------------------------------------

_IDS = st.sampled_from(["a", "b", "c", "d", "e", "f", "g"])


@given(
    st.lists(st.lists(_IDS, max_size=5, unique=True), max_size=6),
    st.integers(min_value=1, max_value=8),
    st.sets(_IDS),
)
def test_batching_and_caching_do_not_change_findings(
    page_ids: list[list[str]], batch_size: int, present: set[str]
) -> None:
    page = [cited(f"t{n}", *ids) for n, ids in enumerate(page_ids)]
    chunks = {i: SAME if i < "d" else CHANGED for i in present}
    one_go = make(FakeStore(dict(chunks)), batch_size=500).resolve(page)
    store = FakeStore(dict(chunks))
    batched = make(store, batch_size=batch_size)
    assert batched.resolve(page) == one_go
    assert all(len(call) <= batch_size for call in store.calls)
    assert batched.resolve(page) == one_go  # now from the cache
    asked = [i for call in store.calls for i in call]
    assert len(asked) == len(set(asked))  # each id asked once
