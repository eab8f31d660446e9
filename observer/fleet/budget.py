"""The judge's budget counted once for the fleet, in Redis (a `SharedBudget`).

Sampling stays the pure, hash-deterministic `decide` of each member; what is
shared is what it decides against and who judges:

    <name>:judge:hour:<YYYY-MM-DDTHH>   traces taken for the judge this UTC hour
    <name>:judge:tokens:<YYYY-MM-DD>    tokens reserved or spent this UTC day
    <name>:judge:trace:<id>:<basis>     set once (NX) by the member that judges
                                        this answer; holds the tokens it reserved

`claim` is one script: the answer taken (SET NX), the hour counted, the expected
tokens reserved; a second member offered the same answer (the entry was scored
twice after a crash) finds the key and does not judge it. `spent` replaces the
reservation with the tokens used. The check against the caps and the claim are
two steps: members deciding at the same moment may overshoot a cap by a few.
"""

from __future__ import annotations

from typing import cast

import redis

from observer.fleet.keys import Keys

HOUR_S = 2 * 3600
DAY_S = 2 * 86400

# KEYS judged, hour, day; ARGV tokens, judged ttl s, hour ttl s, day ttl s -> 1 taken, 0 not
CLAIM = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 0 end
redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('INCRBY', KEYS[3], ARGV[1])
redis.call('EXPIRE', KEYS[3], ARGV[4])
return 1
"""
# KEYS judged, day; ARGV tokens used -> the reservation replaced by them
SPENT = """
local reserved = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
redis.call('INCRBY', KEYS[2], tonumber(ARGV[1]) - reserved)
if reserved ~= 0 then redis.call('SET', KEYS[1], '0', 'KEEPTTL') end
return 1
"""


class FleetBudget:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self._claim = client.register_script(CLAIM)
        self._spent = client.register_script(SPENT)

    def counts(self, hour: str, day: str) -> tuple[int, int]:
        raw = cast(
            list[bytes | None],
            self.client.mget([self.keys.judged_hour(hour), self.keys.judged_tokens(day)]),
        )
        judged, tokens = (int(v) if v is not None else 0 for v in raw)
        return judged, tokens

    def claim(self, trace_id: str, basis: str, hour: str, day: str, tokens: int) -> bool:
        keys = [
            self.keys.judged(trace_id, basis),
            self.keys.judged_hour(hour),
            self.keys.judged_tokens(day),
        ]
        return bool(int(self._claim(keys=keys, args=[max(0, tokens), DAY_S, HOUR_S, DAY_S])))

    def spent(self, trace_id: str, basis: str | None, day: str, tokens: int) -> None:
        keys = [self.keys.judged(trace_id, basis or ""), self.keys.judged_tokens(day)]
        self._spent(keys=keys, args=[tokens])
