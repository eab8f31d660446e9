"""[fleet] at start: a bad URL is exit 2 naming the variable, an unreachable Redis exit 3."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis
from structlog.testing import capture_logs

from observer.config import ConfigError, Settings, load_settings
from observer.fleet.connect import FleetUnreachable, connect, prove
from tests.servers import RedisServer, free_port


def _settings() -> Settings:
    return Settings(fleet={"secret_env": "FLEET_REDIS"})  # type: ignore[arg-type]


def test_without_fleet_there_is_no_fleet() -> None:
    assert Settings().fleet is None


def test_the_variable_must_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEET_REDIS", raising=False)
    with pytest.raises(ConfigError, match=r"fleet.secret_env: .* FLEET_REDIS is not set"):
        connect(_settings())


def test_a_url_that_is_not_redis_names_the_variable_not_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEET_REDIS", "http://user:hunter2@example.com")
    with pytest.raises(ConfigError, match="FLEET_REDIS must hold a redis://") as raised:
        connect(_settings())
    assert "hunter2" not in str(raised.value)
    # A query parameter redis-py does not take: a bad URL too, never a crash.
    monkeypatch.setenv("FLEET_REDIS", "redis://:hunter2@127.0.0.1:6379/0?sockettimeout=1")
    with pytest.raises(ConfigError, match="the URL in FLEET_REDIS cannot be used") as raised:
        connect(_settings())
    assert "hunter2" not in str(raised.value)


def test_an_unreachable_redis_names_the_variable_not_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEET_REDIS", f"redis://:hunter2@127.0.0.1:{free_port()}/0")
    with pytest.raises(FleetUnreachable, match="the URL in FLEET_REDIS") as raised:
        connect(_settings())
    assert "hunter2" not in str(raised.value)


def test_a_reachable_redis_answers(
    monkeypatch: pytest.MonkeyPatch, redis_proc: RedisServer
) -> None:
    monkeypatch.setenv("FLEET_REDIS", redis_proc.url)
    if not redis_proc.answers():
        redis_proc.start()
    assert connect(_settings()).ping()


def test_claims_wait_at_least_a_lease() -> None:
    with pytest.raises(ValueError, match="claim_idle_s"):
        Settings(fleet={"lease_s": 30, "claim_idle_s": 10})  # type: ignore[arg-type]


def test_check_sees_the_fleets_redis_as_run_does(
    monkeypatch: pytest.MonkeyPatch, redis_proc: RedisServer, tmp_path: Path
) -> None:
    """`check` with a [fleet]: the Redis `run` would join, its version and whether it keeps
    what it is told (docs/operating.md#redis); what it does not do is said by both, the
    same words, and neither refuses it."""
    if not redis_proc.answers():
        redis_proc.start()
    config = tmp_path / "observer.toml"
    config.write_text('[fleet]\nsecret_env = "FLEET_REDIS"\n')
    monkeypatch.setenv("OBSERVER_CONFIG", str(config))
    monkeypatch.setenv("FLEET_REDIS", redis_proc.url.replace("redis://", "redis://:@"))
    settings = load_settings()
    client = redis.Redis.from_url(redis_proc.url)
    fit = prove(connect(settings, check=False), settings)
    assert fit.warnings == ()
    assert fit.describe() == (
        f"Redis at {redis_proc.url} (the URL in FLEET_REDIS): Redis {fit.version}, "
        "AOF on, maxmemory-policy noeviction"
    )
    client.config_set("appendonly", "no")
    client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        unfit = prove(connect(settings, check=False), settings)
        with capture_logs() as logs:
            connect(settings).close()  # as `run` connects: the same words, logged
    finally:
        client.config_set("appendonly", "yes")
        client.config_set("maxmemory-policy", "noeviction")
    assert [w.split(":")[0] for w in unfit.warnings] == [
        "AOF is off (appendonly no)",
        "maxmemory-policy is allkeys-lru",
    ]
    assert [e["problem"] for e in logs if e["event"] == "fleet_redis_unfit"] == list(unfit.warnings)


def test_an_unreachable_redis_says_where_it_went_and_how_long_it_tried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    monkeypatch.setenv("FLEET_REDIS", f"redis://default:hunter2@127.0.0.1:{port}/3")
    with pytest.raises(FleetUnreachable) as raised:
        connect(_settings())
    said = str(raised.value)
    assert said.startswith(f"Redis at redis://127.0.0.1:{port}/3 (the URL in FLEET_REDIS)")
    assert re.search(r"\(tried for \d+\.\d s\)$", said)
    assert "hunter2" not in said and "default" not in said
