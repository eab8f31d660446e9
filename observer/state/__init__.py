"""Durable state in one SQLite file (see `store` for the outbox's guarantees)."""

from observer.state.db import StateError, StateGone
from observer.state.store import OutboxFull, Pending, State, TraceWrite

__all__ = ["OutboxFull", "Pending", "State", "StateError", "StateGone", "TraceWrite"]
