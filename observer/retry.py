"""The one retry policy for remote calls: bounded attempts, jittered backoff, Retry-After.

    call_with_retries(fn, attempts=4, base_s=1.0, max_s=60.0,
                      retryable=..., retry_after=..., should_stop=..., sleep=...)

calls `fn()` until it returns, at most `attempts` times in all. Between two
attempts it waits:

- the Retry-After the error carries (`retry_after(error)`), exactly: the
  server said when to come back, and an earlier retry would only be refused
  again. A Retry-After longer than `max_retry_after_s` ends the retries at once
  (the caller's queue must not stall behind one rate-limited message);
- otherwise an exponential backoff with "equal jitter": a uniform draw between
  half and all of `min(max_s, base_s * 2 ** (attempt - 1))`, so replicas that
  failed together do not retry together, and no wait is ever near zero.

An error for which `retryable(error)` is False is raised at once. When
`should_stop()` turns true (a shutdown) no further attempt is made: the last
error is raised. `sleep` is injectable so a shutdown can cut a wait short
(pass `threading.Event().wait`). The error raised in the end is always the
last one `fn` raised, never a wrapper.

tenacity does the bookkeeping; this module only fixes the policy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import SimpleNamespace
from typing import Any, TypeVar, cast

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    wait_exponential,
    wait_random_exponential,
)

T = TypeVar("T")


class _Stopped(Exception):
    """Raised inside the retry loop when `should_stop()` turned true during a wait."""


def _never(_: BaseException) -> float | None:
    return None


def _always(_: BaseException) -> bool:
    return True


def _no(*_: object) -> bool:
    return False


def call_with_retries(
    fn: Callable[[], T],
    *,
    attempts: int,
    base_s: float,
    max_s: float,
    retryable: Callable[[Exception], bool] = _always,
    retry_after: Callable[[Exception], float | None] = _never,
    max_retry_after_s: float = math.inf,
    should_stop: Callable[[], bool] = _no,
    sleep: Callable[[float], object] = time.sleep,
    on_retry: Callable[[int, Exception, float], None] | None = None,
) -> T:
    """`fn()`, retried per the module's policy; raises the last error when it gives up.

    `on_retry(attempt, error, wait_s)` is called before each wait (for a log
    line); `attempt` is the number of the attempt that just failed.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    last_error: Exception | None = None

    def attempt() -> T:
        nonlocal last_error
        if last_error is not None and should_stop():
            raise _Stopped
        try:
            return fn()
        except Exception as error:
            last_error = error
            raise

    backoff = _equal_jitter(base_s, max_s)

    def wait(state: RetryCallState) -> float:
        error = _error_of(state)
        hinted = retry_after(error) if error is not None else None
        return max(0.0, hinted) if hinted is not None else float(backoff(state))

    def stop(state: RetryCallState) -> bool:
        if state.attempt_number >= attempts or should_stop():
            return True
        error = _error_of(state)
        hinted = retry_after(error) if error is not None else None
        return hinted is not None and hinted > max_retry_after_s

    def before_sleep(state: RetryCallState) -> None:
        error = _error_of(state)
        if on_retry is not None and error is not None:
            on_retry(state.attempt_number, error, state.upcoming_sleep)

    def pause(seconds: float) -> None:
        sleep(seconds)  # `sleep` may return something (Event.wait's bool): tenacity wants None

    retrying = Retrying(
        stop=stop,
        wait=wait,
        retry=retry_if_exception(
            lambda e: isinstance(e, Exception) and not isinstance(e, _Stopped) and retryable(e)
        ),
        sleep=pause,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(attempt)
    except _Stopped:
        assert last_error is not None  # _Stopped is raised only after a failed attempt
        raise last_error from None


def _equal_jitter(base_s: float, max_s: float) -> Any:
    """Half of the exponential step fixed, the other half a uniform draw (tenacity's parts)."""
    half_base, half_max = base_s / 2, max_s / 2
    return wait_exponential(multiplier=half_base, max=half_max) + wait_random_exponential(
        multiplier=half_base, max=half_max
    )


def backoff_s(attempt: int, *, base_s: float, max_s: float) -> float:
    """The wait after failed attempt number `attempt` (1, 2, ...), for retries that are
    scheduled rather than slept (the outbox): the same policy as `call_with_retries`."""
    state = SimpleNamespace(attempt_number=max(1, attempt))
    return float(_equal_jitter(base_s, max_s)(cast(RetryCallState, state)))


def _error_of(state: RetryCallState) -> Exception | None:
    if state.outcome is None or not state.outcome.failed:
        return None
    error = state.outcome.exception()
    return error if isinstance(error, Exception) else None


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from an HTTP `Retry-After` value: delay-seconds or an HTTP date.

    None when absent or unreadable (the caller falls back to its backoff). A
    date in the past is 0. Fractional seconds are accepted (some servers send
    them) though the RFC allows integers only.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT by definition
        when = when.replace(tzinfo=UTC)
    current = now if now is not None else datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())
