"""The fleet's Redis client, built in one place, and Redis errors translated at the edge.

`connect` builds the client from the URL in the variable `fleet.secret_env` names
and proves Redis answers and can carry the fleet (`prove`: PING, then INFO); a URL
that cannot be used is a ConfigError naming the variable, an unreachable Redis a
`FleetUnreachable` naming the variable and the URL without its credentials (and how
long it was tried). A Redis older than 7.0 is refused (a ConfigError); one without
AOF or with an evicting `maxmemory-policy` is used with a warning, as
docs/operating.md#redis says why. `observer check` shows the same findings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import redis
import structlog

from observer.config import ConfigError, Settings
from observer.errors import Unreachable
from observer.sources import Stopped
from observer.urls import without_credentials

log = structlog.get_logger("observer.fleet")

T = TypeVar("T")

# Every call is short (the workers' blocking reads wait at most BLOCK_MS): a socket
# that says nothing for this long is a partition, not a slow answer.
SOCKET_TIMEOUT_S = 5.0
BLOCK_MS = 500


class FleetUnreachable(Unreachable):
    """Redis refused, timed out, or answered with an error we cannot act on."""


class LeaseLost(Stopped):
    """A reader's fenced write found another holder of the lease (or none): it stops."""


def connect(settings: Settings, *, check: bool = True) -> redis.Redis:
    """The client for the fleet's Redis; with `check`, `prove` it (FleetUnreachable,
    ConfigError for a Redis too old) and log what it does not do as the fleet needs."""
    assert settings.fleet is not None
    url = settings.fleet_url()
    variable = settings.fleet.secret_env
    try:
        client = redis.Redis.from_url(
            url,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            health_check_interval=10,
        )
    except ValueError as error:
        raise ConfigError(
            f"fleet.secret_env: the URL in {variable} cannot be used: {_scrubbed(str(error), url)}"
        ) from None
    if check:
        for warning in prove(client, settings).warnings:
            log.warning("fleet_redis_unfit", problem=warning)
    return client


MIN_REDIS = (7, 0)  # docs/operating.md: the stream commands' replies the fleet reads


@dataclass(frozen=True, slots=True)
class Fitness:
    """What Redis said of itself (INFO), judged against docs/operating.md#redis."""

    where: str  # "Redis at redis://host:6379/0 (the URL in REDIS_URL)"
    version: str
    warnings: tuple[str, ...]  # what it should do for the fleet and does not

    def describe(self) -> str:
        return f"{self.where}: Redis {self.version}, " + (
            "; ".join(self.warnings) if self.warnings else "AOF on, maxmemory-policy noeviction"
        )


def prove(client: redis.Redis, settings: Settings) -> Fitness:
    """PING and INFO: FleetUnreachable (naming the URL without its credentials, and how
    long it was tried) when Redis does not answer; ConfigError for a Redis older than
    MIN_REDIS; what docs/operating.md#redis asks for and it does not do, as warnings."""
    assert settings.fleet is not None
    url = settings.fleet_url()
    where = f"Redis at {without_credentials(url)} (the URL in {settings.fleet.secret_env})"
    began = time.monotonic()
    try:
        with translated(where, url):
            client.ping()
            info = cast(dict[str, Any], client.info())
    except FleetUnreachable as error:
        raise error.tried(time.monotonic() - began) from None
    except TypeError as error:  # a query parameter redis-py takes no keyword for
        raise ConfigError(
            f"fleet.secret_env: the URL in {settings.fleet.secret_env} cannot be used: "
            f"{_scrubbed(str(error), url)}"
        ) from None
    version = str(info.get("redis_version", "?"))
    try:
        numbers = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        numbers = MIN_REDIS  # a Redis-compatible service's own scheme: let through
    if numbers < MIN_REDIS:
        raise ConfigError(
            f"{where} is Redis {version}; the fleet needs Redis "
            f"{'.'.join(map(str, MIN_REDIS))} or newer (docs/operating.md#redis)"
        )
    warnings = []
    if str(info.get("aof_enabled", "1")) == "0":
        warnings.append(
            "AOF is off (appendonly no): a restart of Redis empties it, and the fleet "
            "recovers by reading again (docs/operating.md#redis)"
        )
    policy = str(info.get("maxmemory_policy", "noeviction"))
    if policy != "noeviction":
        warnings.append(
            f"maxmemory-policy is {policy}: under memory pressure Redis drops the fleet's "
            "keys; set noeviction (docs/operating.md#redis)"
        )
    return Fitness(where, version, tuple(warnings))


def text(reply: object) -> str:
    """A Redis reply (bytes, as the client is built) as text."""
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def _scrubbed(message: str, url: str) -> str:
    """An error message without the URL (and so without its password)."""
    return message.replace(url, "<the URL>")


@contextmanager
def translated(what: str, url: str = "") -> Iterator[None]:
    """redis-py's errors as ours: FleetUnreachable saying `what` failed, never the URL."""
    try:
        yield
    except redis.AuthenticationError as error:
        raise FleetUnreachable(f"{what} refused the password: {error}") from None
    except redis.RedisError as error:
        text = _scrubbed(str(error), url) if url else str(error)
        raise FleetUnreachable(f"{what} is unreachable: {text}") from None


def call(what: str, function: Callable[[], T]) -> T:
    """`function()`, its Redis errors translated."""
    with translated(what):
        return function()
