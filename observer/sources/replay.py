"""Observations replayed from memory or a JSONL file (one observation per line): the
demo's source."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from observer.times import parse_time


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The observations of a JSONL file, one a line."""
    return [orjson.loads(line) for line in Path(path).read_bytes().splitlines() if line.strip()]


class ReplaySource:
    def __init__(self, observations: Iterable[dict[str, Any]], page_limit: int = 1000) -> None:
        self.page_limit = page_limit
        self._observations = sorted(
            (o for o in observations if parse_time(o.get("startTime")) is not None),
            key=lambda o: (parse_time(o["startTime"]), o.get("id", "")),
            reverse=True,
        )

    def time_range(self) -> tuple[datetime, datetime]:
        """Earliest and latest startTime of the observations."""
        times = [parse_time(o["startTime"]) for o in self._observations]
        present = [t for t in times if t is not None]
        return min(present), max(present)

    def pages(
        self, start: datetime, end: datetime, trace_id: str | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        window = [
            o
            for o in self._observations
            if (moment := parse_time(o["startTime"])) is not None
            and start <= moment < end
            and (trace_id is None or o.get("traceId") == trace_id)
        ]
        for offset in range(0, len(window), self.page_limit):
            yield window[offset : offset + self.page_limit]
        if not window:
            yield []
