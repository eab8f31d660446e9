"""The fleet's key names in Redis, from its `fleet.name` (pure).

Every key carries the name in a hash tag (`{observer}:...`), so the scripts that
touch several keys work on a Redis Cluster too: the keys share one slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

GROUP = "workers"  # the one consumer group every member reads in


@dataclass(frozen=True, slots=True)
class Keys:
    name: str

    @property
    def prefix(self) -> str:
        return "{" + self.name + "}"

    @property
    def lease(self) -> str:
        """The reader's lease: `member:token`, with a time to live."""
        return f"{self.prefix}:reader"

    @property
    def fence(self) -> str:
        """The last token handed out (INCR): every holder's is larger than the last's."""
        return f"{self.prefix}:reader:fence"

    @property
    def epoch(self) -> str:
        """When this Redis's fleet data began (`<ms> <member>`): gone means Redis lost it."""
        return f"{self.prefix}:epoch"

    def restored(self, epoch: str, member: str) -> str:
        """Set once `member` gave back what it remembers after the data loss of `epoch`."""
        return f"{self.prefix}:restored:{epoch}:{member}"

    @property
    def watermark(self) -> str:
        return f"{self.prefix}:watermark"

    @property
    def stream(self) -> str:
        """The complete traces the reader published, for the workers."""
        return f"{self.prefix}:traces"

    @property
    def dead(self) -> str:
        """Entries that failed `fleet.max_deliveries` times: kept for `fleet dead --replay`."""
        return f"{self.prefix}:dead"

    @property
    def inflight(self) -> str:
        """Published entries not yet acknowledged, scored by their trace's root (epoch s)."""
        return f"{self.prefix}:inflight"

    def seen(self, trace_id: str) -> str:
        """What the reader last published of a trace: digest, earliest root, latest start."""
        return f"{self.prefix}:seen:{trace_id}"

    @property
    def members(self) -> str:
        """Members by when they were last alive (ms): a sorted set."""
        return f"{self.prefix}:members"

    def member(self, name: str) -> str:
        """A member's own figures (role, entries read, acknowledged ...), expiring."""
        return f"{self.prefix}:member:{name}"

    def judged_hour(self, hour: str) -> str:
        return f"{self.prefix}:judge:hour:{hour}"

    def judged_tokens(self, day: str) -> str:
        return f"{self.prefix}:judge:tokens:{day}"

    def judged(self, trace_id: str, basis: str) -> str:
        """Set once a member took a trace's answer for the judge: judged once per fleet."""
        return f"{self.prefix}:judge:trace:{trace_id}:{basis}"

    @property
    def signals(self) -> str:
        """Every trace row a member committed to its history, for the others."""
        return f"{self.prefix}:signals"

    @property
    def alert_state(self) -> str:
        """The window rules' state the last evaluator handed on."""
        return f"{self.prefix}:alerts"

    def trace_alert(self, rule: str, trace_id: str) -> str:
        """Set once a member raised `rule` for a trace: raised once per fleet."""
        return f"{self.prefix}:alert:{rule}:{trace_id}"

    def alert_hour(self, rule: str, hour: str) -> str:
        """How many traces `rule` raised in `hour`, the whole fleet's."""
        return f"{self.prefix}:alert-hour:{rule}:{hour}"


def epoch_value(member: str, kind: str, now_ms: int) -> str:
    """The epoch key's value: when, who, and whether it began a fleet or a loss."""
    return f"{now_ms} {member} {kind}"


def epoch_parts(value: str) -> tuple[datetime, str, str]:
    """(when, who, "new" or "reset") of an epoch value."""
    at, member, kind = [*value.split(" "), "", ""][:3]
    moment = datetime.fromtimestamp(int(at) / 1000, UTC) if at.isdigit() else None
    return moment or datetime.fromtimestamp(0, UTC), member, kind
