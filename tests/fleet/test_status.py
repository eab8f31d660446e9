"""`observer fleet status` against a real redis-server, and its exits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from observer.cli import main
from observer.fleet.keys import Keys
from observer.fleet.lease import Lease
from observer.fleet.status import fleet_status
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
    assert fleet_status(rclient, "s", 15, now_ms=1_100_000).members == []  # not seen lately

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
