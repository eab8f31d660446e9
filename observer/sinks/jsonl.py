"""Scores to a JSONL file, one Langfuse-shaped score per line (the demo's sink)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import orjson

from observer.model import ScoreEvent
from observer.sinks import SendResult


def score_json(score: ScoreEvent) -> dict[str, object]:
    """A score in the API's camelCase, as it would be posted to Langfuse."""
    return {
        "id": score.id,
        "traceId": score.trace_id,
        "observationId": score.observation_id,
        "name": score.name,
        "value": score.value,
        "dataType": score.data_type,
        "comment": score.comment,
        "timestamp": score.timestamp,
        "environment": score.environment,
        **({"metadata": score.metadata} if score.metadata else {}),
    }


class JsonlScoreSink:
    """Writes what one run pushes; the file is replaced at the first score, never emptied.

    With `stream` (standard output, for a dry run's `-`), the lines go there instead,
    flushed after each batch, and `path` only names it."""

    def __init__(self, path: str | Path, stream: BinaryIO | None = None) -> None:
        self.path = Path(path)
        self._stream = stream
        self._lock = threading.Lock()
        self.written = 0

    def send(self, scores: Sequence[ScoreEvent]) -> SendResult:
        data = b"".join(
            orjson.dumps(score_json(s), option=orjson.OPT_APPEND_NEWLINE) for s in scores
        )
        return self._write(data, len(scores))

    def delete(self, scores: Sequence[ScoreEvent]) -> SendResult:
        """A line `{"id": ..., "deleted": true}` for each score that no longer applies."""
        data = b"".join(
            orjson.dumps(
                {"id": s.id, "traceId": s.trace_id, "name": s.name, "deleted": True},
                option=orjson.OPT_APPEND_NEWLINE,
            )
            for s in scores
        )
        return self._write(data, len(scores))

    def _write(self, data: bytes, count: int) -> SendResult:
        with self._lock:
            if self._stream is not None:
                self._stream.write(data)
                self._stream.flush()
            else:
                with self.path.open("ab" if self.written else "wb") as handle:
                    handle.write(data)
            self.written += count
        return SendResult(accepted=count)
