"""No member acts in an epoch it has not noticed, on a real redis-server: after Redis lost
its data, a member that has not given back what it remembers can neither take the reader's
lease nor claim an answer for the judge there (the scripts refuse: `EPOCH`), and a batch
read before the loss is never claimed after it. Seen under load: a keeper's renewal
retried by redis-py across the restart took the lease on the empty Redis and read at once;
a worker went on with a batch read before the loss; the judge went past its cap."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import redis

from observer.fleet.budget import FleetBudget
from observer.fleet.epoch import KnownEpoch
from observer.fleet.keys import Keys
from observer.fleet.lease import Lease
from observer.fleet.member import Member
from observer.fleet.stream import lost
from tests.daemon_helpers import demo_counts
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.openai_stub import OpenAIStub
from tests.fleet.helpers import drain, fleet_settings, judge_every_trace, keeping, members, traces
from tests.servers import RedisServer

KEYS = Keys("t")
HOUR, DAY = "2026-12-01T12", "2026-12-01"
ROOMY = {"max_judged": 1000, "max_tokens": 10_000_000}


def test_a_lease_is_not_taken_in_an_epoch_its_member_has_not_noticed(
    rclient: redis.Redis,
) -> None:
    known = KnownEpoch("e1")
    rclient.set(KEYS.epoch, "e1")
    lease = Lease(rclient, KEYS, "a", 15, epoch=known)
    assert lease.keep()
    lease.release()
    rclient.flushall()  # Redis lost its data between the member's epoch check and its keep
    for found in (None, "e2"):  # nothing yet, then another member's new epoch
        if found is not None:
            rclient.set(KEYS.epoch, found)
        with pytest.raises(redis.ResponseError) as refused:
            lease.keep()
        assert lost(refused.value)  # handled as the data loss it is
        assert not lease.held() and rclient.get(KEYS.lease) is None
    known.value = "e2"  # noticed, memory given back
    assert lease.keep() and lease.holder() == lease.value


def test_the_judge_is_not_claimed_in_an_epoch_its_member_has_not_noticed(
    rclient: redis.Redis,
) -> None:
    known = KnownEpoch("e1")
    budget = FleetBudget(rclient, KEYS, epoch=known)

    def claim(trace: str) -> str:
        return budget.claim(trace, "b", HOUR, DAY, 100, owner="a", **ROOMY)

    for found in (None, "e2"):
        if found is not None:
            rclient.set(KEYS.epoch, found)
        with pytest.raises(redis.ResponseError) as refused:
            claim("x")
        assert lost(refused.value)
        assert budget.counts(HOUR, DAY) == (0, 0) and not rclient.exists(KEYS.judged("x", "b"))
    known.value = "e2"
    # A thread whose work was read in the old epoch still may not claim in the new one.
    answers: list[BaseException | str] = []

    def worker() -> None:
        with known.pinned("e1"):
            try:
                answers.append(claim("x"))
            except redis.ResponseError as error:
                answers.append(error)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert isinstance(answers[0], redis.ResponseError) and lost(answers[0])
    assert claim("x") == "taken" and budget.counts(HOUR, DAY) == (1, 100)


@pytest.fixture
def fake() -> FakeLangfuse:
    fake = FakeLangfuse.service_like(seed=11, ingestion_jitter_s=0.0)
    fake.start()
    yield fake  # type: ignore[misc]
    fake.stop()


def _published(member: Member) -> float:
    return member.parts.metrics.value("observer_fleet_entries_total", event="published")  # type: ignore[attr-defined, no-any-return]


def test_a_keeper_that_missed_the_loss_neither_takes_the_lease_nor_reads_at_once(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
) -> None:
    """Its epoch checked, then Redis restarted empty, then its renewal (redis-py retries
    it across the restart): refused, not a lease on the empty Redis. The keeper's next
    round notices the loss, and the reader it becomes waits before it reads."""
    fake.add_observations(traces())
    settings = fleet_settings(monkeypatch, fake, redis_proc.url)
    with members(settings, tmp_path, ["m1"]) as (m1,):
        m1.keep()
        assert m1.lease.held()
        rclient.flushall()
        with pytest.raises(redis.ResponseError) as refused:
            m1.lease.keep()
        assert lost(refused.value)
        assert rclient.get(m1.keys.lease) is None
        m1.keep()
        assert m1.parts.metrics.value("observer_fleet_redis_resets_total") == 1  # type: ignore[attr-defined]
        assert m1.lease.held()
        m1._read_step()  # within a lease of the loss: no pass yet
        assert _published(m1) == 0 and rclient.xlen(m1.keys.stream) == 0


@pytest.mark.parametrize("noticed", [False, True], ids=["not-noticed", "noticed-mid-batch"])
def test_a_batch_read_before_the_loss_is_not_claimed_for_the_judge_after_it(
    monkeypatch: pytest.MonkeyPatch,
    fake: FakeLangfuse,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    tmp_path: Path,
    noticed: bool,
) -> None:
    """Redis restarts empty while a worker scores a batch, and another member starts the
    new epoch; this member's keeper has not noticed yet, or noticed and gave back while
    the batch went on. None of the batch's answers is claimed for the judge in the new
    epoch (another member may be judging them there, its claims not given back yet),
    nothing counts as failed, the member handles the loss, and its next batch is new."""
    fake.add_observations(traces())
    judge = OpenAIStub()
    with judge:
        judge_every_trace(monkeypatch, judge.url)
        settings = fleet_settings(monkeypatch, fake, redis_proc.url)
        with members(settings, tmp_path, ["m1", "m2"]) as (m1, m2):
            for m in (m1, m2):
                m.keep()
            with keeping(m1):
                m1.read_once()
            lost_at: list[bool] = []

            def lookup(pairs: list[tuple[object, object]]) -> list[None]:
                if not lost_at:  # after the batch was read, before its traces are recorded
                    rclient.flushall()
                    m2.keep()  # the new epoch, begun by another member
                    if noticed:
                        m1.keep()  # this member's keeper, on its own thread in the daemon
                    lost_at.append(True)
                return [None] * len(pairs)

            m1.worker.lookup = lookup  # type: ignore[assignment]
            m1._work_step()
            assert rclient.keys("{t}:judge:*") == []  # nothing claimed in the new epoch
            assert m1.parts.metrics.value("observer_fleet_redis_resets_total") == 1  # type: ignore[attr-defined]
            for event in ("failed", "dead"):
                assert m1.parts.metrics.value("observer_fleet_entries_total", event=event) == 0  # type: ignore[attr-defined]
            # The entries of the old epoch are forgotten; the new epoch's are scored.
            assert m1.worker.step(block_ms=0).read == 0 and not m1.worker.awaiting
            m1.worker.lookup = None
            fake.add_observations(traces(tag="after"))
            for m in (m1, m2):
                m.keep()
            holder = next(m for m in (m1, m2) if m.lease.held())
            with keeping(holder):
                holder.read_once()
            drain([m1, m2])
            assert len(fake.scores_by_trace()) >= demo_counts().scored
