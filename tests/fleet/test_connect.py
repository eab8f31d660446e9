"""[fleet] at start: a bad URL is exit 2 naming the variable, an unreachable Redis exit 3."""

from __future__ import annotations

import pytest

from observer.config import ConfigError, Settings
from observer.fleet.connect import FleetUnreachable, connect
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
