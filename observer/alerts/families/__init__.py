"""The rule families: each kind of rule a small class of one shape.

    family.step(now, rows) -> list[Outgoing]      what it queued, in the outbox already

    JudgeHealth     window rules on the judge's own health: stepped first, the rules
                    after it hold or tell their judge alerts by it
    WindowRules     window rules: windows slid over the history, a bounded number of
                    evaluation points per step (families/window.py)
    Regressions     release regressions: a new release against the one before it, from
                    SQLite's statistics (families/release.py)
    Digests         the trace rules' hourly digests (families/trace.py)
    TraceRules      trace rules: `rows` are the rows just written, the scorer's or the
                    judge's (families/trace.py)

Every family decides from the history and its stored state, and hands its state and
messages to the one `Sender` (observer.alerts.sender), which places them in incidents
and writes them in one transaction. `rows` is the history as a family reads it:
`History` (under the state file's lock) or the evaluator's own `HistoryReader`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol, TypeVar

from observer.state.rows import Outgoing, Row

R_contra = TypeVar("R_contra", contravariant=True)


class Rows(Protocol):
    """The history as a family reads it (`History`, `HistoryReader`)."""

    def rows(
        self,
        start: float,
        end: float,
        keys: Collection[str] | None = None,
        *,
        traces: bool = True,
        samples: bool = True,
    ) -> list[Row]:
        """Trace rows and samples with start < at <= end, oldest first."""
        ...

    def connection(self) -> AbstractContextManager[sqlite3.Connection]:
        """A connection for SQLite's own aggregates (one snapshot)."""
        ...


class Family(Protocol[R_contra]):
    """One kind of rule: a step decides, queues what it decided, returns it."""

    name: str

    def step(self, now: datetime, rows: R_contra) -> list[Outgoing]: ...
