"""`observer fleet status` against a real redis-server, and its exits."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from observer.cli import main
from observer.fleet.keys import Keys
from observer.fleet.lease import Lease
from observer.fleet.status import fleet_status, status_rows
from observer.fleet.stream import TraceStream
from tests.servers import RedisServer, free_port


def _config(tmp_path: Path) -> str:
    path = tmp_path / "observer.toml"
    path.write_text('[fleet]\nsecret_env = "FLEET_REDIS"\nname = "s"\n')
    return str(path)


def test_status_says_who_reads_what_is_pending_and_the_watermark(
    rclient: redis.Redis, redis_proc: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = Keys("s")
    lease = Lease(rclient, keys, "m1", 15)
    assert lease.keep()
    stream = TraceStream(rclient, keys, maxlen=1000)
    stream.ensure_group()
    rclient.xadd(keys.stream, {"trace": "t", "body": "{}"})
    stream.read("m2", 10, block_ms=None)
    rclient.zadd(keys.members, {"m1": 1_000_000, "m2": 1_000_000})
    rclient.hset(keys.member("m1"), mapping={"role": "reader", "pid": 1})
    found = fleet_status(rclient, "s", 15, now_ms=1_001_000)
    assert found.reader == lease.value
    assert (found.stream_length, found.pending, found.pending_by_member) == (1, 1, {"m2": 1})
    assert [m.name for m in found.members] == ["m1", "m2"]
    assert found.members[0].figures == {"pid": "1", "role": "reader"}
    later = fleet_status(rclient, "s", 15, now_ms=1_100_000).members  # not seen for a lease
    assert [m.gone for m in later] == [True, True]
    assert fleet_status(rclient, "s", 15, now_ms=1_000_000 + 86_400_001).members == []

    monkeypatch.setenv("FLEET_REDIS", redis_proc.url)
    result = CliRunner().invoke(main, ["fleet", "status", "--config", _config(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["reader"] == lease.value
    result = CliRunner().invoke(main, ["fleet", "status", "--config", _config(tmp_path)])
    assert result.exit_code == 0 and "stream length" in result.output


def test_status_of_an_empty_fleet(rclient: redis.Redis) -> None:
    found = fleet_status(rclient, "none", 15)
    assert (found.reader, found.watermark, found.stream_length, found.members) == (
        None,
        None,
        0,
        [],
    )


def test_status_exits_2_without_fleet_and_3_when_redis_is_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = CliRunner().invoke(main, ["fleet", "status"])
    assert result.exit_code == 2 and "no [fleet] section" in result.output
    monkeypatch.setenv("FLEET_REDIS", f"redis://:secret@127.0.0.1:{free_port()}/0")
    result = CliRunner().invoke(main, ["fleet", "status", "--config", _config(tmp_path)])
    assert result.exit_code == 3
    assert "FLEET_REDIS" in result.output and ":secret@" not in result.output


def test_status_shows_gone_members_dead_entries_and_a_redis_that_lost_its_data(
    rclient: redis.Redis,
) -> None:
    keys = Keys("s")
    stream = TraceStream(rclient, keys, maxlen=1000)
    stream.ensure_group()
    rclient.set(keys.epoch, "1000000 m1 reset")
    rclient.zadd(keys.members, {"m1": 1_000_000, "m2": 1_000_000 - 20_000})
    rclient.hset(keys.member("m1"), mapping={"role": "worker", "resets": 1})
    rclient.xadd(keys.stream, {"trace": "poison", "body": "{}"})
    (message,) = stream.read("m1", 10, block_ms=None)
    stream.bury("m1", message, "scoring raised ValueError: no", 5)
    found = fleet_status(rclient, "s", 15, now_ms=1_001_000)
    assert [(m.name, m.gone) for m in found.members] == [("m2", True), ("m1", False)]
    assert (found.dead, found.dead_traces, found.resets) == (1, ["poison"], 1)
    rows = dict(status_rows(found))
    assert rows["members alive"] == "1 (1 gone)"
    assert rows["  m2"].startswith("GONE")
    assert rows["redis data"].startswith("LOST and recreated")
    assert "poison" in rows["dead (failed too often)"]


def test_fleet_dead_lists_and_replays(
    rclient: redis.Redis, redis_proc: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = Keys("s")
    stream = TraceStream(rclient, keys, maxlen=1000)
    stream.ensure_group()
    body = b'{"observations": [], "root": "2026-12-03T10:00:00Z", "now": "2026-12-03T10:05:00Z"}'
    rclient.xadd(keys.stream, {"trace": "t-dead", "body": body})
    (message,) = stream.read("m1", 10, block_ms=None)
    stream.bury("m1", message, "scoring raised KeyError: 'x'", 5)
    assert stream.length() == 0 and stream.pending().count == 0
    monkeypatch.setenv("FLEET_REDIS", redis_proc.url)
    config = _config(tmp_path)
    result = CliRunner().invoke(main, ["fleet", "dead", "--config", config])
    assert result.exit_code == 0, result.output
    assert "t-dead  5 deliveries, last on m1: scoring raised KeyError" in result.output
    assert "--replay" in result.output
    result = CliRunner().invoke(main, ["fleet", "dead", "--config", config, "--replay", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["replayed"] == 1
    assert stream.dead_count() == 0 and stream.length() == 1 and stream.unacked() == 1
    assert stream.oldest_unacked() == datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
    result = CliRunner().invoke(main, ["fleet", "dead", "--config", config])
    assert result.output.strip() == "no dead entries"
