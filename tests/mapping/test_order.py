"""A trace's record does not depend on the order of its observations.

Order is the tree, not the clock (docs/trace-convention.md#checked-by-content).

The API returns rows in no order a reader may rely on, and a wrapper and the call it wraps
often start in the same millisecond. Every capture of a real library, shuffled, and with
every start time of a trace collapsed to one millisecond, gives the record it gives as
captured, byte for byte (hypothesis draws the permutations).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from observer.mapping.convention import read_trace
from observer.mapping.rules import MappingRules
from observer.mapping.tree import tree_order

FIXTURES = Path(__file__).resolve().parents[1] / "instrumentations" / "fixtures"


@cache
def traces() -> list[list[dict[str, Any]]]:
    found: list[list[dict[str, Any]]] = []
    for path in sorted(FIXTURES.glob("*.observations.json")):
        by_trace: dict[str, list[dict[str, Any]]] = {}
        for observation in json.loads(path.read_text()):
            by_trace.setdefault(observation["traceId"], []).append(observation)
        found += list(by_trace.values())
    return found


def reading(observations: list[dict[str, Any]]) -> bytes:
    read = read_trace("t", observations, MappingRules())
    return orjson.dumps({"result": read.result, "provenance": read.provenance})


@cache
def as_captured(index: int) -> bytes:
    return reading(traces()[index])


def tied(observations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every start of the trace in one millisecond: only the tree and the ends tell."""
    first = min(o["startTime"] for o in observations)
    return [{**o, "startTime": first} for o in observations]


def test_there_are_captures_with_several_observations() -> None:
    assert len(traces()) >= 39 and all(len(t) >= 2 for t in traces())


@given(st.data())
def test_any_shuffle_of_a_trace_gives_the_same_record(data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(traces()) - 1))
    shuffled = data.draw(st.permutations(traces()[index]))
    assert reading(list(shuffled)) == as_captured(index)


@given(st.data())
def test_start_times_tied_read_the_same_in_any_order(data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(traces()) - 1))
    observations = tied(traces()[index])
    shuffled = data.draw(st.permutations(observations))
    assert reading(list(shuffled)) == reading(observations)


def test_parents_come_before_children_and_siblings_by_start_then_end_then_id() -> None:
    at = "2026-12-01T10:00:00.000Z"
    later = "2026-12-01T10:00:00.005Z"
    rows = [
        {"id": "c2", "parentObservationId": "p", "startTime": at, "endTime": later},
        {"id": "c1", "parentObservationId": "p", "startTime": at, "endTime": later},
        {"id": "c0", "parentObservationId": "p", "startTime": at, "endTime": at},
        {"id": "g", "parentObservationId": "c2", "startTime": at},
        {"id": "p", "startTime": later},  # the parent starts after its children (clock skew)
        {"id": "orphan", "parentObservationId": "not-ingested", "startTime": at},
    ]
    assert [o["id"] for o in tree_order(rows)] == ["orphan", "p", "c0", "c1", "c2", "g"]


def test_a_parent_cycle_cannot_loop() -> None:
    rows = [
        {"id": "a", "parentObservationId": "b", "startTime": "2026-12-01T10:00:00Z"},
        {"id": "b", "parentObservationId": "a", "startTime": "2026-12-01T10:00:01Z"},
    ]
    assert [o["id"] for o in tree_order(rows)] == ["a", "b"]
