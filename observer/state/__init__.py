"""Durable state in one SQLite file (see `store` for the outbox's guarantees).

Re-exported here, each loaded when first asked for: the rows alone
(observer.state.rows, pure) load no SQLite and no logging.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from observer.state.db import StateError as StateError
    from observer.state.db import StateGone as StateGone
    from observer.state.store import OutboxFull as OutboxFull
    from observer.state.store import Pending as Pending
    from observer.state.store import State as State
    from observer.state.store import TraceWrite as TraceWrite

_HOMES = {
    "StateError": "observer.state.db",
    "StateGone": "observer.state.db",
    "OutboxFull": "observer.state.store",
    "Pending": "observer.state.store",
    "State": "observer.state.store",
    "TraceWrite": "observer.state.store",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found directly from now on
    return value
