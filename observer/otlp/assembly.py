"""Traces being assembled from received spans, and when each is settled (pure, no I/O).

Spans come in batches and out of order. Each trace collects its observations by span id
(a span sent twice, as an exporter's retry does, is kept once). A trace is **due** when
a root of it is in (an OTel SDK exports a span only once it has ended, so a received
root has ended) and no span of it arrived for a while, on observer's own clock (`now`,
monotonic seconds: the apps' clocks do not decide it):
- `root_grace_s` when its tree is **whole**: every span it holds is a root or has its
  parent in the trace. Children end before their parent, and an SDK exports spans in the
  order they end, so a root that arrives with its tree whole is, in practice, the end of
  the trace; the grace takes the rest of an export split in several requests;
- `settle_s` otherwise (a span whose parent has not arrived: more is on its way).
It is then handed out whole (`due`) and **kept** `keep_s` for a late span, which makes it
due again whole: the trace is scored again, with the same score ids.

Memory is bounded in traces (`max_traces`) and span bytes (`max_bytes`, the spans'
protobuf size), everything held counted: traces waiting, due, and kept. When a batch
does not fit, kept traces are forgotten first, oldest first (they are scored: nothing is
lost). When that is not enough, the oldest waiting traces are settled **early** (handed
out before their settle time, counted by reason: `max_traces`, `max_bytes`) and, if the
bytes still do not fit, the batch is **refused**: the receiver answers 429 and the
sender retries once scoring made room (OTLP/HTTP's retry contract). A trace whose root
never comes is dropped after `keep_s` past its settle time (`no_root`), counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

EarlyReason = Literal["max_traces", "max_bytes"]
HandedReason = Literal["whole", "settled", "max_traces", "max_bytes"]
DropReason = Literal["no_root", "forgotten"]


@dataclass(frozen=True, slots=True)
class Limits:
    settle_s: float = 2.0
    keep_s: float = 30.0
    max_traces: int = 20_000
    max_bytes: int = 64 * 1024 * 1024
    root_grace_s: float = 0.3


@dataclass(frozen=True, slots=True)
class SpanIn:
    """One received span, converted: its trace, id, observation, protobuf size, whether it
    is a root and its parent's id (None: not given, so the tree is not known whole)."""

    trace_id: str
    span_id: str
    observation: dict[str, Any]
    size: int
    root: bool
    parent: str | None = None


@dataclass(frozen=True, slots=True)
class Handed:
    """A trace handed out to be scored: every observation it has, and why now."""

    trace_id: str
    observations: list[dict[str, Any]]
    reason: HandedReason
    first_at: float
    last_at: float
    again: bool
    """Handed out before (a late span came): scored again, same score ids."""


@dataclass(frozen=True, slots=True)
class Dropped:
    trace_id: str
    reason: DropReason
    spans: int


@dataclass(frozen=True, slots=True)
class Admission:
    """What became of one batch: taken, or refused (answer 429), and what it cost."""

    taken: bool
    new_spans: int = 0
    early: dict[str, int] = field(default_factory=dict)
    forgotten: int = 0
    retry_after_s: float = 0.0


@dataclass(slots=True)
class _Trace:
    first_at: float
    last_at: float
    spans: dict[str, dict[str, Any]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    size: int = 0
    rooted: bool = False
    missing: set[str] = field(default_factory=set)  # parents named and not held ("": unnamed)
    handed: int = 0  # times handed out
    pending: bool = True  # spans arrived since it was last handed out
    early: EarlyReason | None = None
    start: str = ""  # its spans' earliest startTime (one ISO format: ordered as text)


class Assembly:
    """Not thread-safe: the receiver holds one lock around every call."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._traces: dict[str, _Trace] = {}  # insertion order: first arrival
        self.size = 0

    # -- what it holds ------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._traces)

    def __contains__(self, trace_id: object) -> bool:
        return trace_id in self._traces

    @property
    def waiting(self) -> int:
        """Traces with spans not yet handed out."""
        return sum(1 for t in self._traces.values() if t.pending)

    def earliest_waiting(self) -> str | None:
        """The earliest span start of the traces not yet handed out (None: none waits):
        every trace taken that started before it has been handed out to be scored."""
        starts = [t.start for t in self._traces.values() if t.pending and t.start]
        return min(starts, default=None)

    # -- spans in -------------------------------------------------------------------------

    def add(self, spans: Iterable[SpanIn], now: float) -> Admission:
        """Take one batch whole, or refuse it whole (nothing of it is kept then)."""
        batch = list(spans)
        new_traces = {s.trace_id for s in batch} - self._traces.keys()
        growth = sum(s.size for s in batch if not self._has(s))
        early: dict[str, int] = {}
        forgotten = self._forget_for(len(new_traces), growth, now)
        if len(self._traces) + len(new_traces) > self.limits.max_traces:
            self._settle_early(
                len(self._traces) + len(new_traces) - self.limits.max_traces, "max_traces", early
            )
        if self.size + growth > self.limits.max_bytes:
            self._settle_early_bytes(self.size + growth - self.limits.max_bytes, early)
            return Admission(
                False, early=early, forgotten=forgotten, retry_after_s=self._retry_after()
            )
        if len(self._traces) + len(new_traces) > self.limits.max_traces:
            # Every trace held is due or being scored: room comes once they are scored.
            return Admission(
                False, early=early, forgotten=forgotten, retry_after_s=self._retry_after()
            )
        fresh = 0
        for span in batch:
            fresh += self._put(span, now)
        return Admission(True, fresh, early, forgotten)

    def _has(self, span: SpanIn) -> bool:
        trace = self._traces.get(span.trace_id)
        return trace is not None and span.span_id in trace.spans

    def _put(self, span: SpanIn, now: float) -> int:
        trace = self._traces.get(span.trace_id)
        if trace is None:
            trace = self._traces[span.trace_id] = _Trace(now, now)
        known = span.span_id in trace.spans
        trace.spans[span.span_id] = span.observation
        start = span.observation.get("startTime")
        if isinstance(start, str) and (not trace.start or start < trace.start):
            trace.start = start
        self.size += span.size - trace.sizes.get(span.span_id, 0)
        trace.size += span.size - trace.sizes.get(span.span_id, 0)
        trace.sizes[span.span_id] = span.size
        trace.rooted = trace.rooted or span.root
        trace.missing.discard(span.span_id)
        if not span.root and (span.parent is None or span.parent not in trace.spans):
            trace.missing.add(span.parent or "")
        trace.last_at = now
        if not known:
            trace.pending = True
        return 0 if known else 1

    def _forget_for(self, new_traces: int, growth: int, now: float) -> int:
        """Kept traces (handed out, nothing pending) forgotten, oldest first, until the
        batch fits in traces and bytes, or none is left to forget."""
        forgotten = 0
        kept = [
            (t.last_at, trace_id)
            for trace_id, t in self._traces.items()
            if not t.pending and t.handed
        ]
        kept.sort()
        for _last, trace_id in kept:
            fits_count = len(self._traces) + new_traces <= self.limits.max_traces
            if fits_count and self.size + growth <= self.limits.max_bytes:
                break
            self._remove(trace_id)
            forgotten += 1
        return forgotten

    def _settle_early(self, count: int, reason: EarlyReason, early: dict[str, int]) -> None:
        for trace in self._oldest_waiting():
            if count <= 0:
                break
            if trace.early is None:
                trace.early = reason
                early[reason] = early.get(reason, 0) + 1
            count -= 1

    def _settle_early_bytes(self, excess: int, early: dict[str, int]) -> None:
        for trace in self._oldest_waiting():
            if excess <= 0:
                break
            if trace.early is None:
                trace.early = "max_bytes"
                early["max_bytes"] = early.get("max_bytes", 0) + 1
            excess -= trace.size

    def _oldest_waiting(self) -> list[_Trace]:
        return [t for t in self._traces.values() if t.pending]  # dicts keep arrival order

    def _retry_after(self) -> float:
        """How long a refused sender waits: the settle time, when the early traces are
        scored and room is made (never under a second: Retry-After is whole seconds)."""
        return max(1.0, self.limits.settle_s)

    # -- traces out -----------------------------------------------------------------------

    def due(self, now: float, limit: int | None = None) -> list[Handed]:
        """The traces to score now, oldest first: whole (root in, every parent in, quiet
        `root_grace_s`), settled (root in, quiet `settle_s`) or settled early; each handed
        out with all its observations."""
        out: list[Handed] = []
        for trace_id, trace in self._traces.items():
            if limit is not None and len(out) >= limit:
                break
            if not trace.pending:
                continue
            if not trace.rooted:
                continue  # settled early without a root: it waits, or is dropped (expire)
            quiet = now - trace.last_at >= self._quiet_s(trace)
            if trace.early is None and not quiet:
                continue
            reason: HandedReason = trace.early or ("settled" if trace.missing else "whole")
            out.append(
                Handed(
                    trace_id,
                    list(trace.spans.values()),
                    reason,
                    trace.first_at,
                    trace.last_at,
                    trace.handed > 0,
                )
            )
            trace.pending = False
            trace.early = None
            trace.handed += 1
        return out

    def next_due_in(self, now: float) -> float | None:
        """Seconds until the next trace is due (0: one is), None when none waits."""
        best: float | None = None
        for trace in self._traces.values():
            if not trace.pending or not trace.rooted:
                continue
            wait = 0.0 if trace.early else max(0.0, trace.last_at + self._quiet_s(trace) - now)
            best = wait if best is None else min(best, wait)
        return best

    def _quiet_s(self, trace: _Trace) -> float:
        """How long a rooted trace must be quiet: the grace when its tree is whole."""
        if trace.missing:
            return self.limits.settle_s
        return min(self.limits.root_grace_s, self.limits.settle_s)

    def put_back(self, handed: Handed) -> None:
        """A handed-out trace that could not be recorded (the outbox is full): due again."""
        trace = self._traces.get(handed.trace_id)
        if trace is not None:
            trace.pending = True
            trace.handed = max(0, trace.handed - 1)

    def expire(self, now: float) -> list[Dropped]:
        """Kept traces past `keep_s` forgotten; a trace without a root dropped once it was
        quiet `settle_s + keep_s` (or settled early): nothing can score it."""
        dropped: list[Dropped] = []
        horizon = self.limits.settle_s + self.limits.keep_s
        for trace_id, trace in list(self._traces.items()):
            age = now - trace.last_at
            if not trace.pending and age >= self.limits.keep_s:
                self._remove(trace_id)
            elif trace.pending and not trace.rooted and (age >= horizon or trace.early):
                dropped.append(Dropped(trace_id, "no_root", len(trace.spans)))
                self._remove(trace_id)
        return dropped

    def forget(self, trace_id: str) -> None:
        """A trace scored elsewhere or not to be scored from here: its memory freed."""
        self._remove(trace_id)

    def _remove(self, trace_id: str) -> None:
        trace = self._traces.pop(trace_id, None)
        if trace is not None:
            self.size -= trace.size
