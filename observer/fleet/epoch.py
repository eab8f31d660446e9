"""The fleet's epoch as one member knows it, and the guard that keeps it from acting in another.

Redis that lost its data (a restart without persistence, a failover) has no epoch key,
then a new one (observer.fleet.member). A member may go on for a while without
noticing: a keeper round whose call redis-py retried across the restart, a worker in
the middle of a batch read before it. Acting in the new epoch before it has given back
what it remembers (its judge spend and claims) would let the fleet pass the judge's cap
and judge an answer twice. So the scripts that let a member act there (taking the
reader's lease, claiming an answer for the judge) carry the epoch the member knows and
refuse when Redis holds another or none: an `EPOCH` error, which the member handles as
the data loss it is (`observer.fleet.stream.lost`).

`KnownEpoch.value` is the epoch this member has given its memory to (set by the
member); a thread may pin the epoch its work in hand was read in (the worker, for a
batch), so a batch read before the loss is never claimed in the epoch after it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

REFUSED = "EPOCH"  # the error a guarded script answers with


def in_epoch(script_body: str, key: int, arg: int) -> str:
    """A script run only while KEYS[key] (the epoch) holds ARGV[arg], the caller's epoch;
    gone or another is refused with an `EPOCH` error."""
    return (
        f"if redis.call('GET', KEYS[{key}]) ~= ARGV[{arg}] then\n"
        f"  return redis.error_reply('{REFUSED} the fleet is in an epoch this member has "
        "not noticed yet (Redis lost its data)')\n"
        "end\n" + script_body
    )


class KnownEpoch:
    """The epoch this member acts in; None before it has seen one."""

    def __init__(self, value: str | None = None) -> None:
        self.value = value
        self._local = threading.local()

    def acting(self) -> str:
        """The epoch this thread acts in: the one it pinned, else the member's ("" for
        none, which no epoch in Redis equals)."""
        pinned: tuple[str | None] | None = getattr(self._local, "pinned", None)
        epoch = pinned[0] if pinned is not None else self.value
        return epoch or ""

    @contextmanager
    def pinned(self, epoch: str | None) -> Iterator[None]:
        """While the block runs, this thread acts in `epoch` (what its work was read in)."""
        self._local.pinned = (epoch,)
        try:
            yield
        finally:
            del self._local.pinned
