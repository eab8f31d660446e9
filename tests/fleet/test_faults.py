"""The fleet under the faults Redis and real traffic bring, in-process on a real redis-server
and the service-like fake Langfuse: poison entries, an entry that kills its workers, Redis
restarted empty, entries held until their scores are delivered, a bounded stream.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
import redis

from observer.background import Deadline
from observer.fleet.keys import GROUP
from observer.fleet.member import Member
from tests.daemon_helpers import demo_counts
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.openai_stub import OpenAIStub
from tests.fleet.helpers import drain, fleet_settings, judge_every_trace, keeping, members, traces
from tests.servers import RedisServer


@pytest.fixture
def fake() -> FakeLangfuse:
    fake = FakeLangfuse.service_like(seed=7, ingestion_jitter_s=0.0)
    fake.start()
    yield fake  # type: ignore[misc]
    fake.stop()


def _poison(client: redis.Redis, member: Member, trace_id: str, root: datetime) -> str:
    """An entry that decodes but cannot be scored (its observations are not objects), with
    its root in `inflight` as the reader would put it."""
    body = {
        "observations": [1, 2],
        "root": root.isoformat(),
        "now": datetime.now(UTC).isoformat(),
        "latest": None,
        "too_large": None,
    }
    entry_id = client.xadd(member.keys.stream, {"trace": trace_id, "body": orjson.dumps(body)})
    client.zadd(member.keys.inflight, {entry_id: root.timestamp()})
    return entry_id.decode()


def _entries(member: Member, event: str) -> float:
    return member.parts.metrics.value("observer_fleet_entries_total", event=event)  # type: ignore[attr-defined, no-any-return]


def test_two_poison_entries_end_in_the_dead_stream_and_never_hold_the_rest(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    fake.add_observations(traces())
    settings = fleet_settings(monkeypatch, fake, redis_proc.url, max_deliveries=3)
    with members(settings, tmp_path, ["m1", "m2"]) as fleet:
        m1 = fleet[0]
        m1.keep()
        root = datetime.now(UTC) - timedelta(minutes=55)
        poisons = [_poison(rclient, m1, f"poison-{i}", root) for i in range(2)]
        m1.read_once()
        published = _entries(m1, "published")
        assert published == demo_counts().traces
        held = m1.stream.watermark()
        assert held is not None and held <= root + timedelta(seconds=1)  # held by the poison
        drain(fleet)
        # Both failed alone, three deliveries each, then went to the dead stream.
        dead = m1.stream.dead()
        assert sorted(d.trace_id for d in dead) == ["poison-0", "poison-1"]
        assert all(d.deliveries == 3 and "AttributeError" in d.reason for d in dead)
        assert sum(_entries(m, "dead") for m in fleet) == 2
        assert sum(_entries(m, "failed") for m in fleet) == 6
        assert m1.stream.pending().count == 0 and m1.stream.unacked() == 0
        assert m1.stream.length() == 0  # acknowledged entries are deleted
        assert rclient.xpending(m1.keys.stream, GROUP)["pending"] == 0
        assert not set(poisons) & {d.dead_id for d in dead}
        # Their batch-mates were scored, and the watermark goes past the dead entries.
        assert len(fake.scores_by_trace()) == demo_counts().scored
        assert fake.duplicates() == []
        m1.keep()  # the drain may have outlasted the lease on a busy machine
        with keeping(m1):
            m1.read_once()
        moved = m1.stream.watermark()
        assert moved is not None and moved > root
        # Replayed, they come back once more (and fail again: still dead, not lost).
        assert m1.stream.replay(m1.stream.dead()) == 2
        assert m1.stream.dead_count() == 0 and m1.stream.unacked() == 2
        drain(fleet)
        assert m1.stream.dead_count() == 2


def test_an_entry_that_killed_its_workers_is_buried_unscored(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    settings = fleet_settings(monkeypatch, fake, redis_proc.url, max_deliveries=2)
    with members(settings, tmp_path, ["m1"]) as (m1,):
        m1.keep()
        entry_id = _poison(rclient, m1, "killer", datetime.now(UTC) - timedelta(minutes=5))
        # Two members took it and died on it: delivered twice, idle since, never acknowledged.
        rclient.xreadgroup(GROUP, "gone-1", {m1.keys.stream: ">"})
        rclient.xclaim(m1.keys.stream, GROUP, "gone-2", 0, [entry_id], idle=3_600_000)
        m1.worker._claimed_at = None
        result = m1.worker.step(block_ms=0)
        assert result.claimed == 1 and result.dead == 1 and result.failed == 0
        (dead,) = m1.stream.dead()
        assert dead.trace_id == "killer" and dead.deliveries == 3
        assert "its worker died" in dead.reason
        assert m1.stream.unacked() == 0


def test_entries_are_acknowledged_only_once_their_scores_are_delivered(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    fake.add_observations(traces())
    settings = fleet_settings(monkeypatch, fake, redis_proc.url)
    with members(settings, tmp_path, ["m1"]) as (m1,):
        m1.parts.dispatcher.shutdown(Deadline.within(5.0))  # type: ignore[attr-defined]
        m1.keep()
        m1.read_once()
        while m1.worker.step(block_ms=0).read:
            pass
        # Recorded in this member's outbox, not delivered: pending and unacknowledged; the
        # traces with nothing to deliver (skipped) are acknowledged at once.
        scored = demo_counts().scored
        assert len(m1.worker.awaiting) == scored and m1.state.outbox_size() > 0
        assert m1.stream.unacked() == scored
        assert m1.stream.pending().count == scored
        # A member whose disk is lost now loses nothing: the entries go to another after
        # claim_idle_s (here: read by a new consumer with the same entries pending).
        assert rclient.xautoclaim(m1.keys.stream, GROUP, "other", 0, "0-0", count=1000)[1]


def test_redis_restarted_empty_is_recreated_said_once_and_nothing_is_scored_twice(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    fake.add_observations(traces(tag="a") + traces(tag="b"))
    total = 2 * demo_counts().traces
    settings = fleet_settings(monkeypatch, fake, redis_proc.url)
    with members(settings, tmp_path, ["m1", "m2"]) as fleet:
        m1, m2 = fleet
        for m in fleet:
            m.keep()
        token = m1.lease.token
        assert token is not None
        with keeping(m1):
            m1.read_once()
        assert _entries(m1, "published") == total
        # Part of the work done and delivered; the rest published, not yet read.
        for _ in range(3):
            m2.worker.step(block_ms=0)
        assert m2.parts.dispatcher.flush(10.0)  # type: ignore[attr-defined]
        m2.worker.settle()
        with keeping(m1):
            m1.read_once()  # the watermark moves up to the oldest entry not acknowledged
        for m in fleet:
            m.alerts.sync(m.stream.watermark())  # the follower's copy of the watermark
        scored_before = fake.scores_by_trace()
        assert 0 < len(scored_before) < 2 * demo_counts().scored
        # Redis restarts with nothing: no group, no lease, no fence, no watermark, no marks.
        redis_proc.wipe()
        redis_proc.start()
        for m in fleet:
            m.keep()
        resets = [m.parts.metrics.value("observer_fleet_redis_resets_total") for m in fleet]
        assert resets == [1, 1]
        assert all(m.redis_ok for m in fleet)
        holder = next(m for m in fleet if m.lease.held())
        assert holder.lease.token is not None and holder.lease.token > token  # monotonic
        # The reader reads from its own copy of the watermark (less the sweep's overlap), not
        # from the lookback two hours back.
        local = holder.state.watermark()
        assert local is not None
        with keeping(holder):
            result = holder.pipeline.poll(holder.parts.clock())
        assert result.start >= local - timedelta(seconds=settings.source.overlap_s)
        assert result.published > 0
        drain(fleet)
        for m in fleet:
            m.keep()  # the epoch is known now: said once
        resets = [m.parts.metrics.value("observer_fleet_redis_resets_total") for m in fleet]
        assert resets == [1, 1]
        after = fake.scores_by_trace()
        assert len(after) == 2 * demo_counts().scored  # every trace scored
        assert fake.duplicates() == []  # once
        assert {t: by for t, by in after.items() if t in scored_before} == scored_before


def test_a_state_file_that_cannot_be_written_buries_nothing(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    """A disk error is the member's, not the entries': they wait, no delivery counted."""
    fake.add_observations(traces())
    settings = fleet_settings(monkeypatch, fake, redis_proc.url, max_deliveries=2)
    with members(settings, tmp_path, ["m1"]) as (m1,):
        m1.keep()
        m1.read_once()
        path = m1.state.path
        with closing(sqlite3.connect(path)) as db:
            db.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON outbox "
                "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
            )
        for _ in range(5):  # more tries than max_deliveries
            m1._work_step()
        assert m1.parts.health.held("state") == "the state file cannot be written"  # type: ignore[attr-defined]
        assert m1.stream.dead_count() == 0 and _entries(m1, "dead") == 0
        with closing(sqlite3.connect(path)) as db:
            db.execute("DROP TRIGGER refuse")
        m1._work_step()
        assert m1.parts.health.holds == ()  # type: ignore[attr-defined]
        drain([m1])
        assert m1.stream.dead_count() == 0
        assert len(fake.scores_by_trace()) == demo_counts().scored


@pytest.mark.usefixtures("rclient")  # Redis flushed: no lease left by an earlier test
def test_a_batch_lookup_that_raises_is_asked_again_trace_by_trace_and_fails_only_its_own(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    tmp_path: Path,
) -> None:
    # The chunk store chokes on one trace: the batch's one lookup raises, each trace is then
    # looked up alone, and only the trace whose own lookup raises fails (delivered again).
    fake.add_observations(traces())
    settings = fleet_settings(monkeypatch, fake, redis_proc.url, max_deliveries=3)
    with members(settings, tmp_path, ["m1"]) as fleet:
        m1 = fleet[0]
        m1.keep()
        with keeping(m1):  # a busy machine cannot let the lease lapse mid-pass
            m1.read_once()
        assert _entries(m1, "published") == demo_counts().traces
        choking: list[str] = []

        def lookup(pairs: list[tuple[object, object]]) -> list[None]:
            record = pairs[0][0]
            if len(pairs) > 1 or record.trace_id in choking:  # type: ignore[attr-defined]
                raise RuntimeError("the chunk store choked")
            if not choking:
                choking.append(record.trace_id)  # type: ignore[attr-defined]
                raise RuntimeError("the chunk store choked")
            return [None]

        m1.worker.lookup = lookup  # type: ignore[assignment]
        drain(fleet)
        dead = m1.stream.dead()
        assert [d.trace_id for d in dead] == choking
        assert all("the chunk store choked" in d.reason for d in dead)
        assert len(fake.scores_by_trace()) == demo_counts().scored - 1


def test_redis_away_while_the_judge_claims_buries_nothing_and_counts_no_failure(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    """Redis gone in the middle of a batch (the judge's claim asks it for every trace) is
    no entry's fault: the batch stops at the first, nothing is counted failed or buried,
    and once Redis is back every trace is scored. Before, each entry of the batch failed
    in turn (each after redis-py's retries), counting deliveries toward the dead stream."""
    fake.add_observations(traces())
    judge = OpenAIStub()
    with judge:
        judge_every_trace(monkeypatch, judge.url)
        settings = fleet_settings(monkeypatch, fake, redis_proc.url, max_deliveries=1)
        with members(settings, tmp_path, ["m1"]) as (m1,):
            m1.keep()
            with keeping(m1):
                m1.read_once()
            stopped: list[bool] = []

            def lookup(pairs: list[tuple[object, object]]) -> list[None]:
                if not stopped:  # after the batch was read, before its traces are recorded
                    redis_proc.stop()
                    stopped.append(True)
                return [None] * len(pairs)

            m1.worker.lookup = lookup  # type: ignore[assignment]
            assert m1._work_step() is False  # Redis away: the worker waits
            assert not m1.redis_ok
            assert _entries(m1, "failed") == 0 and _entries(m1, "dead") == 0
            redis_proc.start()
            m1.keep()  # reachable again
            assert m1.redis_ok
            drain([m1])
            assert m1.stream.dead_count() == 0 and _entries(m1, "failed") == 0
            assert len(fake.scores_by_trace()) == demo_counts().scored
