"""Three real `observer run` processes in a fleet, on a real redis-server, over the
service-like fake Langfuse: the reader SIGKILLed mid-pass, a worker SIGKILLed while it
holds pending entries, Redis stopped and started again (a partition of every member);
the killed members restarted on their state files, as a Deployment restarts pods.

Then: every trace scored, one live score set each (no duplicate under Langfuse's score
key), no score lost (each trace has the scores one daemon gives it), every sampled
answer judged once, nothing left unacknowledged, every member exits 0 on SIGTERM.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from observer.judge.outcome import JUDGE_SCORE_NAMES
from observer.resolver.scores import RESOLVER_SCORE_NAMES
from tests.daemon_helpers import ROOT, demo_counts
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.openai_stub import OpenAIStub, schema_name_of
from tests.fleet.helpers import traces
from tests.fleet.processes import Fleet
from tests.servers import RedisServer, redis_server

CONFIG = """\
[source]
poll_interval_s = 1
lookback_s = 7200
page_limit = 10
requests_per_minute = 60000
max_attempts = 2

[sink]
max_backoff_s = 0.2

[run]
shutdown_grace_s = 8

[http]
enabled = false

[judge]
enabled = true
rate = 0.3
risk_oversampling = false

[resolver]
kind = "hook"
hook = "tests.fleet.slow_hook:lookup"

[log]
format = "json"
level = "info"

[fleet]
secret_env = "FLEET_REDIS"
name = "e2e"
lease_s = 2
claim_idle_s = 3
"""


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis") as server:
        yield server


def test_a_fleet_of_three_survives_the_death_of_any_member_and_a_partition(
    tmp_path: Path, own_redis: RedisServer
) -> None:
    fake = FakeLangfuse.service_like(seed=11, ingestion_jitter_s=0.0)
    fake.latency_s = 0.03  # a pass of many pages: the reader dies in the middle of one
    judge = OpenAIStub()
    with fake, judge:
        observations = traces()
        fake.add_observations(observations)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(ROOT),
            "LANGFUSE_PUBLIC_KEY": fake.public_key,
            "LANGFUSE_SECRET_KEY": fake.secret_key,
            "LANGFUSE_BASE_URL": fake.url,
            "FLEET_REDIS": own_redis.url,
            "OPENAI_API_KEY": "sk-test",
            "OBSERVER_JUDGE_BASE_URL": judge.url + "/v1",
            "OBSERVER_JUDGE_MODEL": "stub-judge",
        }
        client = redis.Redis.from_url(own_redis.url, socket_timeout=2)
        fleet = Fleet(tmp_path, env, CONFIG)
        try:
            _run(fleet, client, own_redis, fake)
            codes = fleet.stop_all()
        finally:
            for process in fleet.started_all:
                if process.poll() is None:
                    process.kill()
                    process.wait(10)
        assert codes == {n: 0 for n in codes}, fleet.logs()
        _check(fake, judge)


def _holder_pid(client: redis.Redis) -> int | None:
    value = client.get("{e2e}:reader")
    if value is None:
        return None
    member = value.decode().rsplit(":", 1)[0]
    pid = client.hget(f"{{e2e}}:member:{member}", "pid")
    return int(pid) if pid is not None else None


def _pending_worker(client: redis.Redis, alive: set[int]) -> int | None:
    """The pid of a live member, not the reader, holding pending entries now (the dead
    reader's entries are pending too)."""
    for consumer in client.xpending("{e2e}:traces", "workers").get("consumers") or []:
        if int(consumer["pending"]) > 0:
            pid = client.hget(f"{{e2e}}:member:{consumer['name'].decode()}", "pid")
            if pid is not None and int(pid) in alive:
                return int(pid)
    return None


def _run(fleet: Fleet, client: redis.Redis, server: RedisServer, fake: FakeLangfuse) -> None:
    for name in ("m1", "m2", "m3"):
        fleet.start(name)
    # The reader, mid-pass: it has published some entries, not all.
    fleet.wait("a reader publishing", lambda: _holder_pid(client) and client.xlen("{e2e}:traces"))
    first = fleet.name_of(_holder_pid(client))  # type: ignore[arg-type]
    fleet.kill(first)
    published = len(client.keys("{e2e}:seen:*"))  # the marks of every trace published
    assert published < demo_counts().traces, "the reader finished before it was killed"
    fleet.wait(
        "another reader", lambda: _holder_pid(client) not in (None, fleet.processes[first].pid)
    )
    # A worker holding entries it has not acknowledged (its chunk store is slow).
    reader = _holder_pid(client)
    alive = {p.pid for p in fleet.processes.values() if p.poll() is None} - {reader}
    found: list[int] = []
    fleet.wait(
        "a worker holding pending entries",
        lambda: found.append(p) or True if (p := _pending_worker(client, alive)) else False,
    )
    victim = fleet.name_of(found[0])
    fleet.kill(victim)
    # A partition: Redis gone for longer than the lease, then back with its data. Every member
    # still running sees it gone (however long a busy machine holds one back), and it lasts
    # at least 3 s, past the 2 s lease: the scenario's length, which no assertion reads.
    running = [name for name, process in fleet.processes.items() if process.poll() is None]
    seen = {name: fleet.logged(name, "fleet_redis_unreachable") for name in running}
    server.stop()
    gone = time.monotonic()
    fleet.wait(
        "every running member saw Redis gone",
        lambda: all(fleet.logged(n, "fleet_redis_unreachable") > seen[n] for n in running),
    )
    time.sleep(max(0.0, 3.0 - (time.monotonic() - gone)))
    server.start()
    # The killed members come back on their state files and deliver their outboxes.
    before = {name: fleet.started(name) for name in (first, victim)}
    fleet.start(first)
    fleet.start(victim)
    for name in (first, victim):  # running again, its signal handlers set
        fleet.wait(f"{name} started again", lambda n=name: fleet.started(n) > before[n])
    scored = demo_counts().scored
    fleet.wait(
        "every trace scored and every entry acknowledged",
        lambda: (
            len(fake.scores_by_trace()) >= scored
            and client.zcard("{e2e}:inflight") == 0
            and client.xlen("{e2e}:traces") == 0  # acknowledged entries are deleted
            and len(client.keys("{e2e}:seen:*")) >= demo_counts().traces
        ),
        timeout_s=240,  # against a hang; three members and the fake share 2 busy cores
    )
    # What the judge took is judged and its scores delivered before the members stop.
    fleet.wait(
        "the judge's scores delivered",
        lambda: _judged(fake) >= len(client.keys("{e2e}:judge:trace:*")),
        timeout_s=180,
    )


def _judged(fake: FakeLangfuse) -> int:
    return sum(1 for by in fake.scores_by_trace().values() if "critical_unsupported" in by)


def _check(fake: FakeLangfuse, judge: OpenAIStub) -> None:
    counts = demo_counts()
    live = fake.scores_by_trace()
    assert len(live) == counts.scored  # every answer trace scored
    assert fake.duplicates() == []  # one live score set each
    doubled = {t: n for t, by in live.items() for n, s in by.items() if len(s) > 1}
    assert doubled == {}
    # No score lost: every trace has its deterministic scores, as many as one daemon gives
    # (the resolver's come on top where the slow store answered in time).
    assert (
        sum(
            len([n for n in by if n not in RESOLVER_SCORE_NAMES and n not in JUDGE_SCORE_NAMES])
            for by in live.values()
        )
        == counts.scores
    )
    # Every sampled answer judged once: one claims request per answer, and as many as
    # traces carrying the judge's scores.
    claims = [
        json.dumps(r["messages"], sort_keys=True)
        for r in judge.requests
        if schema_name_of(r) == "observer_claims"
    ]
    assert claims, "nothing was sampled for the judge"
    assert max(Counter(claims).values()) == 1
    assert len(claims) == _judged(fake)
