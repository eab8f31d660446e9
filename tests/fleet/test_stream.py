"""The trace stream's own commands against a real redis-server: reclaim that follows the
cursor, idle consumers deleted, acknowledged entries deleted, roots of gone entries dropped,
a fence that survives a loss."""

from __future__ import annotations

from datetime import UTC, datetime

import redis

from observer.fleet.keys import GROUP, Keys
from observer.fleet.lease import Lease
from observer.fleet.stream import INFLIGHT_LOOK, TraceStream


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


def _entry(client: redis.Redis, stream: TraceStream, root_s: float) -> str:
    """An entry added and its root put in `inflight` in two steps, as a foreign writer
    (or `observer fleet dead --replay` before) did."""
    entry_id = client.xadd(stream.keys.stream, {"trace": "t", "body": "{}"}).decode()
    client.zadd(stream.keys.inflight, {entry_id: root_s})
    return entry_id


def test_a_root_whose_entry_is_gone_holds_neither_the_watermark_nor_the_count(
    rclient: redis.Redis,
) -> None:
    # The writer's second step lands after a worker scored, acknowledged and deleted its
    # entry (or buried it): nothing takes that root out again. Before, it held the
    # watermark and `unacked` for ever, and the fleet never drained (a busy machine).
    stream = _stream(rclient)
    early = _entry(rclient, stream, 1000.0)
    _entry(rclient, stream, 2000.0)
    stream.read("m", 10, block_ms=None)
    stream.ack([early])
    rclient.zadd(stream.keys.inflight, {early: 1000.0})  # the late second write
    assert stream.oldest_unacked() == datetime.fromtimestamp(2000.0, UTC)
    assert stream.unacked() == 1  # the entry still pending holds it, and only it
    (message,) = stream.read("m", 10, block_ms=None, own="0")
    stream.bury("m", message, "scoring raised", 3)
    rclient.zadd(stream.keys.inflight, {message[0]: 2000.0})  # late again, after a burial
    assert stream.unacked() == 0 and stream.oldest_unacked() is None
    assert rclient.zcard(stream.keys.inflight) == 0


def test_a_long_run_of_gone_roots_is_dropped_over_a_few_reads(rclient: redis.Redis) -> None:
    stream = _stream(rclient)
    gone = 2 * INFLIGHT_LOOK + 10
    rclient.zadd(stream.keys.inflight, {f"{i + 1}-0": float(i) for i in range(gone)})
    kept = _entry(rclient, stream, float(gone))
    counts = [stream.unacked() for _ in range(3)]
    assert counts == [gone + 1 - INFLIGHT_LOOK, gone + 1 - 2 * INFLIGHT_LOOK, 1]  # bounded
    assert stream.oldest_unacked() == datetime.fromtimestamp(float(gone), UTC)
    assert rclient.zrange(stream.keys.inflight, 0, -1) == [kept.encode()]


def test_replay_puts_the_entry_and_its_root_back_together(rclient: redis.Redis) -> None:
    stream = _stream(rclient)
    body = b'{"observations": [], "root": "2026-12-03T10:00:00Z", "now": "2026-12-03T10:05:00Z"}'
    rclient.xadd(stream.keys.stream, {"trace": "t", "body": body})
    (message,) = stream.read("m", 10, block_ms=None)
    stream.bury("m", message, "scoring raised", 3)
    assert stream.replay(stream.dead()) == 1
    (again,) = stream.read("m", 10, block_ms=None)
    assert rclient.zrange(stream.keys.inflight, 0, -1, withscores=True) == [
        (again[0].encode(), datetime(2026, 12, 3, 10, tzinfo=UTC).timestamp())
    ]
    assert stream.dead_count() == 0 and again[1][b"trace"] == b"t"
    stream.ack([again[0]])
    assert stream.unacked() == 0 and stream.length() == 0


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
