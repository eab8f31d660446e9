"""What init-langfuse did, per object, and its exit code. Pure.

Every object it sees to is one `SetupItem`: created, existed (unchanged),
differs (an existing object of that name with another type, range or
definition: left as it is), refused (the server's 4xx and its message) or
failed (the run stopped there, or before it: `attempted` False). The exit code:
4 keys rejected, 3 Langfuse unreachable or rate limited too long, 1 something
refused or differing, 0 everything there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Literal

from observer.errors import AuthRejected, RateLimited, RemoteError, UsageSuspended


class SetupOutcome(StrEnum):
    CREATED = "created"
    EXISTED = "existed"
    DIFFERS = "differs"
    REFUSED = "refused"
    FAILED = "failed"


Kind = Literal["score config", "dashboard", "widget"]

# The exit codes of observer.app (0, 3, 4), and 1: done, but something needs a look.
EXIT_OK: Final = 0
EXIT_ATTENTION: Final = 1
EXIT_UNREACHABLE: Final = 3
EXIT_AUTH: Final = 4


@dataclass(frozen=True, slots=True)
class SetupItem:
    kind: Kind
    name: str
    outcome: SetupOutcome
    detail: str
    id: str | None = None  # the object's Langfuse id, when known
    attempted: bool = True  # False: the run stopped before it (outcome FAILED)


@dataclass(frozen=True, slots=True)
class SetupReport:
    """Every object init-langfuse sees to, in order: score configs, widgets, the dashboard."""

    items: tuple[SetupItem, ...]
    error: RemoteError | None = None  # what stopped the run early, if anything

    def item(self, kind: Kind, name: str) -> SetupItem:
        return next(i for i in self.items if i.kind == kind and i.name == name)

    def of(self, outcome: SetupOutcome) -> tuple[SetupItem, ...]:
        return tuple(i for i in self.items if i.outcome is outcome)

    @property
    def created(self) -> tuple[SetupItem, ...]:
        return self.of(SetupOutcome.CREATED)

    @property
    def exit_code(self) -> int:
        """4 keys rejected, 3 unreachable (or rate limited), 1 something refused or differing,
        0 everything created or existing."""
        if isinstance(self.error, AuthRejected):
            return EXIT_AUTH
        if self.error is not None:
            return EXIT_UNREACHABLE
        if self.of(SetupOutcome.REFUSED) or self.of(SetupOutcome.DIFFERS):
            return EXIT_ATTENTION
        return EXIT_OK

    @property
    def summary(self) -> str:
        counts = [f"{len(self.of(o))} {o.value}" for o in SetupOutcome if self.of(o)]
        return ", ".join(counts) or "nothing to do"

    def lines(self) -> list[str]:
        """Plain text, one line per attempted object, then what was not attempted and why.

        Server messages may hold brackets: print without markup (rich: `markup=False`).
        """
        out = [
            f"{i.outcome.value:<8} {i.kind:<12} {i.name}: {i.detail}"
            for i in self.items
            if i.attempted
        ]
        skipped = Counter(i.kind for i in self.items if not i.attempted)
        if skipped:
            kinds = ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in skipped.items())
            out.append(f"{SetupOutcome.FAILED.value:<8} not attempted: {kinds}")
        if self.error is not None:
            out.append(f"stopped: {_stop_reason(self.error)}")
        out.append(self.summary)
        return out


def run_report(
    planned: Sequence[tuple[Kind, str]],
    done: Mapping[tuple[Kind, str], SetupItem],
    error: RemoteError | None,
    *,
    failed_at: tuple[Kind, str] | None = None,
    unplaced: Collection[str] = (),
) -> SetupReport:
    """The report of a run: every planned object, in order, as `done` says, except

    - the object the run was at when `error` stopped it (`failed_at`): failed, with the error;
    - widgets made but `unplaced` on an existing dashboard when the run stopped: said so;
    - objects never reached: failed, not attempted.
    """
    items: list[SetupItem] = []
    for kind, name in planned:
        item = done.get((kind, name))
        if (kind, name) == failed_at and error is not None:
            object_id = item.id if item is not None else None
            item = SetupItem(kind, name, SetupOutcome.FAILED, str(error), object_id)
        elif item is not None and kind == "widget" and name in unplaced:
            detail = f"{item.detail}; not placed on the dashboard: the run stopped"
            item = SetupItem(kind, name, item.outcome, detail, item.id)
        if item is None:
            item = SetupItem(kind, name, SetupOutcome.FAILED, "not attempted", attempted=False)
        items.append(item)
    return SetupReport(tuple(items), error)


def _stop_reason(error: RemoteError) -> str:
    if isinstance(error, UsageSuspended):
        return f"usage limit: {error}"
    if isinstance(error, AuthRejected):
        return f"keys rejected: {error}"
    if isinstance(error, RateLimited):
        return f"rate limited too long: {error}"
    return f"Langfuse unreachable: {error}"
