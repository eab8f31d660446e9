"""The order of a trace's observations: the tree, not the clock (docs/trace-convention.md).

Start times have millisecond precision, and a wrapper and the call it wraps often share
one; the Observations API returns rows in no order a reader may rely on. So "before" and
"last" are read in the observation tree: parents before their children (depth first),
siblings by start time, then end time, then id, a key that does not depend on the order
the rows came in. An observation whose parent is not in the trace (not ingested yet, or
a second root) is ordered among the roots. The same trace, shuffled, orders the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from observer.times import parse_time

Observation = Mapping[str, Any]
_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


# One trace's rows share their times: each text parsed once while recent.
_time = lru_cache(maxsize=4096)(parse_time)


def sibling_key(observation: Observation) -> tuple[datetime, datetime, str, str, str]:
    """Start, end (an open observation last), then id; name and type for rows without an
    id (replays), so equal rows stay equal."""
    get = observation.get
    start, end, own, name, kind = (
        get("startTime"),
        get("endTime"),
        get("id"),
        get("name"),
        get("type"),
    )
    return (
        (_time(start) if isinstance(start, str) else parse_time(start)) or _EARLIEST,
        (_time(end) if isinstance(end, str) else parse_time(end)) or _LATEST,
        own if isinstance(own, str) else "",
        name if isinstance(name, str) else "",
        kind if isinstance(kind, str) else "",
    )


def tree_order(observations: Sequence[Observation]) -> list[Observation]:
    """Every observation once, parents before children, siblings by `sibling_key`.

    Iterative (a trace may nest thousands deep); a parent cycle, which no real trace
    has, cannot loop: each observation is placed once, and what a cycle leaves unplaced
    follows in sibling order."""
    keys = list(map(sibling_key, observations))
    ids = {o.get("id") for o in observations if isinstance(o.get("id"), str)}
    # One stable sort, latest first: each parent's children, and the tops, come out of it
    # in the order a stable sort of their own would give (popped from the end: earliest).
    latest_first = sorted(range(len(observations)), key=keys.__getitem__, reverse=True)
    children: dict[str, list[Observation]] = {}
    stack: list[Observation] = []
    for at in latest_first:
        observation = observations[at]
        parent = observation.get("parentObservationId")
        if isinstance(parent, str) and parent in ids and parent != observation.get("id"):
            children.setdefault(parent, []).append(observation)
        else:
            stack.append(observation)
    ordered: list[Observation] = []
    placed: set[int] = set()
    while stack:
        observation = stack.pop()
        if id(observation) in placed:
            continue
        placed.add(id(observation))
        ordered.append(observation)
        own = observation.get("id")
        if isinstance(own, str) and own in children:
            stack.extend(children[own])
    if len(ordered) < len(observations):
        left = [at for at in range(len(observations)) if id(observations[at]) not in placed]
        ordered.extend(observations[at] for at in sorted(left, key=keys.__getitem__))
    return ordered


def ancestors(observation: Observation, observations: Sequence[Observation]) -> set[str]:
    """The ids of the observations `observation` is nested in."""
    parents = {
        o.get("id"): o.get("parentObservationId")
        for o in observations
        if isinstance(o.get("id"), str)
    }
    found: set[str] = set()
    parent = observation.get("parentObservationId")
    while isinstance(parent, str) and parent not in found:
        found.add(parent)
        parent = parents.get(parent)
    return found
