"""Members in-process against a real redis-server and the service-like fake Langfuse.

One member reads, all score; every trace scored once in Langfuse, the watermark
below what is not acknowledged, a dead worker's entries claimed, a new reader
after the lease changes hands, the old one fenced.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from observer.fleet.connect import LeaseLost
from tests.daemon_helpers import demo_counts
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fleet.helpers import drain, fleet_settings, keeping, members, traces
from tests.servers import RedisServer


@pytest.fixture
def fake() -> FakeLangfuse:
    fake = FakeLangfuse.service_like(seed=7, ingestion_jitter_s=0.0)
    fake.start()
    yield fake  # type: ignore[misc]
    fake.stop()


def _live_sets(fake: FakeLangfuse) -> dict[str, dict[str, int]]:
    return {t: {n: len(s) for n, s in by.items()} for t, by in fake.scores_by_trace().items()}


def test_one_reader_publishes_and_three_workers_score_every_trace_once(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    fake.add_observations(traces())
    settings = fleet_settings(monkeypatch, fake, redis_proc.url)
    with members(settings, tmp_path, ["m1", "m2", "m3"]) as fleet:
        m1, m2, m3 = fleet
        m1.keep()
        m2.keep()
        m3.keep()
        assert [m.lease.held() for m in fleet] == [True, False, False]
        m1.read_once()
        published = int(m1.parts.metrics.value("observer_fleet_entries_total", event="published"))
        assert published == demo_counts().traces
        assert m1.stream.oldest_unacked() is not None
        watermark = m1.stream.watermark()
        assert watermark is not None and watermark <= m1.stream.oldest_unacked()  # type: ignore[operator]
        assert drain(fleet) == published
        assert all(m.worker.step(block_ms=0).read == 0 for m in fleet)
        for m in fleet:
            assert m.parts.dispatcher.flush(10.0)
        # Everyone scored something, and nobody the same trace twice.
        assert all(
            m.parts.metrics.value("observer_fleet_entries_total", event="acknowledged")
            for m in fleet
        )
        live = _live_sets(fake)
        assert len(live) == demo_counts().scored
        assert fake.duplicates() == []
        assert sum(len(s) for s in live.values()) == demo_counts().scores
        # Nothing unacknowledged: the next pass moves the watermark up to the settled time,
        # and publishes nothing (each trace was published once, unchanged since). The lease
        # renewed first: the drain may have outlasted it on a busy machine (the pass is fenced).
        m1.keep()
        with keeping(m1):
            m1.read_once()
        after = m1.stream.watermark()
        assert after is not None and after > watermark
        assert (
            m1.parts.metrics.value("observer_fleet_entries_total", event="published") == published
        )


def test_a_dead_workers_entries_are_claimed_and_scored_by_another(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    fake.add_observations(traces())
    settings = fleet_settings(monkeypatch, fake, redis_proc.url, lease_s=1, claim_idle_s=1)
    with members(settings, tmp_path, ["m1", "m2"]) as (m1, m2):
        m1.keep()
        with keeping(m1):  # a second's lease: a pass longer than that is fenced
            m1.read_once()
        held = m2.stream.read("dead", 10, block_ms=None)  # a member that died holding them
        assert len(held) == 10
        assert m2.stream.pending().consumers == {"dead": 10}
        # m1 leaves the claiming to m2: a drain longer than the claim's second (a busy
        # machine) would otherwise have m1 claim the dead member's entries as well.
        m1.worker.claim_idle_ms = 3_600_000
        while m1.worker.step(block_ms=0).read:
            pass  # everything but the dead member's entries
        assert m1.parts.dispatcher.flush(10.0)
        m1.worker.settle()  # delivered: acknowledged
        assert m1.stream.unacked() == 10
        with keeping(m1):
            m1.read_once()
        held, oldest = m1.stream.watermark(), m1.stream.oldest_unacked()
        assert held is not None and oldest is not None
        assert held <= oldest  # held below the entries not acknowledged
        claimed = 0
        while claimed < 10:
            m2.worker._claimed_at = None  # claim at this step (the member's pace: claim_idle_s / 2)
            claimed += m2.worker.step(block_ms=200).claimed
        assert claimed == 10
        for m in (m1, m2):
            assert m.parts.dispatcher.flush(10.0)
        m2.worker.settle()
        assert m2.stream.unacked() == 0 and m2.stream.length() == 0
        assert len(_live_sets(fake)) == demo_counts().scored
        assert fake.duplicates() == []


def test_a_new_reader_resumes_from_the_watermark_and_the_old_one_is_fenced(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    first = traces(tag="a")
    fake.add_observations(first)
    settings = fleet_settings(monkeypatch, fake, redis_proc.url)
    with members(settings, tmp_path, ["m1", "m2"]) as (m1, m2):
        m1.keep()
        m1.read_once()
        drain([m1, m2])
        m1.read_once()
        watermark = m1.stream.watermark()
        rclient.delete(m1.keys.lease)  # what the lease's expiry does while m1 is paused
        m2.keep()
        assert m2.lease.held() and m1.lease.held()  # m1 does not know yet
        with pytest.raises(LeaseLost):
            m1.pipeline.marks.set_watermark(watermark)  # type: ignore[arg-type]
        m2.read_once()
        assert m2.stream.watermark() is not None and m2.stream.watermark() >= watermark  # type: ignore[operator]
        assert m2.parts.metrics.value("observer_fleet_entries_total", event="published") == 0
        m1.keep()
        assert not m1.lease.held()
        assert m1.parts.metrics.value("observer_fleet_lease_changes_total") == 2


def test_a_member_cut_from_redis_is_not_ready_takes_no_work_and_comes_back(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    settings = fleet_settings(monkeypatch, fake, redis_proc.url)
    with members(settings, tmp_path, ["m1"]) as (m1,):
        m1.keep()
        assert m1.lease.held()
        assert m1.parts.health.holds == ()
        redis_proc.stop()
        try:
            m1.keep()
            assert m1.parts.health.held("redis") == "the fleet's Redis is unreachable"
            ready, body = m1.parts.health.ready()
            assert not ready and "the fleet's Redis is unreachable" in str(body)
            assert m1.parts.metrics.value("observer_fleet_redis_up") == 0
            assert not m1.redis_ok  # the worker and the reader wait
        finally:
            redis_proc.start()
        m1.keep()
        assert m1.redis_ok and m1.parts.health.holds == ()
        assert m1.parts.metrics.value("observer_fleet_redis_up") == 1


def test_the_reader_goes_on_from_its_last_pass_not_from_the_held_watermark(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    fake.add_observations(traces())
    settings = fleet_settings(monkeypatch, fake, redis_proc.url)
    with members(settings, tmp_path, ["m1"]) as (m1,):
        m1.keep()
        first = m1.pipeline.poll(m1.parts.clock())  # nothing acknowledged yet
        assert first.published == demo_counts().traces and first.observations > 0
        held = m1.stream.watermark()
        second = m1.pipeline.poll(m1.parts.clock())
        assert second.observations < first.observations / 4  # not the whole window again
        assert second.published == 0
        assert m1.stream.watermark() == held  # still below what waits for the workers
        # A new reader starts from the fleet's watermark: it reads again, publishes nothing.
        rclient.delete(m1.keys.lease)
        m1.lease.forget()
        m1.keep()
        assert m1.pipeline.cursor is None
        again = m1.pipeline.poll(m1.parts.clock())
        assert again.published == 0 and again.unchanged == demo_counts().traces
