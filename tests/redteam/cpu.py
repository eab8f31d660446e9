"""A CPU bound for one piece of work, robust on a busy machine.

`within(seconds)` arms a CPU-time timer (`ITIMER_VIRTUAL`: user time of this
process, which another process's load does not inflate) and raises `OverBudget`
in the work when it runs out: Python's regular expression engine checks for
signals while it matches, so a quadratic expression is stopped at the bound
instead of holding the test for minutes. `bound_for(text)` scales the bound to
the machine: a multiple of what a linear pass over the same text costs here.
Signals work on the main thread only (pytest's, and xdist's workers').
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

# A linear reference: one regular-expression step per character, a list entry each.
_LINEAR = re.compile(r"(?s).")
# How many linear passes one piece of work may cost. Linear work over an answer costs a
# few; a quadratic expression over 200,000 characters costs hundreds of thousands.
TIMES_LINEAR = 60.0
FLOOR_S = 0.3


class OverBudget(Exception):
    """The work used more CPU than its bound."""


def linear_s(text: str) -> float:
    """The CPU seconds of a linear pass over `text` here (the lesser of two)."""
    best = float("inf")
    for _ in range(2):
        began = time.process_time()
        _LINEAR.findall(text)
        best = min(best, time.process_time() - began)
    return best


def bound_for(text: str) -> float:
    """The CPU bound for work over `text`: TIMES_LINEAR linear passes, at least FLOOR_S."""
    return max(FLOOR_S, TIMES_LINEAR * linear_s(text))


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Raise OverBudget inside the block once it has used `seconds` of CPU."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("a CPU bound needs the main thread (signals)")

    def expired(_signum: int, _frame: FrameType | None) -> None:
        raise OverBudget(f"over {seconds:.2f} s of CPU")

    previous = signal.signal(signal.SIGVTALRM, expired)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


def cpu_of(work: Callable[[], object], bound_s: float) -> float:
    """The CPU seconds `work` took; OverBudget when it would take more than `bound_s`."""
    began = time.process_time()
    with within(bound_s):
        work()
    return time.process_time() - began
