"""The trace stream's own commands against a real redis-server: reclaim that follows the
cursor, idle consumers deleted, acknowledged entries deleted, a fence that survives a loss."""

from __future__ import annotations

import redis

from observer.fleet.keys import GROUP, Keys
from observer.fleet.lease import Lease
from observer.fleet.stream import TraceStream


def _stream(client: redis.Redis) -> TraceStream:
    stream = TraceStream(client, Keys("s"), maxlen=1000)
    assert stream.ensure_group() is True
    assert stream.ensure_group() is False  # the fleet's one group, created once
    return stream


def test_reclaim_follows_the_cursor_round_the_pending_list(rclient: redis.Redis) -> None:
    stream = _stream(rclient)
    ids = [rclient.xadd(stream.keys.stream, {"trace": f"t{i}", "body": "{}"}) for i in range(5)]
    rclient.xreadgroup(GROUP, "dead", {stream.keys.stream: ">"})
    rclient.xclaim(stream.keys.stream, GROUP, "dead", 0, ids, idle=3_600_000)
    cursor = "0-0"
    taken: list[str] = []
    for _ in range(3):
        messages, cursor = stream.claim("live", 60_000, 2, cursor)
        taken += [m[0] for m in messages]
    assert taken == [i.decode() for i in ids]  # each once, in order, not from 0-0 each time
    assert cursor == "0-0"  # went round


def test_acknowledged_entries_leave_the_stream(rclient: redis.Redis) -> None:
    stream = _stream(rclient)
    rclient.xadd(stream.keys.stream, {"trace": "t", "body": "{}"})
    (message,) = stream.read("m", 10, block_ms=None)
    stream.ack([message[0]])
    assert stream.length() == 0 and stream.pending().count == 0


def test_consumers_with_nothing_pending_are_deleted_when_idle(rclient: redis.Redis) -> None:
    stream = _stream(rclient)
    rclient.xadd(stream.keys.stream, {"trace": "t", "body": "{}"})
    stream.read("holding", 10, block_ms=None)
    rclient.xgroup_createconsumer(stream.keys.stream, GROUP, "empty")  # read nothing since
    assert stream.forget_idle_consumers(3_600_000) == []  # nobody idle that long
    assert stream.forget_idle_consumers(0) == ["empty"]
    names = [c["name"].decode() for c in rclient.xinfo_consumers(stream.keys.stream, GROUP)]
    assert names == ["holding"]


def test_the_fence_stays_monotonic_when_redis_loses_the_counter(rclient: redis.Redis) -> None:
    keys = Keys("s")
    first = Lease(rclient, keys, "m1", 15)
    assert first.keep() and first.token is not None
    rclient.flushall()  # the counter goes with the data
    second = Lease(rclient, keys, "m2", 15)
    assert second.keep() and second.token is not None
    assert second.token > first.token
    assert second.value == f"m2:{second.token}"
