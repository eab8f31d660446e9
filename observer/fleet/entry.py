"""A complete trace as a stream entry, and back (pure).

An entry holds what the reader read of one trace: its observations (none when
there were more than `limits.max_observations_per_trace`: then `too_large`
holds how many), its earliest root (the scores' timestamp,
docs/scores.md#ids-and-timestamps), the Langfuse "now" of the pass that read it
(settled by then), and the latest start it showed (kept with the trace by the
worker that scores it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from observer.times import iso, parse_time


class BadEntry(ValueError):
    """An entry that is not one observer wrote: acknowledged and logged, never retried."""


@dataclass(frozen=True, slots=True)
class Entry:
    trace_id: str
    observations: list[dict[str, Any]]
    root: datetime
    now: datetime
    latest: datetime | None = None
    too_large: int | None = None

    @property
    def digest(self) -> str:
        """What the worker would score: the same digest, nothing new to publish."""
        return observations_digest(self.observations, self.too_large)


def observations_digest(observations: list[dict[str, Any]], too_large: int | None) -> str:
    described = orjson.dumps([observations, too_large], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(described).hexdigest()[:24]


def encode(entry: Entry) -> dict[str, bytes]:
    """The entry's fields for XADD: the trace id apart, for `XRANGE` readers."""
    body = {
        "observations": entry.observations,
        "root": iso(entry.root),
        "now": iso(entry.now),
        "latest": iso(entry.latest) if entry.latest is not None else None,
        "too_large": entry.too_large,
    }
    return {"trace": entry.trace_id.encode(), "body": orjson.dumps(body)}


def decode(fields: dict[bytes, bytes]) -> Entry:
    """An entry from its XREADGROUP fields; BadEntry when it is not one."""
    try:
        trace_id = fields[b"trace"].decode()
        body = orjson.loads(fields[b"body"])
        root = parse_time(body["root"])
        now = parse_time(body["now"])
        latest = parse_time(body["latest"]) if body.get("latest") else None
        observations = body["observations"]
        too_large = body.get("too_large")
    except (KeyError, TypeError, UnicodeDecodeError, orjson.JSONDecodeError) as error:
        raise BadEntry(f"not a trace entry: {type(error).__name__}") from None
    if root is None or now is None or not isinstance(observations, list):
        raise BadEntry("not a trace entry: no root, now or observations")
    if too_large is not None and not isinstance(too_large, int):
        raise BadEntry("not a trace entry: too_large is not a count")
    return Entry(trace_id, observations, root, now, latest, too_large)
