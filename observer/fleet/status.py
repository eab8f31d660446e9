"""`observer fleet status`: the fleet as Redis sees it, read-only.

Members seen within the last day with their role and figures (one not seen for
longer than the lease is shown as gone), who holds the reader's lease and its
token, the stream's length, the entries pending per member and not yet
acknowledged, the dead entries, the watermark, and since when this Redis holds
the fleet's data (and whether the members found it had lost it). Read with a
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
from observer.fleet.keys import GROUP, Keys, epoch_parts
from observer.fleet.stream import Dead, TraceStream
from observer.times import iso

if TYPE_CHECKING:
    from observer.config import Settings


# Members not seen for this long are not listed at all.
LISTED_MS = 86_400_000


@dataclass(frozen=True)
class MemberStatus:
    name: str
    seen_s_ago: float
    figures: dict[str, str]
    gone: bool = False  # not seen for longer than the lease: dead, stopped or cut off


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
    dead: int = 0
    dead_traces: list[str] = field(default_factory=list)  # the oldest few
    epoch: str | None = None  # `<ms> <member> new|reset`: since when Redis holds the data
    resets: int = 0  # members that found Redis had lost its data, in this epoch

    @property
    def alive(self) -> list[MemberStatus]:
        return [m for m in self.members if not m.gone]

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
    seen = cast(
        list[tuple[bytes, float]],
        client.zrangebyscore(keys.members, now_ms - LISTED_MS, "+inf", withscores=True),
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
                gone=now_ms - at > lease_s * 1000,
            )
        )
    dead = stream.dead(5)
    epoch = client.get(keys.epoch)
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
        dead=stream.dead_count(),
        dead_traces=[d.trace_id for d in dead],
        epoch=text(epoch) if epoch is not None else None,
        resets=sum(1 for m in members if int(m.figures.get("resets") or 0) > 0),
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


def dead_entries(settings: Settings, *, limit: int, replay: bool) -> tuple[list[Dead], int]:
    """The fleet's dead entries (the oldest `limit`), replayed when `replay`; with how many
    went back. ConfigError without [fleet]; FleetUnreachable when Redis cannot be used."""
    from observer.fleet.connect import connect, translated

    if settings.fleet is None:
        raise ConfigError("no [fleet] section: this observer is not in a fleet")
    client = connect(settings)
    try:
        with translated(f"Redis (the URL in {settings.fleet.secret_env})"):
            stream = TraceStream(client, Keys(settings.fleet.name), maxlen=1)
            found = stream.dead(limit)
            return found, stream.replay(found) if replay else 0
    finally:
        client.close()


def status_rows(status: FleetStatus) -> list[tuple[str, str]]:
    """The status as (key, value) rows for a table."""
    rows = [
        ("fleet", status.fleet),
        ("redis data", _epoch_row(status)),
        ("reader", status.reader or "none (no member holds the lease)"),
        ("watermark", iso(status.watermark) if status.watermark else "not set yet"),
        ("stream length", f"{status.stream_length:,}"),
        ("pending (delivered, not acknowledged)", f"{status.pending:,}"),
        ("unacknowledged (pending or not delivered)", f"{status.unacknowledged:,}"),
        ("dead (failed too often)", _dead_row(status)),
        ("members alive", f"{len(status.alive)} ({len(status.members) - len(status.alive)} gone)"),
    ]
    for member in status.members:
        f = member.figures
        state = "GONE, " if member.gone else ""
        rows.append(
            (
                f"  {member.name}",
                f"{state}{f.get('role', '?')}, pid {f.get('pid', '?')}, seen "
                f"{member.seen_s_ago:g} s ago, read {f.get('read', '0')}, acknowledged "
                f"{f.get('acknowledged', '0')}, claimed {f.get('claimed', '0')}, failed "
                f"{f.get('failed', '0')}, pending {status.pending_by_member.get(member.name, 0)}, "
                f"outbox {f.get('outbox', '0')}",
            )
        )
    return rows


def _epoch_row(status: FleetStatus) -> str:
    if status.epoch is None:
        return "no epoch yet (no member has started)"
    since, by, kind = epoch_parts(status.epoch)
    if kind == "reset" or status.resets:
        return (
            f"LOST and recreated at {iso(since)} by {by} ({status.resets} member(s) found it); "
            "Redis needs AOF and maxmemory-policy noeviction"
        )
    return f"since {iso(since)} (started by {by})"


def _dead_row(status: FleetStatus) -> str:
    if not status.dead:
        return "0"
    traces = ", ".join(status.dead_traces) + (" ..." if status.dead > 5 else "")
    return f"{status.dead:,} (traces {traces}; `observer fleet dead` lists them)"
