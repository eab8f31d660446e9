"""One reader at a time: a lease in Redis, renewed by its holder, fenced by a token.

Acquiring is `SET lease member:token NX PX lease_ms` with a token from `INCR` on
the fence key, raised to Redis's clock in microseconds when that is larger: every
holder's token is larger than every earlier holder's, even after Redis lost its
data (the counter with it) and started again from nothing.
Only the holder renews (a script compares the value, then `PEXPIRE`s) or
releases (compare, then `DEL`). Every write of the reader (publishing a trace,
moving the watermark) runs in a script that first compares the lease's value
with the writer's: a holder paused past its lease (a GC pause, a partition, a
SIGSTOP) finds another value, or none, and writes nothing (`LeaseLost`).

Taking or renewing the lease is refused (`EPOCH`) in an epoch this member has not noticed
(observer.fleet.epoch): a member whose call redis-py retried across a restart of
Redis without its data does not become the reader of the empty Redis unawares
(it would read at once, skipping the wait that lets every member give its memory
back first).

`held()` says whether this member may act as the reader: it holds the lease
and has renewed it within the lease's time (by the monotonic clock, less a
margin), so a member cut from Redis stops reading before another can start.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from observer.fleet.epoch import REFUSED, KnownEpoch, in_epoch
from observer.fleet.keys import Keys

# KEYS[1] lease, KEYS[2] fence; ARGV[1] member, ARGV[2] ttl ms -> the token, or 0 (held);
# guarded (KEYS[3] the epoch, ARGV[3] the member's) when the member knows its epoch.
# The token is seeded from the server's clock, so a fence lost with the data stays
# monotonic (in microseconds: two holders around a loss never share a
# millisecond's token); string.format keeps 16 digits from turning into 1.8e+15.
ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local token = redis.call('INCR', KEYS[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if token < now then
  token = now
  redis.call('SET', KEYS[2], string.format('%d', token))
end
local value = ARGV[1] .. ':' .. string.format('%d', token)
if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  return token
end
return 0
"""
# KEYS[1] lease; ARGV[1] value, ARGV[2] ttl ms -> 1 renewed, 0 not the holder; guarded
# (KEYS[2], ARGV[3]) as ACQUIRE: the lease survives a loss only where an eviction took
# the epoch key and left the lease.
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
# KEYS[1] lease; ARGV[1] value -> 1 released, 0 not the holder.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Lease:
    """The reader's lease as one member sees it; `value` is `member:token` while held."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        member: str,
        lease_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        epoch: KnownEpoch | None = None,
    ) -> None:
        """`epoch`: the fleet's epoch as this member knows it; the lease is taken only in
        it (a member's; None, as a tool or a test alone, takes it in any)."""
        self.client = client
        self.keys = keys
        self.member = member
        self.ttl_ms = int(lease_s * 1000)
        self.lease_s = lease_s
        self.clock = clock
        self.value: str | None = None
        self.token: int | None = None
        self._renewed_at = 0.0
        self.epoch = epoch
        self._acquire = client.register_script(
            ACQUIRE if epoch is None else in_epoch(ACQUIRE, 3, 3)
        )
        self._renew = client.register_script(RENEW if epoch is None else in_epoch(RENEW, 2, 3))
        self._release = client.register_script(RELEASE)

    def held(self) -> bool:
        """Held and renewed recently enough that no other member can hold it yet."""
        margin = min(1.0, self.lease_s / 5)
        return self.value is not None and self.clock() - self._renewed_at < self.lease_s - margin

    def keep(self) -> bool:
        """Renew the lease when held, else try to acquire it; whether it is held now.

        Raises redis errors as they come (the caller translates): a member that cannot
        reach Redis does not know, and `held()` turns false once the lease ran out; one
        in an epoch it has not noticed is refused (`EPOCH`: observer.fleet.stream.lost)."""
        try:
            return self._keep()
        except redis.ResponseError as error:
            if str(error).startswith(REFUSED):
                self.forget()  # the lease of the epoch it knew went with Redis's data
            raise

    def _keep(self) -> bool:
        started = self.clock()
        guard: tuple[list[str], list[str]] = ([], [])
        if self.epoch is not None:
            guard = ([self.keys.epoch], [self.epoch.acting()])
        if self.value is not None:
            renewal: list[str | int] = [self.value, self.ttl_ms, *guard[1]]
            if int(self._renew(keys=[self.keys.lease, *guard[0]], args=renewal)):
                self._renewed_at = started
                return True
            self.value = self.token = None  # expired and taken (or gone): lost
        keys = [self.keys.lease, self.keys.fence, *guard[0]]
        token = int(self._acquire(keys=keys, args=[self.member, self.ttl_ms, *guard[1]]))
        if token:
            self.token = token
            self.value = f"{self.member}:{token}"
            self._renewed_at = started
            return True
        return False

    def release(self) -> None:
        """Give the lease up (a clean shutdown), so another member reads at once."""
        if self.value is not None:
            self._release(keys=[self.keys.lease], args=[self.value])
        self.value = self.token = None

    def forget(self) -> None:
        """Stop acting as the holder without asking Redis (it cannot be reached)."""
        self.value = self.token = None

    def holder(self) -> str | None:
        """Who holds the lease now (`member:token`), as Redis says."""
        raw = self.client.get(self.keys.lease)
        return raw.decode() if isinstance(raw, bytes) else None


def fenced(script_body: str) -> str:
    """A reader's write script, run only while KEYS[1] (the lease) holds ARGV[1]."""
    return (
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('FENCED') end\n"
        + script_body
    )
