"""The assembly of received spans (observer.otlp.assembly): when a trace is settled, what a
late span does, and how memory stays bounded. Pure: `now` is a number the test moves."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from observer.otlp.assembly import Assembly, Limits, SpanIn

SETTLE = 2.0


def span(trace: str, span_id: str, *, root: bool = False, size: int = 100) -> SpanIn:
    observation: dict[str, Any] = {"traceId": trace, "id": span_id, "isRootObservation": root}
    return SpanIn(trace, span_id, observation, size, root)


def ids(handed: list[Any]) -> list[str]:
    return [h.trace_id for h in handed]


def test_a_trace_is_due_once_its_root_is_in_and_it_was_quiet_for_the_settle_time() -> None:
    assembly = Assembly(Limits(settle_s=SETTLE))
    assembly.add([span("t1", "a")], now=0.0)
    assert assembly.due(now=10.0) == []  # quiet, but no root yet: not settled
    assembly.add([span("t1", "root", root=True)], now=10.0)
    assert assembly.due(now=11.9) == []  # root in, a span arrived 1.9 s ago
    assert assembly.next_due_in(now=11.0) == SETTLE - 1.0
    (handed,) = assembly.due(now=12.0)
    assert handed.reason == "settled" and not handed.again
    assert sorted(o["id"] for o in handed.observations) == ["a", "root"]
    assert assembly.due(now=100.0) == []  # handed once


def test_spans_out_of_order_make_one_trace_and_the_quiet_time_starts_at_the_last() -> None:
    assembly = Assembly(Limits(settle_s=SETTLE))
    assembly.add([span("t1", "root", root=True), span("t2", "x")], now=0.0)
    assembly.add([span("t1", "child")], now=1.5)  # the child after its root
    assert assembly.due(now=2.0) == []
    (handed,) = assembly.due(now=3.5)
    assert len(handed.observations) == 2


def test_a_span_sent_twice_is_kept_once() -> None:
    """An exporter that timed out sends the same batch again (OTLP: duplicate data)."""
    assembly = Assembly(Limits(settle_s=SETTLE))
    batch = [span("t1", "root", root=True), span("t1", "a")]
    first = assembly.add(batch, now=0.0)
    again = assembly.add(batch, now=0.5)
    assert (first.new_spans, again.new_spans) == (2, 0)
    assert assembly.size == 200
    (handed,) = assembly.due(now=5.0)
    assert len(handed.observations) == 2


def test_a_late_span_hands_the_whole_trace_out_again() -> None:
    assembly = Assembly(Limits(settle_s=SETTLE, keep_s=30.0))
    assembly.add([span("t1", "root", root=True), span("t1", "a")], now=0.0)
    assert ids(assembly.due(now=2.0)) == ["t1"]
    assembly.add([span("t1", "late")], now=10.0)
    assert assembly.due(now=11.0) == []
    (again,) = assembly.due(now=12.0)
    assert again.again and len(again.observations) == 3


def test_a_kept_trace_is_forgotten_after_keep_s() -> None:
    assembly = Assembly(Limits(settle_s=SETTLE, keep_s=30.0))
    assembly.add([span("t1", "root", root=True)], now=0.0)
    assembly.due(now=2.0)
    assert assembly.expire(now=29.0) == [] and "t1" in assembly
    assert assembly.expire(now=30.0) == [] and "t1" not in assembly  # scored: no drop
    assert assembly.size == 0


def test_a_trace_whose_root_never_comes_is_dropped_with_its_reason() -> None:
    assembly = Assembly(Limits(settle_s=SETTLE, keep_s=30.0))
    assembly.add([span("t1", "a"), span("t1", "b")], now=0.0)
    assert assembly.expire(now=31.0) == []
    (dropped,) = assembly.expire(now=32.0)
    assert (dropped.trace_id, dropped.reason, dropped.spans) == ("t1", "no_root", 2)


def test_past_max_traces_the_oldest_waiting_settle_early_and_the_batch_is_taken() -> None:
    assembly = Assembly(Limits(settle_s=SETTLE, max_traces=10))
    for n in range(10):
        assembly.add([span(f"t{n}", "root", root=True)], now=float(n) / 100)
    admission = assembly.add([span("new", "root", root=True)], now=0.2)
    assert admission.early == {"max_traces": 1}
    assert not admission.taken  # everything held is waiting: room comes once it is scored
    handed = assembly.due(now=0.2)  # before the settle time: the early one only
    assert [(h.trace_id, h.reason) for h in handed] == [("t0", "max_traces")]
    taken = assembly.add([span("new", "root", root=True)], now=0.3)
    assert taken.taken and taken.forgotten == 1  # the scored t0 made room


def test_past_max_bytes_a_batch_is_refused_whole_with_a_retry_after() -> None:
    assembly = Assembly(Limits(settle_s=SETTLE, max_bytes=1_000))
    assembly.add([span("t1", "root", root=True, size=600)], now=0.0)
    refused = assembly.add([span("t2", "root", root=True, size=600)], now=0.1)
    assert not refused.taken and refused.retry_after_s >= 1.0
    assert refused.early == {"max_bytes": 1}
    assert "t2" not in assembly and assembly.size == 600  # nothing of it kept
    (early,) = assembly.due(now=0.1)
    assert early.reason == "max_bytes"
    assert assembly.add([span("t2", "root", root=True, size=600)], now=0.2).taken


def test_kept_traces_are_forgotten_before_anything_is_refused() -> None:
    assembly = Assembly(Limits(settle_s=SETTLE, keep_s=300.0, max_bytes=1_000))
    assembly.add([span("old", "root", root=True, size=600)], now=0.0)
    assembly.due(now=2.0)
    admission = assembly.add([span("new", "root", root=True, size=600)], now=3.0)
    assert admission.taken and admission.forgotten == 1 and admission.early == {}
    assert "old" not in assembly


def test_a_trace_put_back_is_due_again() -> None:
    """No room in the outbox: the trace waits in memory and is handed out again."""
    assembly = Assembly(Limits(settle_s=SETTLE))
    assembly.add([span("t1", "root", root=True)], now=0.0)
    (handed,) = assembly.due(now=2.0)
    assembly.put_back(handed)
    (again,) = assembly.due(now=2.1)
    assert not again.again


@settings(max_examples=60, deadline=None)
@given(
    st.permutations(
        [("t1", "root", True), ("t1", "a", False), ("t1", "b", False), ("t2", "r", True)]
    ),
    st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=4),
)
def test_whatever_the_order_and_batching_every_span_is_handed_out_once(
    order: list[tuple[str, str, bool]], cuts: list[int]
) -> None:
    assembly = Assembly(Limits(settle_s=SETTLE))
    now, position = 0.0, 0
    batches: list[list[tuple[str, str, bool]]] = []
    for cut in cuts:
        batches.append(order[position : position + cut])
        position += cut
    batches.append(order[position:])
    for batch in batches:
        assembly.add([span(t, s, root=r) for t, s, r in batch], now)
        now += 0.5
    handed = assembly.due(now + SETTLE)
    got = sorted((h.trace_id, o["id"]) for h in handed for o in h.observations)
    assert got == sorted((t, s) for t, s, _ in order)


# -- the early settle of a whole tree (root in, every parent in: `root_grace_s`) -----------

GRACE = 0.25


def node(trace: str, span_id: str, parent: str | None, *, root: bool = False) -> SpanIn:
    observation: dict[str, Any] = {"traceId": trace, "id": span_id, "isRootObservation": root}
    return SpanIn(trace, span_id, observation, 100, root, parent)


@pytest.mark.parametrize(
    ("batches", "quiet_s", "reason"),
    [
        # the root alone: whole
        ([[node("t", "r", None, root=True)]], GRACE, "whole"),
        # an SDK's export: children end first, the root last, every parent in
        ([[node("t", "a", "r"), node("t", "b", "a"), node("t", "r", None, root=True)]],
         GRACE, "whole"),
        # the children in one request, their root in the next
        ([[node("t", "a", "r")], [node("t", "r", None, root=True)]], GRACE, "whole"),
        # an app root under a remote parent (another service's span) is a root
        ([[node("t", "a", "app"), node("t", "app", "remote", root=True)]], GRACE, "whole"),
        # a span whose parent has not arrived: more is on its way
        ([[node("t", "b", "a"), node("t", "r", None, root=True)]], SETTLE, "settled"),
        # a span that names no parent and is no root: not known whole
        ([[node("t", "a", None), node("t", "r", None, root=True)]], SETTLE, "settled"),
        # the missing parent arrives: whole again, the grace counted from its arrival
        ([[node("t", "b", "a"), node("t", "r", None, root=True)], [node("t", "a", "r")]],
         GRACE, "whole"),
    ],
)  # fmt: skip
def test_a_rooted_trace_waits_the_grace_when_whole_and_the_settle_time_otherwise(
    batches: list[list[SpanIn]], quiet_s: float, reason: str
) -> None:
    assembly = Assembly(Limits(settle_s=SETTLE, root_grace_s=GRACE))
    now = 0.0
    for batch in batches:
        assembly.add(batch, now)
        now += 0.5  # the last batch at now - 0.5
    last = now - 0.5
    assert assembly.next_due_in(last) == quiet_s
    assert assembly.due(last + quiet_s - 0.125) == []
    (handed,) = assembly.due(last + quiet_s)
    assert handed.reason == reason
    assert len(handed.observations) == sum(len(b) for b in batches)


def test_a_late_span_of_a_whole_trace_hands_it_out_again_after_the_grace() -> None:
    assembly = Assembly(Limits(settle_s=SETTLE, root_grace_s=GRACE))
    assembly.add([node("t", "a", "r"), node("t", "r", None, root=True)], now=0.0)
    (first,) = assembly.due(GRACE)
    assembly.add([node("t", "late", "a")], now=5.0)  # under a span it holds: whole
    assert assembly.due(5.0 + GRACE - 0.125) == []
    (again,) = assembly.due(5.0 + GRACE)
    assert (first.again, again.again, again.reason) == (False, True, "whole")
    assert len(again.observations) == 3


def test_the_grace_is_never_longer_than_the_settle_time() -> None:
    assembly = Assembly(Limits(settle_s=1.0, root_grace_s=5.0))
    assembly.add([node("t", "r", None, root=True)], now=0.0)
    assert [h.reason for h in assembly.due(1.0)] == ["whole"]


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_a_trace_is_handed_out_when_whole_after_the_grace_else_after_the_settle_time(
    data: st.DataObject,
) -> None:
    """Any tree, its spans arriving in any order and batching, with any gaps: after each
    batch the trace is due exactly when a reference says so, computed from scratch (root
    in; whole: every span a root or its parent held; quiet the grace or the settle time)."""
    size = data.draw(st.integers(min_value=1, max_value=7), label="spans")
    parents = [None] + [
        data.draw(st.integers(min_value=0, max_value=i - 1), label=f"parent of {i}")
        for i in range(1, size)
    ]
    spans = [node("t", f"s{i}", None if p is None else f"s{p}", root=p is None)
             for i, p in enumerate(parents)]  # fmt: skip
    order = data.draw(st.permutations(spans), label="order")
    cuts = sorted(data.draw(st.sets(st.integers(1, size - 1)), label="cuts")) if size > 1 else []
    batches = [order[a:b] for a, b in zip([0, *cuts], [*cuts, size], strict=True)]
    assembly = Assembly(Limits(settle_s=SETTLE, root_grace_s=GRACE))
    now, held = 0.0, []
    for batch in batches:
        assembly.add(batch, now)
        held += batch
        gap = data.draw(st.sampled_from([0.125, GRACE, 1.0, SETTLE]), label="gap")
        ids = {s.span_id for s in held}
        rooted = any(s.root for s in held)
        whole = all(s.root or s.parent in ids for s in held)
        expected = rooted and gap >= (GRACE if whole else SETTLE)
        handed = assembly.due(now + gap)
        assert bool(handed) == expected
        if handed:
            assert handed[0].reason == ("whole" if whole else "settled")
            assert {o["id"] for o in handed[0].observations} == ids
        now += gap


# -- the receiver's mark: what lies before the earliest waiting span was handed out -------


def started(trace: str, span_id: str, second: int, *, root: bool = False) -> SpanIn:
    observation: dict[str, Any] = {
        "traceId": trace,
        "id": span_id,
        "isRootObservation": root,
        "startTime": f"2026-12-08T10:00:{second:02d}.000Z",
    }
    return SpanIn(trace, span_id, observation, 100, root)


def test_the_earliest_waiting_start_is_the_oldest_span_of_a_trace_not_handed_out() -> None:
    assembly = Assembly(Limits(settle_s=SETTLE))
    assert assembly.earliest_waiting() is None
    assembly.add([started("t1", "root", 30, root=True), started("t1", "a", 20)], now=0.0)
    assembly.add([started("t2", "b", 10)], now=0.5)  # its root not in yet: it waits
    assert assembly.earliest_waiting() == "2026-12-08T10:00:10.000Z"
    assembly.add([started("t2", "root", 5, root=True)], now=1.0)
    assert assembly.earliest_waiting() == "2026-12-08T10:00:05.000Z"
    assert ids(assembly.due(now=2.5)) == ["t1"]  # t2's child came after its root: settles
    assert assembly.earliest_waiting() == "2026-12-08T10:00:05.000Z"
    assert ids(assembly.due(now=3.0)) == ["t2"]
    assert assembly.earliest_waiting() is None  # both handed out; kept for late spans
    assembly.add([started("t1", "late", 40)], now=4.0)  # t1 waits again, whole
    assert assembly.earliest_waiting() == "2026-12-08T10:00:20.000Z"


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["t1", "t2", "t3"]),
            st.sampled_from(["root", "a", "b"]),
            st.integers(min_value=0, max_value=59),
            st.booleans(),  # take what is due after this span
        ),
        max_size=20,
    )
)
def test_no_trace_starting_before_the_earliest_waiting_span_is_left_unhanded(
    arrivals: list[tuple[str, str, int, bool]],
) -> None:
    """The receiver's mark rests on this: every trace with a span before the earliest
    waiting start has all its spans handed out, whatever came in which order."""
    assembly = Assembly(Limits(settle_s=SETTLE, keep_s=1000.0))
    unhanded: dict[str, set[str]] = {}
    starts: dict[str, int] = {}
    now = 0.0
    for trace, span_id, second, take in arrivals:
        taken = assembly.add([started(trace, span_id, second, root=span_id == "root")], now)
        if taken.new_spans:
            unhanded.setdefault(trace, set()).add(span_id)
            starts[trace] = min(starts.get(trace, 60), second)
        now += 0.5
        if take:
            now += SETTLE
            for handed in assembly.due(now):
                unhanded.pop(handed.trace_id, None)
        earliest = assembly.earliest_waiting()
        for trace_id, spans in unhanded.items():
            assert spans and earliest is not None
            assert earliest <= f"2026-12-08T10:00:{starts[trace_id]:02d}.000Z"
