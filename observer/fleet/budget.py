"""The judge's budget counted once for the fleet, in Redis (a `SharedBudget`).

Sampling stays the pure, hash-deterministic `decide` of each member; what is
shared is the caps and who judges:

    <name>:judge:hour:<YYYY-MM-DDTHH>   traces taken for the judge this UTC hour
    <name>:judge:tokens:<YYYY-MM-DD>    tokens reserved or spent this UTC day
    <name>:judge:trace:<id>:<basis>     "<tokens> <owner>": set once by the member that
                                        judges this answer; the tokens it reserved

`claim` is one script: the answer not taken yet, the hour under its cap and
the day's tokens with this trace's under theirs, then the answer taken, the
hour counted and the tokens reserved. Nothing runs between the check and the
count, so members claiming at the same moment never take the fleet past a cap
(docs/judge.md#sampling). A second member offered the same answer (the entry
was scored twice after a crash) finds the key and does not judge it.

A claim is provisional until its member's transaction commits: it lives
`provisional_s` (shorter than `fleet.claim_idle_s`, so the member that claims
a dead member's entry finds it gone), and `confirm` gives it the claim's full
life. A failure before the commit `release`s it: the key deleted if it is still
this claim's, the hour's count and the tokens given back. `spent` replaces the
reservation with the tokens used.

Redis that lost its data (a restart without persistence, a failover) forgot
every claim and count: `restore` gives back this member's, from its state file,
once per (epoch, member). A claim carries the epoch its member acts in (for a
worker, the one its batch was read in: observer.fleet.epoch) and is refused
(`EPOCH`) in any other: a member that has not given its memory back to the new
epoch takes nothing there, and a batch read before the loss is never claimed
after it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, cast

import redis

from observer.fleet.epoch import KnownEpoch, in_epoch
from observer.fleet.keys import Keys
from observer.judge.service import buckets
from observer.state import State

HOUR_S = 2 * 3600
DAY_S = 2 * 86400  # a claim's life: a trace re-published within it is not judged again
PROVISIONAL_S = 10.0  # a claim's life until its member's commit confirms it
RESTORED_KEPT_S = 9 * 86400  # the restore marker outlives everything a restore gives back

Claimed = Literal["taken", "duplicate", "over_budget"]

# The claim's value is "<tokens> <owner>": the tokens it holds, and who made it.
_VALUE = """
local function owner(value) return value and string.match(value, '^%-?%d+ (.*)$') end
local function reserved(value) return value and tonumber(string.match(value, '^%-?%d+')) or 0 end
"""
# KEYS judged, hour, day; ARGV tokens, owner, provisional ttl s, hour ttl s, day ttl s,
# max judged per hour, max tokens per day -> 1 taken, 0 another member's, -1 over budget;
# guarded (KEYS[4] the epoch, ARGV[8] the member's) when the member knows its epoch
CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local need = tonumber(ARGV[1])
local judged = tonumber(redis.call('GET', KEYS[2]) or '0')
local tokens = tonumber(redis.call('GET', KEYS[3]) or '0')
local cap = tonumber(ARGV[7])
if judged >= tonumber(ARGV[6]) or tokens >= cap or tokens + need > cap then return -1 end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])
redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[4])
redis.call('INCRBY', KEYS[3], need)
redis.call('EXPIRE', KEYS[3], ARGV[5])
return 1
"""
# KEYS judged; ARGV tokens, owner, ttl s -> 1 the claim holds for its life, 0 another's
CONFIRM = (
    _VALUE
    + """
local value = redis.call('GET', KEYS[1])
if owner(value) == ARGV[2] then return redis.call('EXPIRE', KEYS[1], ARGV[3]) end
if value then return 0 end
-- Expired before the commit (a slow one): taken again, its counts were never given back.
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'EX', ARGV[3])
return 1
"""
)
# KEYS judged, hour, day; ARGV owner -> 1 released, 0 not this claim's (or gone)
RELEASE = (
    _VALUE
    + """
local value = redis.call('GET', KEYS[1])
if not value or owner(value) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
-- A counter gone with a data loss is not brought back below zero.
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('DECR', KEYS[2]) end
local tokens = reserved(value)
if tokens ~= 0 and redis.call('EXISTS', KEYS[3]) == 1 then redis.call('DECRBY', KEYS[3], tokens) end
return 1
"""
)
# KEYS judged, day; ARGV tokens used, day ttl s -> the reservation replaced by them
SPENT = (
    _VALUE
    + """
local value = redis.call('GET', KEYS[1])
local tokens = reserved(value)
redis.call('INCRBY', KEYS[2], tonumber(ARGV[1]) - tokens)
if redis.call('TTL', KEYS[2]) < 0 then redis.call('EXPIRE', KEYS[2], ARGV[2]) end
if tokens ~= 0 then
  redis.call('SET', KEYS[1], '0 ' .. (owner(value) or ''), 'KEEPTTL')
end
return 1
"""
)
# KEYS marker, hour, day, claims...; ARGV marker ttl s, judged, tokens, hour ttl s, day ttl s,
# then a value and a ttl s per claim -> what was given back, -1 given back before
RESTORE = """
if redis.call('HSETNX', KEYS[1], 'judge', '1') == 0 then return -1 end
redis.call('EXPIRE', KEYS[1], ARGV[1])
local given = 0
if tonumber(ARGV[2]) > 0 then
  redis.call('INCRBY', KEYS[2], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
  given = given + 1
end
if tonumber(ARGV[3]) > 0 then
  redis.call('INCRBY', KEYS[3], ARGV[3])
  redis.call('EXPIRE', KEYS[3], ARGV[5])
  given = given + 1
end
for i = 4, #KEYS do
  local at = 6 + (i - 4) * 2
  if redis.call('SET', KEYS[i], ARGV[at], 'NX', 'EX', ARGV[at + 1]) then given = given + 1 end
end
return given
"""


def provisional_s(claim_idle_s: float) -> float:
    """An unconfirmed claim's life: gone before the entry of a member that died holding it
    is claimed by another member (after `claim_idle_s`), which then takes it afresh."""
    return min(PROVISIONAL_S, claim_idle_s / 2)


class FleetBudget:
    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        provisional_s: float = PROVISIONAL_S,
        epoch: KnownEpoch | None = None,
    ) -> None:
        """`provisional_s`: how long a claim lives before its member's commit confirms it;
        shorter than `fleet.claim_idle_s`. `epoch`: the fleet's epoch as this member knows
        it; claims are taken only in it (a member's; None, as a tool alone, in any)."""
        self.client = client
        self.keys = keys
        self.provisional_ms = max(1, int(provisional_s * 1000))
        self.epoch = epoch
        self._claim = client.register_script(CLAIM if epoch is None else in_epoch(CLAIM, 4, 8))
        self._confirm = client.register_script(CONFIRM)
        self._release = client.register_script(RELEASE)
        self._spent = client.register_script(SPENT)
        self._restore = client.register_script(RESTORE)

    def counts(self, hour: str, day: str) -> tuple[int, int]:
        """(traces taken this hour, tokens reserved or spent this day) by the whole fleet."""
        raw = cast(
            list[bytes | None],
            self.client.mget([self.keys.judged_hour(hour), self.keys.judged_tokens(day)]),
        )
        judged, tokens = (int(v) if v is not None else 0 for v in raw)
        return judged, tokens

    def claim(
        self,
        trace_id: str,
        basis: str,
        hour: str,
        day: str,
        tokens: int,
        *,
        owner: str,
        max_judged: int,
        max_tokens: int,
    ) -> Claimed:
        """Take this answer for the judge if the fleet's caps allow it (provisionally).
        Raises redis.ResponseError `EPOCH` in an epoch this member has not noticed."""
        keys = [
            self.keys.judged(trace_id, basis),
            self.keys.judged_hour(hour),
            self.keys.judged_tokens(day),
        ]
        args: list[str | int] = [
            max(0, tokens),
            owner,
            self.provisional_ms,
            HOUR_S,
            DAY_S,
            max_judged,
            max_tokens,
        ]
        if self.epoch is not None:
            keys.append(self.keys.epoch)
            args.append(self.epoch.acting())
        answer = int(cast(int, self._claim(keys=keys, args=args)))
        return "taken" if answer > 0 else "duplicate" if answer == 0 else "over_budget"

    def confirm(self, trace_id: str, basis: str, tokens: int, owner: str) -> bool:
        """Its member committed: the claim lives its full life. False when another member
        holds the answer (this claim had expired before the commit)."""
        args: list[str | int] = [max(0, tokens), owner, DAY_S]
        return bool(
            int(cast(int, self._confirm(keys=[self.keys.judged(trace_id, basis)], args=args)))
        )

    def release(self, trace_id: str, basis: str, hour: str, day: str, owner: str) -> bool:
        """Its member failed before its commit: the answer, the hour's count and the tokens
        given back, if the claim is still `owner`'s."""
        keys = [
            self.keys.judged(trace_id, basis),
            self.keys.judged_hour(hour),
            self.keys.judged_tokens(day),
        ]
        return bool(int(cast(int, self._release(keys=keys, args=[owner]))))

    def spent(self, trace_id: str, basis: str | None, day: str, tokens: int) -> None:
        keys = [self.keys.judged(trace_id, basis or ""), self.keys.judged_tokens(day)]
        self._spent(keys=keys, args=[tokens, DAY_S])

    def restore(self, state: State, epoch: str, member: str, now: datetime) -> int:
        """After Redis lost its data (`epoch` is the new one): give back what this member
        did, from its state file, so the fleet does not do it twice: its judge spend of
        the current hour and day (its share of the fleet's counters), and the claims of
        the answers it took, waiting or judged within a claim's life. Once per (epoch,
        member): a second call gives back nothing. How many counters and claims."""
        hour, day = buckets(now)
        judged, tokens = state.judge.budget(hour, day)
        owner = f"restored:{member}"
        keys = [self.keys.restored(epoch, member), self.keys.judged_hour(hour)]
        keys.append(self.keys.judged_tokens(day))
        args: list[str | int] = [RESTORED_KEPT_S, judged, tokens, HOUR_S, DAY_S]
        for sample in state.judge.pending():
            keys.append(self.keys.judged(sample.trace_id, sample.basis or ""))
            args += [f"{sample.reserved} {owner}", DAY_S]
        for trace_id, basis, taken_at in state.judge.judged_since(now - timedelta(seconds=DAY_S)):
            left = DAY_S - int((now - taken_at).total_seconds())
            keys.append(self.keys.judged(trace_id, basis))
            args += [f"0 {owner}", min(DAY_S, max(1, left))]
        return max(0, int(cast(int, self._restore(keys=keys, args=args))))
