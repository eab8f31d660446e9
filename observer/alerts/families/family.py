"""What a rule family is, the options the families share, and the history rows it reads."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from observer.alerts.incidents import DEFAULT_WINDOW_S
from observer.state.rows import Outgoing, Row

R_contra = TypeVar("R_contra", contravariant=True)


@dataclass(frozen=True, slots=True)
class Options:
    """The Langfuse base URL for trace links, groups per rule, days of history kept, the
    evaluation step, and the correlation window of incidents (0: correlation off)."""

    base_url: str = ""
    max_groups: int = 50
    history_days: float = 8.0
    step_s: float = 60.0
    correlation_window_s: float = DEFAULT_WINDOW_S


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
