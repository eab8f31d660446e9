"""`observer judge` over a file: every record judged (no sampling), in input order.

The judge's calls run on `judge.concurrency` threads over a bounded window (four
records per thread), so memory stays flat however long the input. With a
[resolver] configured, each record's cited chunks are looked up first, one record
at a time (the lookup is not thread-safe), and the judge's funnel applies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from observer.app.parts import build_judge_client, build_resolver
from observer.config import Settings
from observer.judge.client import JudgeClient
from observer.judge.outcome import JudgeResult
from observer.output import signals_json
from observer.records import RecordError, parse_record
from observer.resolver.core import ResolverFindings
from observer.resolver.daemon import ResolverLookup
from observer.signals import compute
from observer.telemetry.metrics import Metrics


@dataclass(frozen=True, slots=True)
class Judged:
    """One record's signals (as `observer score` writes them), findings and verdict."""

    signals: dict[str, Any]
    findings: ResolverFindings | None
    result: JudgeResult


class FileJudge:
    """The judge's client and the resolver, built at once (ConfigError before any line
    is read); a context manager that closes the resolver."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client: JudgeClient = build_judge_client(settings)
        self.resolver: ResolverLookup | None = build_resolver(settings, Metrics())

    def __enter__(self) -> FileJudge:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.resolver is not None:
            self.resolver.close()

    def judge(
        self, lines: Iterable[bytes], bad_line: Callable[[int, RecordError], None]
    ) -> Iterator[Judged]:
        """Each record of `lines` judged, in input order; a line that is not a record is
        handed to `bad_line` with its number and skipped; blank lines are skipped."""
        concurrency = self.settings.judge.concurrency
        params = self.settings.signal_params()
        window: deque[tuple[dict[str, Any], ResolverFindings | None, Future[JudgeResult]]]
        window = deque()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    record = parse_record(line)
                except RecordError as error:
                    bad_line(number, error)
                    continue
                signals = compute(record, params)
                findings = None if self.resolver is None else self.resolver([(record, signals)])[0]
                future = pool.submit(self.client.judge, record, signals, findings)
                window.append((signals_json(signals), findings, future))
                while len(window) >= concurrency * 4:
                    scored, found, done = window.popleft()
                    yield Judged(scored, found, done.result())
            while window:
                scored, found, done = window.popleft()
                yield Judged(scored, found, done.result())
