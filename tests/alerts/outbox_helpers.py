"""Posting notifications the way the AlertService does, for the delivery tests.

The engine never hands a message to Delivery: it writes `Outgoing` rows into the
state file's outbox (in the transaction that decided them), counts what the
outbox dropped to stay within `queue_size`, and wakes the notifiers' lanes.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

from observer.alerts.delivery import Delivery
from observer.state import State
from observer.state.rows import Notification, Outgoing


def post(
    state: State, delivery: Delivery, names: Sequence[str], notification: Notification
) -> Counter[str]:
    """Queue `notification` for the notifiers `names`, as the engine does; what the
    outbox dropped per notifier."""
    known = delivery.known(names, notification)  # an unknown name is counted as a drop
    dropped = state.alerts.queue(
        [Outgoing(name, notification) for name in known], delivery.queue_size
    )
    delivery.count_dropped(dropped, notification)
    delivery.wake(known)
    return dropped


def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait for `condition` (a thread finishing what it does); AssertionError after
    `timeout_s`. The wait decides nothing: a condition met early returns at once."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not true within {timeout_s}s")
        time.sleep(0.01)
