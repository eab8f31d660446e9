"""The assembly of received spans (observer.otlp.assembly): when a trace is settled, what a
late span does, and how memory stays bounded. Pure: `now` is a number the test moves."""

from __future__ import annotations

from typing import Any

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
