"""The judge's bounded concurrency: `concurrency` workers over a bounded queue.

The daemon's `JudgeService` and `observer judge FILE` both judge on it. Each
worker is an `observer.background.Worker` whose step takes one item; all share
one wake event. `put` never blocks unless asked to (the daemon must not wait on
a full queue; the file command waits, which keeps its memory flat however long
the input); a worker never dies on an item's error; `shutdown(deadline)` stops
by the deadline and hands back the items no worker started.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from observer.background import Deadline, Worker

T = TypeVar("T")

# An idle worker looks at the queue this often even unwoken (a wake lost to a race).
IDLE_INTERVAL_S = 1.0


class Workers(Generic[T]):
    """Workers that hand each queued item to `work`, `concurrency` at a time."""

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
        self._queue: queue.Queue[T] = queue.Queue(maxsize=queue_size)
        self._idle = threading.Condition()
        self._pending = 0  # queued or being worked on
        self.ended = True  # after a shutdown: whether every worker's thread ended
        wake, stopping = threading.Event(), threading.Event()
        self._stopping = stopping
        self._workers = [
            Worker(
                f"{name}-{index}",
                self._step,
                interval_s=IDLE_INTERVAL_S,
                crash_event="judge_crashed",
                wake=wake,
                stopping=stopping,
            )
            for index in range(concurrency)
        ]

    def start(self) -> None:
        for worker in self._workers:
            worker.start()

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
        self._workers[0].wake()  # the event is shared: whichever worker is idle takes it
        self.on_pending(self.pending())

    def pending(self) -> int:
        with self._idle:
            return self._pending

    def _done(self) -> None:
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def _step(self) -> bool:
        try:
            item = self._queue.get_nowait()
        except queue.Empty:
            return False
        try:
            self.work(item)  # an error is the item's affair: the Worker logs it, lives on
        finally:
            self._done()
            self.on_pending(self.pending())
        return True

    def drain(self, deadline: Deadline) -> bool:
        """Wait until the queue is empty and no worker is busy; True when done in time."""
        with self._idle:
            while self._pending:
                if deadline.passed:
                    return False
                self._idle.wait(min(deadline.left(), 0.1))
        return True

    def shutdown(self, deadline: Deadline) -> list[T]:
        """Let the workers finish what they hold by `deadline`, stop them, and return the
        items still queued (none of them started). An item still being worked on at the
        deadline is abandoned to its daemon thread."""
        self.drain(deadline)
        self._stopping.set()
        left: list[T] = []
        while True:
            try:
                left.append(self._queue.get_nowait())
            except queue.Empty:
                break
            self._done()
        self.ended = all([worker.stop(deadline) for worker in self._workers])
        self.on_pending(self.pending())
        return left
