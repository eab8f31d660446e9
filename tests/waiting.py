"""Waiting for something to happen: a deadline against a hang, never a speed check.

A test that needs time to pass before it asserts waits for the thing it asserts
(`wait_until`), not for a fixed number of seconds: a loaded machine only makes the
wait longer, never the test wrong. The bounds are generous on purpose.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["wait_until"]


def wait_until(
    condition: Callable[[], T],
    what: str,
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.02,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """`condition()`'s first true value, asked every `interval_s` until `timeout_s`
    (an AssertionError naming `what` then); errors of the types in `ignoring` count as
    not yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = condition()
        except ignoring:
            pass  # not yet
        else:
            if found:
                return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(interval_s)
