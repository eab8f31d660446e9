"""The trace stream, its consumer group, and what the reader keeps beside it.

    <name>:traces     the stream: one entry per complete trace, until acknowledged
    group "workers"   every member a consumer (XREADGROUP, XACK, XAUTOCLAIM)
    <name>:inflight   published entries not yet acknowledged, by their root (ZSET)
    <name>:watermark  where the next pass starts (the reader's, fenced)
    <name>:seen:<id>  what was last published of a trace (digest, root, latest)
    <name>:dead       entries that failed `fleet.max_deliveries` times

`publish` is one fenced script per trace, sent in pipelined batches: the lease
is compared, an unchanged trace (the same digest as last published) is left
out, and otherwise XADD, the entry's root into `inflight` and the trace's marks
happen together, or not at all. `ack` acknowledges, deletes the entries and
takes them out of `inflight` in one MULTI, so the stream holds only what is
pending or not yet read, and the oldest root still in `inflight` is the oldest
trace whose scores are not yet delivered: the watermark never passes it.
`bury` moves an entry to the dead stream the same way, so the watermark never
waits on it; `replay` puts it back (the entry and its root in one MULTI).

A root in `inflight` whose entry is no longer in the stream belongs to no work:
its entry was acknowledged, buried or deleted, and a writer that adds the entry
and its root in two steps (a foreign one, or one that died between them) added
the root after. Nothing would ever take it out, and it would hold the watermark
and count as unacknowledged for ever; so whoever asks for the oldest root or the
count (`unacked`, `oldest_unacked`) first drops such roots from the front, in one
script (every writer adds the entry before or with its root, so a root whose
entry is missing is never one still to come).

Redis that lost its data answers `NOGROUP` to the group's commands, and the
epoch-guarded scripts answer `EPOCH` to a member that has not noticed
(observer.fleet.epoch): `lost` tells those answers from any other (the member
recreates the group and gives its memory back, observer.fleet.member).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import redis

from observer.fleet.connect import LeaseLost, text
from observer.fleet.entry import BadEntry, Entry, decode, encode
from observer.fleet.epoch import REFUSED
from observer.fleet.keys import GROUP, Keys
from observer.fleet.lease import fenced

# KEYS lease, stream, inflight, seen; ARGV value, digest, root s, latest s, ttl ms,
# then the entry's field/value pairs -> the entry id, or "" when unchanged.
PUBLISH = fenced("""
local marks = ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4]
local old = redis.call('GET', KEYS[4])
if old and string.sub(old, 1, string.len(ARGV[2]) + 1) == ARGV[2] .. ' ' then
  redis.call('SET', KEYS[4], marks, 'PX', ARGV[5])
  return ''
end
local args = {'XADD', KEYS[2], '*'}
for i = 6, #ARGV do args[#args + 1] = ARGV[i] end
local id = redis.call(unpack(args))
redis.call('ZADD', KEYS[3], ARGV[3], id)
redis.call('SET', KEYS[4], marks, 'PX', ARGV[5])
return id
""")
# KEYS lease, watermark; ARGV value, watermark (epoch ms)
SET_WATERMARK = fenced("return redis.call('SET', KEYS[2], ARGV[2])")

# KEYS stream, inflight; ARGV how many roots to look at, at most -> {entries in inflight,
# the oldest one's root (false: none)}: the roots at the front whose entry is gone dropped.
INFLIGHT = """
local head = {}
for _ = 1, tonumber(ARGV[1]) do
  head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if #head == 0 or #redis.call('XRANGE', KEYS[1], head[1], head[1]) > 0 then break end
  redis.call('ZREM', KEYS[2], head[1])
  head = {}
end
if #head == 0 then head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES') end
return {redis.call('ZCARD', KEYS[2]), head[2] or false}
"""
# Roots looked at in one call: a longer run of dropped ones goes on at the next call.
INFLIGHT_LOOK = 100
# KEYS stream, inflight, dead; ARGV dead id, root s, then the entry's field/value pairs
# -> the new entry's id: the entry and its root added together, out of the dead stream.
REPLAY = """
local args = {'XADD', KEYS[1], '*'}
for i = 3, #ARGV do args[#args + 1] = ARGV[i] end
local id = redis.call(unpack(args))
redis.call('ZADD', KEYS[2], ARGV[2], id)
redis.call('XDEL', KEYS[3], ARGV[1])
return id
"""

Message = tuple[str, dict[bytes, bytes]]

# The dead stream keeps about this many entries: enough to read and replay, bounded.
DEAD_KEPT = 10_000


@dataclass(frozen=True, slots=True)
class PendingEntries:
    """The group's pending entries: delivered, not acknowledged; per consumer."""

    count: int
    consumers: dict[str, int]


@dataclass(frozen=True, slots=True)
class Dead:
    """An entry in the dead stream: the trace, why, and how often it was delivered."""

    dead_id: str
    trace_id: str
    reason: str
    deliveries: int
    member: str
    fields: dict[bytes, bytes]


def lost(error: redis.ResponseError) -> bool:
    """Whether Redis answered that the stream or its group is gone, or refused to act in
    an epoch this member has not noticed (observer.fleet.epoch): it lost its data."""
    return str(error).startswith(("NOGROUP", REFUSED))


def _seconds(moment: datetime) -> str:
    return f"{moment.timestamp():.3f}"


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _fenced(error: redis.ResponseError) -> None:
    if "FENCED" in str(error):
        raise LeaseLost("the reader's lease is held by another member") from None
    raise error


class TraceStream:
    def __init__(self, client: redis.Redis, keys: Keys, *, maxlen: int) -> None:
        self.client = client
        self.keys = keys
        self.maxlen = maxlen
        self._publish = client.register_script(PUBLISH)
        self._set_watermark = client.register_script(SET_WATERMARK)
        self._inflight = client.register_script(INFLIGHT)
        self._replay = client.register_script(REPLAY)

    @property
    def pending_bound(self) -> int:
        """Unacknowledged entries past which the reader stops publishing."""
        return max(1, self.maxlen // 2)

    def ensure_group(self) -> bool:
        """The stream and its group, created once for the fleet (MKSTREAM); whether this
        call created them."""
        try:
            self.client.xgroup_create(self.keys.stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise
            return False
        return True

    # -- the reader's side (fenced) ------------------------------------------

    def publish(self, lease_value: str, entry: Entry, marks_ttl_s: float) -> str | None:
        """Publish one complete trace; its entry id, or None when unchanged since the
        last time it was published. LeaseLost when the lease is no longer `lease_value`."""
        return self.publish_many(lease_value, [entry], marks_ttl_s)[0]

    def publish_many(
        self, lease_value: str, entries: Sequence[Entry], marks_ttl_s: float
    ) -> list[str | None]:
        """Publish complete traces in one round trip (a pipeline of the fenced script);
        each one's entry id, or None when unchanged. LeaseLost when the lease is no longer
        `lease_value` (the entries before the fence stand: each is whole on its own)."""
        if not entries:
            return []
        with self.client.pipeline(transaction=False) as pipe:
            for entry in entries:
                self._publish(
                    keys=[
                        self.keys.lease,
                        self.keys.stream,
                        self.keys.inflight,
                        self.keys.seen(entry.trace_id),
                    ],
                    args=self._publish_args(lease_value, entry, marks_ttl_s),
                    client=pipe,
                )
            answers = pipe.execute(raise_on_error=False)
        found: list[str | None] = []
        for answer in answers:
            if isinstance(answer, redis.ResponseError):
                _fenced(answer)
            published = text(answer)
            found.append(published or None)
        return found

    @staticmethod
    def _publish_args(lease_value: str, entry: Entry, marks_ttl_s: float) -> list[Any]:
        latest = _seconds(entry.latest) if entry.latest is not None else "-"
        fields = [x for pair in encode(entry).items() for x in pair]
        return [
            lease_value,
            entry.digest,
            _seconds(entry.root),
            latest,
            int(marks_ttl_s * 1000),
            *fields,
        ]

    def set_watermark(self, lease_value: str, moment: datetime) -> None:
        try:
            self._set_watermark(
                keys=[self.keys.lease, self.keys.watermark],
                args=[lease_value, int(moment.timestamp() * 1000)],
            )
        except redis.ResponseError as error:
            _fenced(error)

    def watermark(self) -> datetime | None:
        raw = self.client.get(self.keys.watermark)
        return None if raw is None else _moment(int(text(raw)) / 1000)

    def unacked(self) -> int:
        """Entries published and not yet acknowledged (delivered or not)."""
        return self._unacked()[0]

    def oldest_unacked(self) -> datetime | None:
        """The earliest root among the entries not yet acknowledged."""
        return self._unacked()[1]

    def _unacked(self) -> tuple[int, datetime | None]:
        """(how many, the oldest root) in `inflight`, the roots of gone entries dropped."""
        count, oldest = cast(
            list[Any],
            self._inflight(keys=[self.keys.stream, self.keys.inflight], args=[INFLIGHT_LOOK]),
        )
        return int(count), None if oldest is None else _moment(float(oldest))

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
        self, member: str, count: int, *, block_ms: int | None, own: str | None = None
    ) -> list[Message]:
        """Entries for `member`: its own pending ones after the id `own` (after a start:
        "0", then the last one read), else new ones, waiting up to `block_ms` for one."""
        answer = self.client.xreadgroup(
            GROUP,
            member,
            {self.keys.stream: own if own is not None else ">"},
            count=count,
            block=block_ms if block_ms and own is None else None,  # BLOCK 0 waits for ever
        )
        messages: list[Message] = []
        for _stream, entries in cast(
            list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes] | None]]]], answer or []
        ):
            for entry_id, fields in entries:
                if fields:  # deleted while pending (a replay's old copy): acked below
                    messages.append((text(entry_id), fields))
                else:
                    self.ack([text(entry_id)])
        return messages

    def claim(
        self, member: str, idle_ms: int, count: int, cursor: str = "0-0"
    ) -> tuple[list[Message], str]:
        """Entries pending longer than `idle_ms` on any member (a dead one), now `member`'s,
        scanning the pending list from `cursor`; with the cursor to go on from ("0-0": the
        scan went round)."""
        answer = cast(
            list[Any],
            self.client.xautoclaim(self.keys.stream, GROUP, member, idle_ms, cursor, count=count),
        )
        claimed = cast(list[tuple[bytes, dict[bytes, bytes] | None]], answer[1])
        deleted = [text(i) for i in answer[2]] if len(answer) > 2 else []
        if deleted:  # deleted while pending: they cannot be scored, only forgotten
            self.client.zrem(self.keys.inflight, *deleted)
        return [(text(i), f) for i, f in claimed if f], text(answer[0])

    def redeliver(self, member: str, entry_ids: Sequence[str]) -> list[Message]:
        """`member`'s own entries delivered to it again (a retry: each counts a delivery)."""
        if not entry_ids:
            return []
        found = cast(
            list[tuple[bytes, dict[bytes, bytes] | None]],
            self.client.xclaim(self.keys.stream, GROUP, member, 0, list(entry_ids)),
        )
        return [(text(i), f) for i, f in found if f]

    def hold(self, member: str, entry_ids: Sequence[str]) -> None:
        """Keep `member`'s entries from being claimed as a dead member's: their idle time
        reset, without counting a delivery (XCLAIM JUSTID)."""
        if entry_ids:
            self.client.xclaim(self.keys.stream, GROUP, member, 0, list(entry_ids), justid=True)

    def deliveries(self, member: str, entry_ids: Sequence[str]) -> dict[str, int]:
        """How many times each of `member`'s pending entries was delivered (XPENDING)."""
        if not entry_ids:
            return {}
        ordered = sorted(entry_ids, key=_id)
        found = cast(
            list[dict[str, Any]],
            self.client.xpending_range(
                self.keys.stream,
                GROUP,
                min=ordered[0],
                max=ordered[-1],
                count=len(ordered) + 1000,
                consumername=member,
            ),
        )
        wanted = set(entry_ids)
        return {
            text(row["message_id"]): int(row["times_delivered"])
            for row in found
            if text(row["message_id"]) in wanted
        }

    def ack(self, entry_ids: Sequence[str]) -> None:
        """Acknowledge entries whose scores are delivered: deleted and out of `inflight`."""
        if not entry_ids:
            return
        with self.client.pipeline(transaction=True) as pipe:
            pipe.xack(self.keys.stream, GROUP, *entry_ids)
            pipe.xdel(self.keys.stream, *entry_ids)
            pipe.zrem(self.keys.inflight, *entry_ids)
            pipe.execute()

    def bury(self, member: str, message: Message, reason: str, deliveries: int) -> str:
        """Move an entry that cannot be scored to the dead stream, acknowledged, deleted and
        out of `inflight`, in one MULTI; the dead entry's id."""
        entry_id, fields = message
        dead_fields: dict[Any, Any] = {
            **fields,
            b"entry": entry_id,
            b"reason": reason[:500],
            b"deliveries": deliveries,
            b"member": member,
        }
        with self.client.pipeline(transaction=True) as pipe:
            pipe.xadd(self.keys.dead, dead_fields, maxlen=DEAD_KEPT, approximate=True)
            pipe.xack(self.keys.stream, GROUP, entry_id)
            pipe.xdel(self.keys.stream, entry_id)
            pipe.zrem(self.keys.inflight, entry_id)
            answers = pipe.execute()
        return text(answers[0])

    def dead(self, count: int = 100) -> list[Dead]:
        """The dead stream's entries, oldest first."""
        found = cast(
            list[tuple[bytes, dict[bytes, bytes]]],
            self.client.xrange(self.keys.dead, count=count),
        )
        return [
            Dead(
                text(dead_id),
                text(fields.get(b"trace", b"?")),
                text(fields.get(b"reason", b"")),
                int(fields.get(b"deliveries", b"0")),
                text(fields.get(b"member", b"")),
                {k: v for k, v in fields.items() if k in (b"trace", b"body")},
            )
            for dead_id, fields in found
        ]

    def dead_count(self) -> int:
        return cast(int, self.client.xlen(self.keys.dead))

    def replay(self, dead: Sequence[Dead]) -> int:
        """Dead entries back into the stream as new entries (their roots into `inflight`),
        out of the dead stream, each in one script; how many went back."""
        replayed = 0
        for item in dead:
            root = _root_of(item.fields)
            # The entry and its root together: a worker that scores and acknowledges the
            # entry at once takes the root out with it (a root added after would be left).
            self._replay(
                keys=[self.keys.stream, self.keys.inflight, self.keys.dead],
                args=[item.dead_id, root, *(x for pair in item.fields.items() for x in pair)],
            )
            replayed += 1
        return replayed

    def pending(self) -> PendingEntries:
        summary = cast(dict[str, Any], self.client.xpending(self.keys.stream, GROUP))
        consumers = {text(c["name"]): int(c["pending"]) for c in summary.get("consumers") or []}
        return PendingEntries(int(summary.get("pending") or 0), consumers)

    def forget_idle_consumers(self, idle_ms: int) -> list[str]:
        """Consumers with nothing pending, not seen for `idle_ms`, deleted from the group."""
        consumers = cast(list[dict[str, Any]], self.client.xinfo_consumers(self.keys.stream, GROUP))
        gone = [
            text(c["name"])
            for c in consumers
            if int(c.get("pending") or 0) == 0 and int(c.get("idle") or 0) >= idle_ms
        ]
        for name in gone:
            self.client.xgroup_delconsumer(self.keys.stream, GROUP, name)
        return gone

    def length(self) -> int:
        return cast(int, self.client.xlen(self.keys.stream))


def _id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _root_of(fields: dict[bytes, bytes]) -> float:
    """An entry's root (epoch s) from its body; now when it cannot be read (it was dead
    for not decoding: it holds the watermark only until it is buried again)."""
    try:
        return decode(fields).root.timestamp()
    except BadEntry:
        return datetime.now(UTC).timestamp()
