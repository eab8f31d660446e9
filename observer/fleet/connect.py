"""The fleet's Redis client, built in one place, and Redis errors translated at the edge.

`connect` builds the client from the URL in the variable `fleet.secret_env` names
and proves Redis answers (PING); a URL that cannot be used is a ConfigError naming
the variable, an unreachable Redis a `FleetUnreachable` naming it. Neither says
the URL: it may carry a password.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import redis

from observer.config import ConfigError, Settings
from observer.errors import Unreachable

T = TypeVar("T")

# Every call is short (the workers' blocking reads wait at most BLOCK_MS): a socket
# that says nothing for this long is a partition, not a slow answer.
SOCKET_TIMEOUT_S = 5.0
BLOCK_MS = 500


class FleetUnreachable(Unreachable):
    """Redis refused, timed out, or answered with an error we cannot act on."""


class LeaseLost(Exception):
    """A reader's fenced write found another holder of the lease (or none): it stops."""


def connect(settings: Settings, *, check: bool = True) -> redis.Redis:
    """The client for the fleet's Redis; with `check`, PING it (FleetUnreachable)."""
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
        with translated(f"Redis (the URL in {variable})", url):
            client.ping()
    return client


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
