"""One error policy: what stops a pass is the same class in every mode.

Each failure Langfuse can answer a read of observations with is driven through the
daemon's poll (solo), `run --once`, backfill and a fleet's reader, all against the
fake Langfuse over HTTP and, for the fleet, a real redis-server; each mode must
name it the same class (observer.failures): a 401 "auth" (in a fleet too, where it
once was "unreachable"), a 503 "unreachable", a redirect to another origin "config".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from observer import app
from observer.app.daemon import Daemon
from observer.config import FleetSettings, Settings
from tests.daemon_helpers import configure
from tests.fakes.langfuse_server import OBSERVATIONS_PATH, FakeLangfuse
from tests.servers import RedisServer, redis_server

NOW = datetime.now(UTC)
KINDS = ("unreachable", "auth", "config", "state", "crashed")


def answers_401(fake: FakeLangfuse) -> None:
    fake.fail_next(401, count=10**6, path_prefix=OBSERVATIONS_PATH)


def answers_503(fake: FakeLangfuse) -> None:
    fake.fail_next(503, count=10**6, path_prefix=OBSERVATIONS_PATH)


def redirects_elsewhere(fake: FakeLangfuse) -> None:
    # Never followed: observer reads from one origin (the request does not leave).
    fake.redirect(308, "https://langfuse.example.invalid", path_prefix=OBSERVATIONS_PATH)


FAILURES: dict[str, tuple[Callable[[FakeLangfuse], None], str]] = {
    "401": (answers_401, "auth"),
    "503": (answers_503, "unreachable"),
    "redirect": (redirects_elsewhere, "config"),
}


def counted(parts: app.Parts) -> str | None:
    """The class the pass driver counted (`observer_passes_failed_total{kind}`)."""
    found = {k for k in KINDS if parts.metrics.value("observer_passes_failed_total", kind=k)}
    assert len(found) <= 1, found
    return found.pop() if found else None


def solo(settings: Settings, state: Path) -> str | None:
    """The daemon's poll job, as its schedule runs it (Langfuse's clock read first)."""
    with app.build(settings, mode="solo", state_path=state) as parts:
        Daemon(parts).tick()
        return counted(parts)


def once(settings: Settings, state: Path) -> str | None:
    with app.build(settings, state_path=state) as parts:
        return app.run_once(parts).failure


def backfill(settings: Settings, state: Path) -> str | None:
    with app.build(settings, state_path=state) as parts:
        start = NOW - timedelta(hours=2)
        return app.backfill(parts, start, NOW, timedelta(hours=1)).failure


def fleet_reader(settings: Settings, state: Path) -> str | None:
    """A fleet member's reader pass (`Member.read_once`), as its thread runs it: the
    class is the one it counts."""
    client = redis.Redis.from_url(settings.fleet_url(), socket_timeout=5)
    with app.build(
        settings, mode="member", state_path=state, redis_client=client, member_name="m1"
    ) as parts:
        assert parts.member is not None
        parts.member.read_once()
        return counted(parts)


MODES = {"solo": solo, "once": once, "backfill": backfill, "fleet-reader": fleet_reader}


@pytest.fixture(scope="module")
def redis_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(Path(tmp_path_factory.mktemp("redis"))) as server:
        yield server


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("failure", list(FAILURES))
def test_each_failure_is_one_class_in_every_mode(
    failure: str,
    mode: str,
    redis_proc: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    cause, kind = FAILURES[failure]
    with FakeLangfuse() as fake:
        settings = configure(
            monkeypatch,
            fake,
            OBSERVER_SOURCE__MAX_ATTEMPTS="1",  # a 503 is not tried again
            OBSERVER_RUN__SHUTDOWN_GRACE_S="2",
        )
        if mode == "fleet-reader":
            redis.Redis.from_url(redis_proc.url).flushall()
            monkeypatch.setenv("FLEET_REDIS", redis_proc.url)
            fleet = FleetSettings(secret_env="FLEET_REDIS", name="policy")
            settings = settings.model_copy(update={"fleet": fleet})
        cause(fake)
        assert MODES[mode](settings, tmp_path / "state.sqlite") == kind
