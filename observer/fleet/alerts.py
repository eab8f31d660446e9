"""Alerts once per fleet: every member's signal rows shared, one evaluator, state handed on.

    Keys.signals         every trace row a member wrote (its history), XADD MAXLEN ~
    Keys.alert_state     the evaluator's window-rule state and progress (fenced)
    Keys.trace_alert     a trace rule raised for a trace (SET NX): once per fleet
    Keys.alert_hour      traces a rule raised in an hour, fleet-wide

Every member follows the signals stream into its own history (the rows other
members wrote), so whichever member evaluates sees the whole fleet's history.
Before it moves its local watermark (what window rules over traces evaluate up
to) to the fleet's, it reads the stream up to its end as it was when it read
the watermark: a trace's row is published when its worker commits, before it
acknowledges the entry, so before the watermark can pass it.

The window rules are evaluated by the reader alone (the lease holder): on
gaining the lease a member takes over the alert state the last evaluator handed
on, and hands its own on after every evaluation, in a write fenced by the lease;
a change of evaluator neither pages again for an alert that fires nor forgets
one. A trace rule is raised by the member that scored the trace, once per fleet,
and its `max_per_hour` counts the whole fleet's traces: past it, a member keeps
the trace for its own hourly digest instead of notifying it. Its claim (the
trace's key) is provisional until the member's own transaction records the
trace as raised (`confirm`), and given back when that transaction fails
(`release`): a member that failed in between raises it when it tries again.

Redis that lost its data forgot which traces were raised and the hours' counts:
`restore` gives back this member's, from its state file, once per (epoch, member).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, cast

import orjson
import redis
import structlog

from observer.fleet.budget import PROVISIONAL_S, RESTORED_KEPT_S
from observer.fleet.connect import LeaseLost, text
from observer.fleet.keys import Keys
from observer.fleet.lease import Lease, fenced
from observer.state import State
from observer.state.rows import NO_DIMS, Row

log = structlog.get_logger("observer.fleet")

TRACE_ALERT_KEPT_S = 9 * 86400  # longer than any history is kept
HAND_OVER = fenced("return redis.call('SET', KEYS[2], ARGV[2])")
HOUR_KEPT_S = 3 * 3600  # the counter of an hour outlives it
# KEYS: the trace's key, the hour's counter; ARGV: member, trace key's life (ms, until
# confirmed), counter's life. -1: raised already; otherwise how many traces the rule
# raised in the hour, this one too.
ADMIT = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return -1 end
local raised = redis.call('INCR', KEYS[2])
if raised == 1 then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
return raised
"""
# KEYS: the trace's key; ARGV: member, its life -> 1 held for its life, 0 another member's
CONFIRM = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""
# KEYS: the trace's key, the hour's counter; ARGV: member -> 1 given back, 0 not its own
RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('DECR', KEYS[2]) end
return 1
"""
# KEYS: the marker, then the rules' hour counters, then the traces' keys; ARGV: marker's
# life, how many counters, each counter's count, the counters' life, member, then each
# trace key's life -> what was given back, -1 given back before.
RESTORE = """
if redis.call('HSETNX', KEYS[1], 'alerts', '1') == 0 then return -1 end
redis.call('EXPIRE', KEYS[1], ARGV[1])
local counters = tonumber(ARGV[2])
local given = 0
for i = 1, counters do
  if tonumber(ARGV[2 + i]) > 0 then
    redis.call('INCRBY', KEYS[1 + i], ARGV[2 + i])
    redis.call('EXPIRE', KEYS[1 + i], ARGV[3 + counters])
    given = given + 1
  end
end
local member = ARGV[4 + counters]
for i = 2 + counters, #KEYS do  -- the trace keys' lives follow the member, in order
  if redis.call('SET', KEYS[i], member, 'NX', 'EX', ARGV[3 + i]) then given = given + 1 end
end
return given
"""

Shared = Literal["duplicate", "notify", "over", "unknown"]


def encode_row(row: Row) -> bytes:
    fields: list[Any] = [
        row.at,
        dict(row.values),
        row.trace_id,
        row.project_id,
        row.environment,
        row.query_type,
    ]
    if row.dims:
        fields.append(dict(row.dims))
    return orjson.dumps(fields)


def decode_row(raw: bytes) -> Row:
    """A shared row; one of a member of an older version (six fields, no dimensions)
    reads with none."""
    at, values, trace_id, project_id, environment, query_type, *rest = orjson.loads(raw)
    dims = {str(k): str(v) for k, v in rest[0].items()} if rest and rest[0] else NO_DIMS
    return Row(float(at), values, trace_id, project_id, str(environment), str(query_type), dims)


def publish_row(client: redis.Redis, keys: Keys, member: str, maxlen: int, row: Row) -> None:
    """A trace row `member` committed to its history, for the other members (the state
    file's `on_row`); never raises."""
    try:
        client.xadd(
            keys.signals,
            {"member": member, "row": encode_row(row)},
            maxlen=maxlen,
            approximate=True,
        )
    except redis.RedisError as error:
        log.warning("signal_row_not_shared", trace_id=row.trace_id, error=str(error))


def _id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class FleetAlerts:
    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        state: State,
        member: str,
        *,
        maxlen: int,
        provisional_s: float = PROVISIONAL_S,
    ) -> None:
        """`provisional_s`: how long a trace rule's claim lives before this member's
        transaction confirms it; shorter than `fleet.claim_idle_s`."""
        self.client = client
        self.keys = keys
        self.state = state
        self.member = member
        self.maxlen = maxlen
        self.provisional_ms = max(1, int(provisional_s * 1000))
        self.last_id = state.noted("fleet_signals_id") or "0-0"
        self._hand_over = client.register_script(HAND_OVER)
        self._admit = client.register_script(ADMIT)
        self._confirm = client.register_script(CONFIRM)
        self._release = client.register_script(RELEASE)
        self._restore = client.register_script(RESTORE)

    # -- rows -------------------------------------------------------------------

    def publish(self, row: Row) -> None:
        """A row this member committed, for the others."""
        publish_row(self.client, self.keys, self.member, self.maxlen, row)

    def follow(self, block_ms: int | None = None, count: int = 500) -> int:
        """Rows the other members published since the last call, into this history."""
        answer = self.client.xread({self.keys.signals: self.last_id}, count=count, block=block_ms)
        rows: list[Row] = []
        last = self.last_id
        for _stream, entries in cast(
            list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]], answer or []
        ):
            for entry_id, fields in entries:
                last = text(entry_id)
                if text(fields.get(b"member", b"")) == self.member:
                    continue  # this member's own: in its history already
                try:
                    rows.append(decode_row(fields[b"row"]))
                except (KeyError, ValueError, TypeError) as error:
                    log.warning("signal_row_dropped", entry_id=last, error=str(error))
        if rows:
            self.state.history.put_many(rows)
        if last != self.last_id:
            self.last_id = last
            self.state.note("fleet_signals_id", last)
        return len(rows)

    def sync(self, watermark: Any) -> None:
        """Follow the stream to its end as of now, then move the local watermark to the
        fleet's `watermark` (read before this call): every row below it is in history."""
        newest = cast(list[tuple[bytes, Any]], self.client.xrevrange(self.keys.signals, count=1))
        end = _id(text(newest[0][0])) if newest else (0, 0)
        while _id(self.last_id) < end:
            before = self.last_id
            self.follow()
            if self.last_id == before:
                break  # trimmed past: nothing more to read
        if watermark is not None:
            local = self.state.watermark()
            if local is None or watermark > local:
                self.state.set_watermark(watermark)

    # -- trace rules --------------------------------------------------------------

    def admit(self, rule: str, trace_id: str, hour: str, max_per_hour: int) -> Shared:
        """For the first member to raise `rule` for `trace_id`: "notify" while the fleet
        has raised at most `max_per_hour` traces of the rule in `hour`, "over" past it;
        "duplicate" for any other member; "unknown" when Redis cannot say (the member
        then decides alone: at least once, and the receivers deduplicate by the key)."""
        keys = [self.keys.trace_alert(rule, trace_id), self.keys.alert_hour(rule, hour)]
        try:
            args: list[str | int] = [self.member, self.provisional_ms, HOUR_KEPT_S]
            raised = int(cast(int, self._admit(keys=keys, args=args)))
        except redis.RedisError:
            return "unknown"
        if raised < 0:
            return "duplicate"
        return "notify" if raised <= max_per_hour else "over"

    def confirm(self, rule: str, trace_id: str) -> None:
        """This member recorded the trace as raised: its claim holds for the key's life.
        Never raises (the notification is decided; the claim then expires unconfirmed)."""
        try:
            args: list[str | int] = [self.member, TRACE_ALERT_KEPT_S]
            held = int(
                cast(int, self._confirm(keys=[self.keys.trace_alert(rule, trace_id)], args=args))
            )
        except redis.RedisError as error:
            log.warning("trace_alert_not_confirmed", rule=rule, trace_id=trace_id, error=str(error))
            return
        if not held:  # expired before a slow commit, and another member raised it since
            log.warning("trace_alert_claim_lost", rule=rule, trace_id=trace_id)

    def release(self, rule: str, trace_id: str, hour: str) -> None:
        """This member failed before recording the trace as raised: the claim and the
        hour's count given back, so the trace is raised when it is scored again. Never
        raises (it runs while the failure is handled)."""
        keys = [self.keys.trace_alert(rule, trace_id), self.keys.alert_hour(rule, hour)]
        try:
            released = int(cast(int, self._release(keys=keys, args=[self.member])))
        except redis.RedisError as error:
            log.warning("trace_alert_not_released", rule=rule, trace_id=trace_id, error=str(error))
            return
        log.info("trace_alert_released", rule=rule, trace_id=trace_id, released=bool(released))

    def restore(self, state: State, epoch: str, member: str, now: datetime) -> int:
        """After Redis lost its data (`epoch` is the new one): give back, from `state`,
        the traces `member` raised within a trace key's life and its share of the current
        hour's count per rule, so no trace is raised twice and no hour's cap is passed.
        Once per (epoch, member): a second call gives back nothing. How many counters
        and claims."""
        hour = now.astimezone(UTC).strftime("%Y-%m-%dT%H")
        counts = state.alerts.raised_in(hour)
        keys = [self.keys.restored(epoch, member)]
        keys += [self.keys.alert_hour(rule, hour) for rule in counts]
        args: list[str | int] = [RESTORED_KEPT_S, len(counts), *counts.values(), HOUR_KEPT_S]
        args.append(member)
        moment = now.timestamp()
        for rule, trace_id, at in state.alerts.raised_since(moment - TRACE_ALERT_KEPT_S):
            keys.append(self.keys.trace_alert(rule, trace_id))
            args.append(min(TRACE_ALERT_KEPT_S, max(1, int(at + TRACE_ALERT_KEPT_S - moment))))
        return max(0, int(cast(int, self._restore(keys=keys, args=args))))

    # -- window rules' state --------------------------------------------------------

    def hand_over(self, lease_value: str | None) -> None:
        """The evaluator's alert state, for whoever evaluates next (fenced by the lease)."""
        if lease_value is None:
            return
        try:
            self._hand_over(
                keys=[self.keys.lease, self.keys.alert_state],
                args=[lease_value, self.state.alerts.export()],
            )
        except redis.ResponseError as error:
            if "FENCED" in str(error):
                raise LeaseLost("the reader's lease is held by another member") from None
            raise

    def hand_back(self) -> bool:
        """After Redis lost its data: this member's alert state, unless another's is there
        already (SET NX, unfenced: the lease went with the data). Whether it was set."""
        return bool(self.client.set(self.keys.alert_state, self.state.alerts.export(), nx=True))

    def take_over(self) -> bool:
        """The alert state the last evaluator handed on, into this state file."""
        raw = self.client.get(self.keys.alert_state)
        if raw is None:
            return False
        self.state.alerts.restore(cast(bytes, raw))
        return True


class FleetEvaluation:
    """Whether this member evaluates the window rules: while it holds the reader's lease
    and has taken the alert state over; after each evaluation it hands the state on
    (the evaluator's `active` and `after_tick`)."""

    def __init__(self, alerts: FleetAlerts, lease: Lease) -> None:
        self.alerts = alerts
        self.lease = lease
        self.evaluating = False

    def active(self) -> bool:
        return self.evaluating and self.lease.held()

    def take_over(self) -> bool:
        """The alert state the last evaluator handed on; raises redis.RedisError."""
        took = self.alerts.take_over()
        self.evaluating = True
        return took

    def give_back(self, _epoch: str) -> int:
        """After Redis lost its data: the last evaluator hands its alert state on again, so
        the next one neither pages again for an alert that fires nor forgets one. 1 when
        this member did."""
        return int(self.evaluating and self.alerts.hand_back())

    def hand_over(self) -> None:
        """After an evaluation: the alert state for whoever evaluates next."""
        if not self.active():
            return
        try:
            self.alerts.hand_over(self.lease.value)
        except LeaseLost:
            self.evaluating = False
        except redis.RedisError as error:  # the keeper finds Redis unreachable on its round
            log.warning("alert_state_not_handed_over", member=self.alerts.member, error=str(error))
