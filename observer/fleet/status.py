"""`observer fleet status`: the fleet as Redis sees it, read-only.

Members alive (seen within three leases) with their role and figures, who
holds the reader's lease and its token, the stream's length, the entries
pending per member and not yet acknowledged, and the watermark. Read with a
client of its own; nothing is written.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import redis

from observer.errors import ConfigError
from observer.fleet.connect import text
from observer.fleet.keys import GROUP, Keys
from observer.fleet.stream import TraceStream
from observer.times import iso

if TYPE_CHECKING:
    from observer.config import Settings


@dataclass(frozen=True)
class MemberStatus:
    name: str
    seen_s_ago: float
    figures: dict[str, str]


@dataclass(frozen=True)
class FleetStatus:
    fleet: str
    reader: str | None  # member:token
    watermark: datetime | None
    stream_length: int
    pending: int
    unacknowledged: int
    pending_by_member: dict[str, int] = field(default_factory=dict)
    members: list[MemberStatus] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["watermark"] = iso(self.watermark) if self.watermark is not None else None
        return data


def fleet_status(
    client: redis.Redis, name: str, lease_s: float, *, now_ms: int | None = None
) -> FleetStatus:
    """What `observer fleet status` shows (raises redis errors: the caller translates)."""
    keys = Keys(name)
    stream = TraceStream(client, keys, maxlen=1)
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    alive_since = now_ms - int(3 * lease_s * 1000)
    seen = cast(
        list[tuple[bytes, float]],
        client.zrangebyscore(keys.members, alive_since, "+inf", withscores=True),
    )
    members = []
    for raw, at in seen:
        member = text(raw)
        figures = cast(dict[bytes, bytes], client.hgetall(keys.member(member)))
        members.append(
            MemberStatus(
                member,
                round((now_ms - at) / 1000, 1),
                {text(k): text(v) for k, v in sorted(figures.items())},
            )
        )
    exists = bool(client.exists(keys.stream))
    groups = cast(list[dict[str, Any]], client.xinfo_groups(keys.stream)) if exists else []
    pending = stream.pending() if any(text(g["name"]) == GROUP for g in groups) else None
    holder = client.get(keys.lease)
    return FleetStatus(
        fleet=name,
        reader=text(holder) if holder is not None else None,
        watermark=stream.watermark(),
        stream_length=stream.length() if exists else 0,
        pending=pending.count if pending else 0,
        unacknowledged=stream.unacked(),
        pending_by_member=pending.consumers if pending else {},
        members=members,
    )


def read_status(settings: Settings) -> FleetStatus:
    """The fleet of `settings` as Redis sees it now, on a client closed afterwards.
    ConfigError without [fleet]; FleetUnreachable when Redis cannot be read."""
    from observer.fleet.connect import connect, translated

    if settings.fleet is None:
        raise ConfigError("no [fleet] section: this observer is not in a fleet")
    client = connect(settings)
    try:
        with translated(f"Redis (the URL in {settings.fleet.secret_env})"):
            return fleet_status(client, settings.fleet.name, settings.fleet.lease_s)
    finally:
        client.close()


def status_rows(status: FleetStatus) -> list[tuple[str, str]]:
    """The status as (key, value) rows for a table."""
    rows = [
        ("fleet", status.fleet),
        ("reader", status.reader or "none (no member holds the lease)"),
        ("watermark", iso(status.watermark) if status.watermark else "not set yet"),
        ("stream length", f"{status.stream_length:,}"),
        ("pending (delivered, not acknowledged)", f"{status.pending:,}"),
        ("unacknowledged (pending or not delivered)", f"{status.unacknowledged:,}"),
        ("members alive", str(len(status.members))),
    ]
    for member in status.members:
        f = member.figures
        rows.append(
            (
                f"  {member.name}",
                f"{f.get('role', '?')}, pid {f.get('pid', '?')}, seen {member.seen_s_ago:g} s ago, "
                f"read {f.get('read', '0')}, acknowledged {f.get('acknowledged', '0')}, "
                f"claimed {f.get('claimed', '0')}, pending "
                f"{status.pending_by_member.get(member.name, 0)}, outbox {f.get('outbox', '0')}",
            )
        )
    return rows
