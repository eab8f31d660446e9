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

`held()` says whether this member may act as the reader: it holds the lease
and has renewed it within the lease's time (by the monotonic clock, less a
margin), so a member cut from Redis stops reading before another can start.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from observer.fleet.keys import Keys

# KEYS[1] lease, KEYS[2] fence; ARGV[1] member, ARGV[2] ttl ms -> the token, or 0 (held).
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
# KEYS[1] lease; ARGV[1] value, ARGV[2] ttl ms -> 1 renewed, 0 not the holder.
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
    ) -> None:
        self.client = client
        self.keys = keys
        self.member = member
        self.ttl_ms = int(lease_s * 1000)
        self.lease_s = lease_s
        self.clock = clock
        self.value: str | None = None
        self.token: int | None = None
        self._renewed_at = 0.0
        self._acquire = client.register_script(ACQUIRE)
        self._renew = client.register_script(RENEW)
        self._release = client.register_script(RELEASE)

    def held(self) -> bool:
        """Held and renewed recently enough that no other member can hold it yet."""
        margin = min(1.0, self.lease_s / 5)
        return self.value is not None and self.clock() - self._renewed_at < self.lease_s - margin

    def keep(self) -> bool:
        """Renew the lease when held, else try to acquire it; whether it is held now.

        Raises redis errors as they come (the caller translates): a member that cannot
        reach Redis does not know, and `held()` turns false once the lease ran out."""
        started = self.clock()
        if self.value is not None:
            if int(self._renew(keys=[self.keys.lease], args=[self.value, self.ttl_ms])):
                self._renewed_at = started
                return True
            self.value = self.token = None  # expired and taken (or gone): lost
        token = int(
            self._acquire(keys=[self.keys.lease, self.keys.fence], args=[self.member, self.ttl_ms])
        )
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
