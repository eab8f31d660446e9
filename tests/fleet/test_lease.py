"""The reader's lease against a real redis-server: one holder, renewed, fenced."""

from __future__ import annotations

import pytest
import redis

from observer.fleet.keys import Keys
from observer.fleet.lease import Lease, fenced

KEYS = Keys("t")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_one_member_holds_the_lease_and_the_others_do_not(rclient: redis.Redis) -> None:
    a, b = Lease(rclient, KEYS, "a", 15), Lease(rclient, KEYS, "b", 15)
    assert a.keep() and a.held()
    assert not b.keep() and not b.held()
    assert a.keep()  # renewed
    assert a.holder() == a.value == f"a:{a.token}"
    assert 0 < rclient.pttl(KEYS.lease) <= 15_000


def test_a_released_lease_is_taken_with_a_larger_token(rclient: redis.Redis) -> None:
    a, b = Lease(rclient, KEYS, "a", 15), Lease(rclient, KEYS, "b", 15)
    assert a.keep()
    first = a.token
    a.release()
    assert not a.held() and rclient.get(KEYS.lease) is None
    assert b.keep()
    assert b.token is not None and first is not None and b.token > first


def test_an_expired_lease_goes_to_another_and_its_old_holder_learns_it(
    rclient: redis.Redis,
) -> None:
    a, b = Lease(rclient, KEYS, "a", 15), Lease(rclient, KEYS, "b", 15)
    assert a.keep()
    rclient.delete(KEYS.lease)  # what expiry does while `a` is paused
    assert b.keep()
    assert not a.keep()  # its renewal finds b's value: lost, and b holds it
    assert a.value is None and b.holder() == b.value


def test_held_turns_false_when_not_renewed_within_the_lease() -> None:
    clock = Clock()
    client = redis.Redis()  # never called: keep() is not
    lease = Lease(client, KEYS, "a", 10, clock=clock)
    lease.value, lease._renewed_at = "a:1", clock.t
    assert lease.held()
    clock.t += 8.9
    assert lease.held()
    clock.t += 0.2  # within a margin of the lease's end another member may take it
    assert not lease.held()


def test_a_fenced_write_by_a_holder_that_lost_the_lease_writes_nothing(
    rclient: redis.Redis,
) -> None:
    write = rclient.register_script(fenced("return redis.call('SET', KEYS[2], ARGV[2])"))
    a, b = Lease(rclient, KEYS, "a", 15), Lease(rclient, KEYS, "b", 15)
    assert a.keep()
    assert a.value is not None
    write(keys=[KEYS.lease, "x"], args=[a.value, "from a"])
    old = a.value
    rclient.delete(KEYS.lease)
    assert b.keep()
    with pytest.raises(redis.ResponseError, match="FENCED"):
        write(keys=[KEYS.lease, "x"], args=[old, "from a, paused"])
    assert rclient.get("x") == b"from a"
