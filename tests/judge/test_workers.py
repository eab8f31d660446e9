"""The judge's bounded concurrency, shared by the daemon and `observer judge FILE`."""

from __future__ import annotations

import queue
import threading

import pytest

from observer.background import Deadline
from observer.judge.workers import Workers


class Gate:
    """Work that blocks until released, and remembers how many ran at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.done: list[int] = []

    def __call__(self, item: int) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        self.release.wait(5)
        with self.lock:
            self.running -= 1
            self.done.append(item)


def test_never_more_than_concurrency_at_once_and_all_done() -> None:
    gate = Gate()
    workers: Workers[int] = Workers(gate, concurrency=3, queue_size=100)
    workers.start()
    for item in range(20):
        workers.put(item)
    assert workers.pending() == 20
    assert not workers.drain(
        Deadline.within(0.3)
    )  # three are held at the gate, the rest wait their turn
    assert gate.running == 3 and not gate.done
    gate.release.set()
    assert workers.drain(Deadline.within(5))
    assert sorted(gate.done) == list(range(20))
    assert gate.most == 3
    assert workers.pending() == 0
    assert workers.shutdown(Deadline.within(1)) == []


def test_a_full_queue_refuses_at_once_unless_asked_to_wait() -> None:
    gate = Gate()
    workers: Workers[int] = Workers(gate, concurrency=1, queue_size=2)
    workers.put(1)
    workers.put(2)
    assert workers.full()
    with pytest.raises(queue.Full):
        workers.put(3)
    assert workers.pending() == 2  # the refused one is not counted
    workers.start()
    gate.release.set()
    workers.put(3, block=True)  # room comes as the worker takes items
    assert workers.drain(Deadline.within(5))
    assert sorted(gate.done) == [1, 2, 3]
    workers.shutdown(Deadline.within(1))


def test_shutdown_hands_back_what_no_worker_started() -> None:
    gate = Gate()
    counts: list[int] = []
    workers: Workers[int] = Workers(gate, concurrency=1, queue_size=10, on_pending=counts.append)
    workers.start()
    for item in range(4):
        workers.put(item)
    left = workers.shutdown(Deadline.within(0.2))  # item 0 is held at the gate past the budget
    assert left == [1, 2, 3]
    assert counts[-1] == 1  # only the one abandoned in flight
    gate.release.set()


def test_a_failing_item_does_not_stop_its_worker() -> None:
    done: list[int] = []

    def work(item: int) -> None:
        if item == 1:
            raise RuntimeError("boom")
        done.append(item)

    workers: Workers[int] = Workers(work, concurrency=1, queue_size=10)
    workers.start()
    for item in range(3):
        workers.put(item)
    assert workers.drain(Deadline.within(5))
    assert done == [0, 2]
    workers.shutdown(Deadline.within(1))
