"""The judge's bounded concurrency: `concurrency` threads over a bounded queue.

The daemon's `JudgeService` and `observer judge FILE` both judge on it. `put`
never blocks unless asked to (the daemon must not wait on a full queue; the
file command waits, which keeps its memory flat however long the input); a
worker never dies on an item's error; `shutdown(timeout_s)` stops within its
budget and hands back the items no worker started.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

import structlog

log = structlog.get_logger("observer.judge")

T = TypeVar("T")


class Workers(Generic[T]):
    """Threads that hand each queued item to `work`, `concurrency` at a time."""

    def __init__(
        self,
        work: Callable[[T], None],
        *,
        concurrency: int,
        queue_size: int,
        name: str = "observer-judge",
        on_pending: Callable[[int], None] = lambda _count: None,
    ) -> None:
        self.work = work
        self.concurrency = concurrency
        self.name = name
        self.on_pending = on_pending  # told the count of queued and running items
        # None is the stop sentinel.
        self._queue: queue.Queue[T | None] = queue.Queue(maxsize=queue_size)
        self._threads: list[threading.Thread] = []
        self._idle = threading.Condition()
        self._pending = 0  # queued or being worked on

    def start(self) -> None:
        for index in range(self.concurrency - len(self._threads)):
            thread = threading.Thread(target=self._run, name=f"{self.name}-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def full(self) -> bool:
        return self._queue.full()

    def put(self, item: T, *, block: bool = False) -> None:
        """Queue `item`; raises queue.Full when the queue is full and `block` is False."""
        with self._idle:
            self._pending += 1
        try:
            self._queue.put(item, block=block)
        except queue.Full:
            self._done()
            raise
        self.on_pending(self.pending())

    def pending(self) -> int:
        with self._idle:
            return self._pending

    def _done(self) -> None:
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self.work(item)
            except Exception:  # a worker never dies; what the item needed is its own affair
                log.exception("judge_crashed")
            finally:
                self._done()
                self.on_pending(self.pending())

    def drain(self, timeout_s: float) -> bool:
        """Wait until the queue is empty and no worker is busy; True when done in time."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, 0.1))
        return True

    def shutdown(self, timeout_s: float) -> list[T]:
        """Let the workers finish what they hold within `timeout_s`, stop them, and return
        the items still queued (none of them started). An item still being worked on at
        the deadline is abandoned to its daemon thread."""
        deadline = time.monotonic() + timeout_s
        self.drain(timeout_s)
        left: list[T] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                left.append(item)
                self._done()
        for _ in self._threads:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                break
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._threads.clear()
        self.on_pending(self.pending())
        return left
