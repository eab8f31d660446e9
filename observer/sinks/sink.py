"""Where scores go: Langfuse, a JSONL file; one bounded dispatcher in front."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from observer.model import ScoreEvent


@dataclass(frozen=True, slots=True)
class SendResult:
    """What the sink acknowledged: `rejected` scores were refused for good (HTTP 207)."""

    accepted: int
    rejected: int = 0
    errors: tuple[str, ...] = field(default=())


class ScoreSink(Protocol):
    def send(self, scores: Sequence[ScoreEvent]) -> SendResult:
        """Deliver a batch, or raise an observer.errors.RemoteError."""
        ...

    def delete(self, scores: Sequence[ScoreEvent]) -> SendResult:
        """Remove scores that no longer apply (one already gone counts as removed), or
        raise an observer.errors.RemoteError."""
        ...
