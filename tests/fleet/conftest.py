"""A real redis-server for the fleet's tests: one per module, flushed before each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.servers import RedisServer, redis_server


@pytest.fixture(scope="module")
def redis_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(Path(tmp_path_factory.mktemp("redis"))) as server:
        yield server


@pytest.fixture
def rclient(redis_proc: RedisServer) -> Iterator[redis.Redis]:
    if not redis_proc.answers():  # a test stopped it: back for the next one
        redis_proc.start()
    client = redis.Redis.from_url(redis_proc.url, socket_timeout=5)
    client.flushall()
    yield client
    client.close()
