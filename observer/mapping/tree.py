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
from typing import Any

from observer.times import parse_time

Observation = Mapping[str, Any]
_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def start_of(observation: Observation) -> datetime:
    return parse_time(observation.get("startTime")) or _EARLIEST


def sibling_key(observation: Observation) -> tuple[datetime, datetime, str, str, str]:
    """Start, end (an open observation last), then id; name and type for rows without an
    id (replays), so equal rows stay equal."""
    return (
        start_of(observation),
        parse_time(observation.get("endTime")) or _LATEST,
        _text(observation.get("id")),
        _text(observation.get("name")),
        _text(observation.get("type")),
    )


def tree_order(observations: Sequence[Observation]) -> list[Observation]:
    """Every observation once, parents before children, siblings by `sibling_key`.

    Iterative (a trace may nest thousands deep); a parent cycle, which no real trace
    has, cannot loop: each observation is placed once, and what a cycle leaves unplaced
    follows in sibling order."""
    ids = {o.get("id") for o in observations if isinstance(o.get("id"), str)}
    children: dict[str, list[Observation]] = {}
    tops: list[Observation] = []
    for observation in observations:
        parent = observation.get("parentObservationId")
        if isinstance(parent, str) and parent in ids and parent != observation.get("id"):
            children.setdefault(parent, []).append(observation)
        else:
            tops.append(observation)
    ordered: list[Observation] = []
    placed: set[int] = set()
    stack = sorted(tops, key=sibling_key, reverse=True)
    while stack:
        observation = stack.pop()
        if id(observation) in placed:
            continue
        placed.add(id(observation))
        ordered.append(observation)
        own = observation.get("id")
        if isinstance(own, str):
            stack.extend(sorted(children.get(own, ()), key=sibling_key, reverse=True))
    if len(ordered) < len(observations):
        ordered.extend(sorted((o for o in observations if id(o) not in placed), key=sibling_key))
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
