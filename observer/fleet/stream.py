"""The trace stream, its consumer group, and what the reader keeps beside it.

    <name>:traces     the stream: one entry per complete trace (XADD MAXLEN ~)
    group "workers"   every member a consumer (XREADGROUP, XACK, XAUTOCLAIM)
    <name>:inflight   published entries not yet acknowledged, by their root (ZSET)
    <name>:watermark  where the next pass starts (the reader's, fenced)
    <name>:seen:<id>  what was last published of a trace (digest, root, latest)

`publish` is one fenced script: the lease is compared, an unchanged trace (the
same digest as last published) is left out, and otherwise XADD, the entry's
root into `inflight` and the trace's marks happen together, or not at all.
`ack` acknowledges and takes the entries out of `inflight` in one MULTI, so the
oldest root still in `inflight` is the oldest trace not yet safely in some
member's outbox: the watermark never passes it. Entries are trimmed only
approximately past `stream_maxlen`; the reader stops publishing well before
(`pending_bound`), so only acknowledged entries are ever trimmed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import redis

from observer.fleet.connect import LeaseLost, text
from observer.fleet.entry import Entry, encode
from observer.fleet.keys import GROUP, Keys
from observer.fleet.lease import fenced

# KEYS lease, stream, inflight, seen; ARGV value, digest, root s, latest s, ttl ms, maxlen,
# then the entry's field/value pairs -> the entry id, or "" when unchanged.
PUBLISH = fenced("""
local marks = ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4]
local old = redis.call('GET', KEYS[4])
if old and string.sub(old, 1, string.len(ARGV[2]) + 1) == ARGV[2] .. ' ' then
  redis.call('SET', KEYS[4], marks, 'PX', ARGV[5])
  return ''
end
local args = {'XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*'}
for i = 7, #ARGV do args[#args + 1] = ARGV[i] end
local id = redis.call(unpack(args))
redis.call('ZADD', KEYS[3], ARGV[3], id)
redis.call('SET', KEYS[4], marks, 'PX', ARGV[5])
return id
""")
# KEYS lease, watermark; ARGV value, watermark (epoch ms)
SET_WATERMARK = fenced("return redis.call('SET', KEYS[2], ARGV[2])")

Message = tuple[str, dict[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class Pending:
    """The group's pending entries: delivered, not acknowledged; per consumer."""

    count: int
    consumers: dict[str, int]


def _seconds(moment: datetime) -> str:
    return f"{moment.timestamp():.3f}"


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class TraceStream:
    def __init__(self, client: redis.Redis, keys: Keys, *, maxlen: int) -> None:
        self.client = client
        self.keys = keys
        self.maxlen = maxlen
        self._publish = client.register_script(PUBLISH)
        self._set_watermark = client.register_script(SET_WATERMARK)

    @property
    def pending_bound(self) -> int:
        """Unacknowledged entries past which the reader stops publishing."""
        return max(1, self.maxlen // 2)

    def ensure_group(self) -> None:
        """The stream and its group, created once for the fleet (MKSTREAM)."""
        try:
            self.client.xgroup_create(self.keys.stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise

    # -- the reader's side (fenced) ------------------------------------------

    def publish(self, lease_value: str, entry: Entry, marks_ttl_s: float) -> str | None:
        """Publish one complete trace; its entry id, or None when unchanged since the
        last time it was published. LeaseLost when the lease is no longer `lease_value`."""
        latest = _seconds(entry.latest) if entry.latest is not None else "-"
        fields = [x for pair in encode(entry).items() for x in pair]
        args: list[Any] = [
            lease_value,
            entry.digest,
            _seconds(entry.root),
            latest,
            int(marks_ttl_s * 1000),
            self.maxlen,
            *fields,
        ]
        keys = [
            self.keys.lease,
            self.keys.stream,
            self.keys.inflight,
            self.keys.seen(entry.trace_id),
        ]
        try:
            found = self._publish(keys=keys, args=args)
        except redis.ResponseError as error:
            if "FENCED" in str(error):
                raise LeaseLost("the reader's lease is held by another member") from None
            raise
        published = text(found)
        return published or None

    def set_watermark(self, lease_value: str, moment: datetime) -> None:
        try:
            self._set_watermark(
                keys=[self.keys.lease, self.keys.watermark],
                args=[lease_value, int(moment.timestamp() * 1000)],
            )
        except redis.ResponseError as error:
            if "FENCED" in str(error):
                raise LeaseLost("the reader's lease is held by another member") from None
            raise

    def watermark(self) -> datetime | None:
        raw = self.client.get(self.keys.watermark)
        return None if raw is None else _moment(int(text(raw)) / 1000)

    def unacked(self) -> int:
        """Entries published and not yet acknowledged (delivered or not)."""
        return cast(int, self.client.zcard(self.keys.inflight))

    def oldest_unacked(self) -> datetime | None:
        """The earliest root among the entries not yet acknowledged."""
        found = cast(
            list[tuple[bytes, float]],
            self.client.zrange(self.keys.inflight, 0, 0, withscores=True),
        )
        return _moment(found[0][1]) if found else None

    def trace_marks(self, trace_ids: Sequence[str]) -> dict[str, tuple[datetime, datetime | None]]:
        """(earliest root, latest start) of each trace published before, as the state
        file's `trace_marks` says them for one daemon."""
        if not trace_ids:
            return {}
        raws = cast(list[bytes | None], self.client.mget([self.keys.seen(t) for t in trace_ids]))
        marks: dict[str, tuple[datetime, datetime | None]] = {}
        for trace_id, raw in zip(trace_ids, raws, strict=True):
            if raw is None:
                continue
            _digest, root, latest = text(raw).split(" ")
            marks[trace_id] = (
                _moment(float(root)),
                None if latest == "-" else _moment(float(latest)),
            )
        return marks

    # -- every member's side --------------------------------------------------

    def read(
        self, member: str, count: int, *, block_ms: int | None, own: bool = False
    ) -> list[Message]:
        """Entries for `member`: its own pending ones (`own`: after a restart, or deferred),
        else new ones, waiting up to `block_ms` for one."""
        answer = self.client.xreadgroup(
            GROUP,
            member,
            {self.keys.stream: "0" if own else ">"},
            count=count,
            block=block_ms if block_ms and not own else None,  # BLOCK 0 would wait for ever
        )
        messages: list[Message] = []
        for _stream, entries in cast(
            list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes] | None]]]], answer or []
        ):
            for entry_id, fields in entries:
                if fields:  # trimmed away while pending: nothing to read, acked below
                    messages.append((text(entry_id), fields))
                else:
                    self.ack([text(entry_id)])
        return messages

    def claim(self, member: str, idle_ms: int, count: int) -> list[Message]:
        """Entries pending longer than `idle_ms` on any member (a dead one), now `member`'s."""
        answer = cast(
            list[Any],
            self.client.xautoclaim(self.keys.stream, GROUP, member, idle_ms, "0-0", count=count),
        )
        claimed = cast(list[tuple[bytes, dict[bytes, bytes] | None]], answer[1])
        deleted = [text(i) for i in answer[2]] if len(answer) > 2 else []
        if deleted:  # trimmed while pending: they cannot be scored, only forgotten
            self.client.zrem(self.keys.inflight, *deleted)
        return [(text(i), f) for i, f in claimed if f]

    def ack(self, entry_ids: Sequence[str]) -> None:
        """Acknowledge entries whose traces are in an outbox: out of `inflight` with them."""
        if not entry_ids:
            return
        with self.client.pipeline(transaction=True) as pipe:
            pipe.xack(self.keys.stream, GROUP, *entry_ids)
            pipe.zrem(self.keys.inflight, *entry_ids)
            pipe.execute()

    def pending(self) -> Pending:
        summary = cast(dict[str, Any], self.client.xpending(self.keys.stream, GROUP))
        consumers = {text(c["name"]): int(c["pending"]) for c in summary.get("consumers") or []}
        return Pending(int(summary.get("pending") or 0), consumers)

    def length(self) -> int:
        return cast(int, self.client.xlen(self.keys.stream))
