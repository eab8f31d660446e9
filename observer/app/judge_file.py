"""`observer judge` over a file: every record judged (no sampling), in input order.

The judge's calls run on the daemon's bounded concurrency (`observer.judge.workers`):
`judge.concurrency` threads, and a window of four records per thread read ahead of
the one written next, so memory stays flat however long the input. With a
[resolver] configured, each record's cited chunks are looked up first, one record
at a time (the lookup is not thread-safe), and the judge's funnel applies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from observer.app.builders import build_judge_client, build_resolver
from observer.app.score_file import scored_lines
from observer.background import Deadline
from observer.config import Settings
from observer.judge.client import JudgeClient
from observer.judge.outcome import JudgeResult
from observer.judge.workers import Workers
from observer.model import RagRecord, Signals
from observer.records import RecordError
from observer.resolver.core import ResolverFindings
from observer.resolver.daemon import ResolverLookup
from observer.signals.output import signals_json
from observer.telemetry.metrics import Metrics


@dataclass(frozen=True, slots=True)
class Judged:
    """One record's signals (as `observer score` writes them), findings and verdict."""

    signals: dict[str, Any]
    findings: ResolverFindings | None
    result: JudgeResult


@dataclass(frozen=True, slots=True)
class _Job:
    record: RagRecord
    signals: Signals
    findings: ResolverFindings | None
    future: Future[JudgeResult]


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
        handed to `bad_line` with its number and skipped (so is one whose signals could not
        be computed, as in `observer score`); blank lines are skipped."""
        concurrency = self.settings.judge.concurrency
        params = self.settings.signal_params()
        held = concurrency * 4  # records read ahead of the one written next
        workers: Workers[_Job] = Workers(
            self._work, concurrency=concurrency, queue_size=held, name="observer-judge-file"
        )
        window: deque[tuple[dict[str, Any], ResolverFindings | None, Future[JudgeResult]]]
        window = deque()
        workers.start()
        try:
            for _number, record, signals in scored_lines(lines, params, bad_line):
                findings = None if self.resolver is None else self.resolver([(record, signals)])[0]
                future: Future[JudgeResult] = Future()
                workers.put(_Job(record, signals, findings, future), block=True)
                window.append((signals_json(signals), findings, future))
                while len(window) >= held:
                    scored, found, done = window.popleft()
                    yield Judged(scored, found, done.result())
            while window:
                scored, found, done = window.popleft()
                yield Judged(scored, found, done.result())
        finally:  # also when the caller stops reading: what is queued is not judged
            workers.shutdown(Deadline.within(0.0))

    def _work(self, job: _Job) -> None:
        if job.future.set_running_or_notify_cancel():
            try:
                job.future.set_result(self.client.judge(job.record, job.signals, job.findings))
            except BaseException as error:  # raised again where the result is read
                job.future.set_exception(error)
