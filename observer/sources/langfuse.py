"""Observations from Langfuse: `GET /api/public/v2/observations` through the SDK API client.

Time window plus cursor paging, only the field groups the mapping needs, the
metadata keys it reads expanded (never truncated). A listing ends only when
`meta.cursor` is absent: Langfuse answers a slow query with pages shorter than
`limit`, empty ones included, and a cursor to go on with (changelog
2026-11-03, "Continue observations queries that would otherwise time out").
Every answer's `Date` header is a sample of the `ServerClock` (`clock`), filtered:
Langfuse's now is the reference for windows and the watermark. Every request passes the
rate limiter; a 429 blocks it for `Retry-After`; network errors and 5xx are
retried a bounded number of times with backoff, then raised as
`Unreachable` so the pass stops where it is (the watermark does not move).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import structlog
from langfuse.api.client import LangfuseAPI
from langfuse.api.commons.types.observation_v2 import ObservationV2

from observer.errors import (
    AuthRejected,
    Misdirected,
    RateLimited,
    Rejected,
    TooLarge,
    Unreachable,
)
from observer.langfuse_api import NO_RETRIES, translate
from observer.retry import call_with_retries
from observer.sources import Stopped as Stopped  # its home before; imported from here
from observer.sources.clock import ServerClock
from observer.sources.ratelimit import RateLimiter
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.source")
T = TypeVar("T")

FIELDS = "core,basic,time,io,metadata,model,prompt,trace_context"
SEED_ASKS = 4  # health requests at most, after the first read, until the clock is known


def as_dict(observation: ObservationV2) -> dict[str, Any]:
    """The fields the mapping reads, in the API's camelCase.

    Plain attribute reads: the generated model's own `.dict()` walks every
    nested value through a pure-Python alias converter and costs as much as
    parsing the page did (bench/pipeline.py).
    """
    return {
        "id": observation.id,
        "traceId": observation.trace_id,
        "projectId": observation.project_id,
        "type": observation.type,
        "name": observation.name,
        "startTime": observation.start_time,
        "endTime": observation.end_time,
        "updatedAt": observation.updated_at,
        "isRootObservation": observation.is_root_observation,
        "environment": observation.environment,
        "input": observation.input,
        "output": observation.output,
        "metadata": observation.metadata,
        "tags": observation.tags,
        "traceName": observation.trace_name,
        "release": observation.release,
        "version": observation.version,
        "model": observation.model,
        "promptName": observation.prompt_name,
        "promptVersion": observation.prompt_version,
    }


_RESULTS = {
    TooLarge: "too_large",
    Misdirected: "misdirected",
    RateLimited: "rate_limited",
    Unreachable: "unreachable",
    AuthRejected: "auth_rejected",
    Rejected: "rejected",
}


def budgeted_read(
    call: Callable[[], T],
    limiter: RateLimiter,
    *,
    what: str,
    event: str,
    max_attempts: int,
    should_stop: Callable[[], bool],
    on_error: Callable[[Exception], None] = lambda _error: None,
) -> T:
    """One read of Langfuse's General API within the process's request budget, on
    observer's retry policy: a slot taken first (`Stopped` when the daemon stops while
    waiting for it); a 429 settles the budget at its `X-RateLimit-Limit` and is retried
    after its `Retry-After`; an unreachable Langfuse gets `max_attempts` tries with
    backoff; any other error is raised at once. `on_error` sees every translated error;
    `{event}_rate_limited` and `{event}_request_failed` are logged before a retry."""
    unreachable = 0

    def once() -> T:
        if not limiter.acquire(should_stop):
            raise Stopped()
        try:
            return call()
        except Exception as failure:
            error = translate(failure, what)
            if isinstance(error, RateLimited):
                # The budget settles at the server's limit; the retry's wait below
                # (block_for) holds it for Retry-After.
                limiter.rate_limited(error.limit)
            on_error(error)
            raise error from None

    def retryable(error: Exception) -> bool:
        # A 429 says when to come back: twice the tries an unreachable Langfuse gets.
        nonlocal unreachable
        if isinstance(error, RateLimited):
            return True
        unreachable += isinstance(error, Unreachable)
        return isinstance(error, Unreachable) and unreachable < max_attempts

    def on_retry(_attempt: int, error: Exception, wait_s: float) -> None:
        if isinstance(error, RateLimited):
            log.warning(f"{event}_rate_limited", retry_after_s=round(wait_s, 1))
        else:
            log.warning(f"{event}_request_failed", error=str(error), retry_in_s=round(wait_s, 1))

    # A wait blocks the rate limiter: every request of this process waits, and the
    # next try's acquire() is where it is waited out (a shutdown cuts it short).
    began = time.monotonic()
    try:
        return call_with_retries(
            once,
            attempts=max_attempts * 2,
            base_s=1.0,
            max_s=30.0,
            retryable=retryable,
            retry_after=lambda e: e.retry_after_s if isinstance(e, RateLimited) else None,
            sleep=limiter.block_for,
            on_retry=on_retry,
        )
    except Unreachable as error:  # how long it tried, with what it tried (the URL)
        raise error.tried(time.monotonic() - began, unreachable) from None


class LangfuseSource:
    def __init__(
        self,
        api: LangfuseAPI,
        limiter: RateLimiter,
        metrics: Metrics,
        *,
        page_limit: int = 1000,
        environments: Sequence[str] = (),
        expand_metadata: Sequence[str] = (),
        max_attempts: int = 5,
        should_stop: Callable[[], bool] = lambda: False,
        sleep: Callable[[float], None] = time.sleep,
        clock: ServerClock | None = None,
    ) -> None:
        self._api = api
        self._limiter = limiter
        self._metrics = metrics
        self.page_limit = page_limit
        self.environments = list(environments)
        self.expand_metadata = ",".join(expand_metadata)
        self._max_attempts = max_attempts
        self._should_stop = should_stop
        self._sleep = sleep
        self.clock = clock or ServerClock(on_offset=metrics.clock_skew.set)

    def now(self) -> datetime:
        """Langfuse's now. Until answers agree on it (observer.sources.clock), Langfuse is
        asked: one read, then its health endpoint (no rate limit) a few times."""
        if not self.clock.known:
            self.probe()
            for _ in range(SEED_ASKS):
                if self.clock.known:
                    break
                self._sample_health()
        return self.clock.now()

    def _sample_health(self) -> None:
        """One `GET /api/public/health` for its Date header; a failure changes nothing."""
        sent = self.clock.monotonic()
        try:
            raw = self._api.health.with_raw_response.health(request_options=NO_RETRIES)
        except Exception as error:  # the reads that follow say what is wrong
            log.info("clock_sample_failed", error=str(translate(error, "reading Langfuse's clock")))
            return
        self.clock.observe(raw.headers.get("date"), sent, self.clock.monotonic())

    def pages(
        self, start: datetime, end: datetime, trace_id: str | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        """Pages until the cursor is absent: a short or empty page with a cursor goes on.

        A page larger than `source.max_response_mb` is asked again with half the limit, down
        to one observation; past that the TooLarge error is raised (the pass stops there)."""
        cursor: str | None = None
        while True:
            limit = self.page_limit
            while True:
                try:
                    response = self._request(start, end, cursor, limit=limit, trace_id=trace_id)
                    break
                except TooLarge as error:
                    if limit == 1:
                        raise
                    limit = max(1, limit // 2)
                    log.warning("page_too_large", error=str(error), retry_with_limit=limit)
            data = [as_dict(o) for o in response.data]
            self._metrics.observations.inc(len(data))
            yield data
            cursor = response.meta.cursor
            if not cursor:
                return

    def probe(self) -> int:
        """One cheap request that proves reachability and keys; returns observations seen."""
        now = self.clock.now()
        response = self._request(now - timedelta(days=365), now, None, limit=1, fields="core")
        return len(response.data)

    def _request(
        self,
        start: datetime,
        end: datetime,
        cursor: str | None,
        limit: int | None = None,
        fields: str = FIELDS,
        trace_id: str | None = None,
    ) -> Any:
        def call() -> Any:
            sent = self.clock.monotonic()
            raw = self._api.observations.with_raw_response.get_many(
                fields=fields,
                expand_metadata=self.expand_metadata or None,
                limit=limit or self.page_limit,
                cursor=cursor,
                environment=self.environments or None,
                from_start_time=start,
                to_start_time=end,
                trace_id=trace_id,
                request_options=NO_RETRIES,
            )
            self.clock.observe(raw.headers.get("date"), sent, self.clock.monotonic())
            self._metrics.source_requests.labels(result="ok").inc()
            return raw.data

        def failed(error: Exception) -> None:
            self._metrics.source_requests.labels(result=_RESULTS.get(type(error), "error")).inc()

        return budgeted_read(
            call,
            self._limiter,
            what="reading observations",
            event="source",
            max_attempts=self._max_attempts,
            should_stop=self._should_stop,
            on_error=failed,
        )
