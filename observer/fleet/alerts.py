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
the trace for its own hourly digest instead of notifying it.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import orjson
import redis
import structlog

from observer.fleet.connect import LeaseLost, text
from observer.fleet.keys import Keys
from observer.fleet.lease import Lease, fenced
from observer.state import State
from observer.state.rows import Row

log = structlog.get_logger("observer.fleet")

TRACE_ALERT_KEPT_S = 9 * 86400  # longer than any history is kept
HAND_OVER = fenced("return redis.call('SET', KEYS[2], ARGV[2])")
HOUR_KEPT_S = 3 * 3600  # the counter of an hour outlives it
# KEYS: the trace's key, the hour's counter; ARGV: member, trace key's life, counter's life.
# -1: raised already; otherwise how many traces the rule raised in the hour, this one too.
ADMIT = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return -1 end
local raised = redis.call('INCR', KEYS[2])
if raised == 1 then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
return raised
"""

Shared = Literal["duplicate", "notify", "over", "unknown"]


def encode_row(row: Row) -> bytes:
    return orjson.dumps(
        [row.at, dict(row.values), row.trace_id, row.project_id, row.environment, row.query_type]
    )


def decode_row(raw: bytes) -> Row:
    at, values, trace_id, project_id, environment, query_type = orjson.loads(raw)
    return Row(float(at), values, trace_id, project_id, str(environment), str(query_type))


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
        self, client: redis.Redis, keys: Keys, state: State, member: str, *, maxlen: int
    ) -> None:
        self.client = client
        self.keys = keys
        self.state = state
        self.member = member
        self.maxlen = maxlen
        self.last_id = state.noted("fleet_signals_id") or "0-0"
        self._hand_over = client.register_script(HAND_OVER)
        self._admit = client.register_script(ADMIT)

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
            args: list[str | int] = [self.member, TRACE_ALERT_KEPT_S, HOUR_KEPT_S]
            raised = int(cast(int, self._admit(keys=keys, args=args)))
        except redis.RedisError:
            return "unknown"
        if raised < 0:
            return "duplicate"
        return "notify" if raised <= max_per_hour else "over"

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

    def take_over(self) -> bool:
        """The alert state the last evaluator handed on, into this state file."""
        raw = self.client.get(self.keys.alert_state)
        if raw is None:
            return False
        self.state.alerts.restore(cast(bytes, raw))
        return True


class Evaluation:
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
