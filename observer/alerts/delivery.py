"""Delivery: hands notifications to notifiers without ever blocking the engine.

    engine --(outbox row, wake(names))--> [lane "pagerduty": a Worker] --> PagerDuty
                                          [lane "slack":     a Worker] --> Slack

One lane per notifier, so a receiver that is down or slow delays only its own
messages. The lane's queue is the state file's outbox, where the engine wrote
each notification in the transaction that decided it (at most `queue_size` per
notifier; what the outbox dropped to stay within it is counted, reason
`queue_full`, as is a message for a notifier name the configuration does not
have, `unknown_notifier`: `observer_alert_notifications_total{result="dropped"}`).
`wake(names)` tells a lane there is something new; the lane (an
`observer.background.Worker`) sends its notifier's rows oldest first, each
retried per `observer.retry` (bounded attempts, jittered backoff, Retry-After
honoured; `NotifyError(retryable=False)` is not retried), and deletes each once
sent (or refused for good: a 4xx, a notifier's bug). When the retries of a row
run out (5xx, timeouts, a long Retry-After) the row stays, the lane stops (what
comes after it must not overtake it: a resolve before its page) and `resume()`,
called at every evaluation, starts it again: a receiver that was down gets the
messages at the next evaluation, not after the rule's `repeat`.

`flush(deadline)` waits until every lane is idle. `shutdown(deadline)` flushes,
then stops the lanes by the same deadline: waits are cut short, no new attempt
starts, and what is left waits in the outbox for the next process. It is
idempotent. `send_now()` is the synchronous path of `observer alerts test`.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

import structlog

from observer.alerts.notifiers import Notifier, NotifyError
from observer.background import Deadline, Worker
from observer.retry import call_with_retries
from observer.state.rows import Notification, Outgoing, Queued
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.alerts.delivery")

# A lane with nothing to do still looks for rows this often (a wake lost to a race).
LANE_INTERVAL_S = 30.0


class Outbox(Protocol):
    """Where the lanes read their notifications (`observer.state.alerts.AlertStore`)."""

    def queue(self, outgoing: Sequence[Outgoing], max_queued: int = 1000) -> Counter[str]: ...

    def next_notification(self, notifier: str) -> Queued | None: ...

    def delivered(self, queued_id: int) -> None: ...

    def failed(self, queued_id: int, error: str) -> None: ...

    def waiting(self, notifier: str | None = None) -> int: ...

    def thread(self, notifier: str, incident: str) -> str | None: ...

    def remember_thread(self, notifier: str, incident: str, ref: str, at: float) -> None: ...


class NothingQueued:
    """An outbox that holds nothing: for a Delivery that only sends now (`alerts test`)."""

    def queue(self, outgoing: Sequence[Outgoing], max_queued: int = 1000) -> Counter[str]:
        return Counter(o.notifier for o in outgoing)  # none kept: each one dropped

    def next_notification(self, notifier: str) -> Queued | None:
        return None

    def delivered(self, queued_id: int) -> None:
        pass

    def failed(self, queued_id: int, error: str) -> None:
        pass

    def waiting(self, notifier: str | None = None) -> int:
        return 0

    def thread(self, notifier: str, incident: str) -> str | None:
        return None

    def remember_thread(self, notifier: str, incident: str, ref: str, at: float) -> None:
        pass


class _Lane:
    """One notifier's rows in the outbox, oldest first, sent by one `Worker`; stopped
    after a row's retries ran out until `wake(resume=True)`."""

    def __init__(self, delivery: Delivery, name: str, notifier: Notifier) -> None:
        self.delivery = delivery
        self.name = name
        self.notifier = notifier
        self.cond = threading.Condition()
        self.unread = False  # rows may be waiting that the lane has not looked for (a wake)
        self.paused = False
        self.busy = False
        self.worker = Worker(
            f"observer-notifier-{name}",
            self.step,
            interval_s=LANE_INTERVAL_S,
            crash_event="alert_notification_worker_failed",
            stopping=delivery.stopping,
        )

    def wake(self, resume: bool = False) -> None:
        with self.cond:
            self.unread = True
            if resume:
                self.paused = False
            self.cond.notify_all()
        self.worker.start()
        self.worker.wake()

    def step(self) -> bool:
        """Send the oldest row; True when the lane should look for the next one at once."""
        queued = self._take()
        if queued is None:
            return False
        stop = True
        try:
            stop = self.delivery.send_queued(self.name, self.notifier, queued)
        finally:
            self._done(stop=stop)
        return not stop

    def _take(self) -> Queued | None:
        with self.cond:
            if not self.unread or self.paused or self.delivery.stopping.is_set():
                return None
            try:
                found = self.delivery.outbox.next_notification(self.name)
            except Exception:  # the state file failed us: try at the next evaluation
                log.exception("alert_outbox_unreadable", notifier=self.name)
                self.paused = True
                self.cond.notify_all()
                return None
            if found is None:
                self.unread = False
                self.cond.notify_all()  # idle: a flush waiting for it may return
                return None
            self.busy = True
            return found

    def _done(self, *, stop: bool) -> None:
        with self.cond:
            self.busy = False
            self.unread = True
            self.paused = self.paused or stop
            self.cond.notify_all()

    def wait_idle(self, deadline: Deadline) -> bool:
        """Until nothing is in flight and the lane has nothing to do; True when no row is
        left (a stopped lane with rows returns False at once)."""
        with self.cond:
            while self.busy or (
                self.unread and not self.paused and not self.delivery.stopping.is_set()
            ):
                if deadline.passed:
                    return False
                self.cond.wait(deadline.left())
        return self.delivery.outbox.waiting(self.name) == 0


class Delivery:
    def __init__(
        self,
        notifiers: Mapping[str, Notifier],
        metrics: Metrics,
        outbox: Outbox,
        *,
        max_attempts: int = 4,
        base_s: float = 1.0,
        max_backoff_s: float = 60.0,
        queue_size: int = 1000,
        max_retry_after_s: float = 300.0,
    ) -> None:
        """`max_retry_after_s`: a longer Retry-After fails the message at once (waiting that
        long would hold up every later message of the notifier)."""
        if max_attempts < 1 or queue_size < 1:
            raise ValueError("max_attempts and queue_size must be at least 1")
        self.outbox = outbox
        self.notifiers = dict(notifiers)
        self.stopping = threading.Event()  # cuts retry waits short; no attempt starts after
        self._lanes = {name: _Lane(self, name, n) for name, n in notifiers.items()}
        self._queue_size = queue_size
        self._metrics = metrics
        self._max_attempts = max_attempts
        self._base_s = base_s
        self._max_backoff_s = max_backoff_s
        self._max_retry_after_s = max_retry_after_s
        self._lock = threading.Lock()
        self._shutdown_result: bool | None = None
        self.ended = True  # after a shutdown: whether every lane's thread ended

    # -- the engine's side ----------------------------------------------------

    @property
    def queue_size(self) -> int:
        """The most notifications waiting per notifier."""
        return self._queue_size

    def known(self, names: Sequence[str], notification: Notification) -> list[str]:
        """The names that are configured notifiers; each other one is counted as a drop."""
        found = []
        for name in names:
            if name in self._lanes:
                found.append(name)
            else:
                self._dropped(name, notification, "unknown_notifier")
        return found

    def wake(self, names: Sequence[str] | None = None) -> None:
        """There are new rows for these notifiers (all, without names)."""
        if self.stopping.is_set():
            return
        for name in self._lanes if names is None else names:
            lane = self._lanes.get(name)
            if lane is not None:
                lane.wake()

    def resume(self) -> None:
        """Start again the lanes a failure stopped (at every evaluation)."""
        if self.stopping.is_set():
            return
        for lane in self._lanes.values():
            lane.wake(resume=True)

    def count_dropped(self, dropped: Mapping[str, int], notification: Notification) -> None:
        """Rows the outbox dropped to stay within its size, counted and logged as drops."""
        for name, n in dropped.items():
            for _ in range(n):
                self._dropped(name, notification, "queue_full")

    def send_now(self, name: str, notification: Notification) -> str | None:
        """Send synchronously, with the same retries; the error text, or None when sent."""
        notifier = self.notifiers.get(name)
        if notifier is None:
            known = ", ".join(sorted(self._lanes)) or "none"
            return f"no notifier named {name!r} (configured: {known})"
        return self._attempt(name, notifier, notification)[0]

    def flush(self, deadline: Deadline) -> bool:
        """Wait until every lane is idle; False at the deadline, and when a receiver left
        rows waiting for the next evaluation."""
        return all([lane.wait_idle(deadline) for lane in self._lanes.values()])

    def shutdown(self, deadline: Deadline) -> bool:
        """Deliver what can be by `deadline`, then stop the lanes by it.

        True when nothing was left undelivered and every lane ended. A second call
        returns at once (with the first call's result, or False while it still runs).
        """
        with self._lock:
            if self.stopping.is_set():
                return bool(self._shutdown_result)
        flushed = self.flush(deadline)
        self.stopping.set()
        ended = self.ended = all([lane.worker.stop(deadline) for lane in self._lanes.values()])
        for notifier in self.notifiers.values():
            close = getattr(notifier, "close", None)
            if callable(close):
                close()
        left = self.outbox.waiting()
        if left:
            log.warning("alert_notifications_kept", waiting=left, until="the next start")
        self._shutdown_result = flushed and ended and left == 0
        return self._shutdown_result

    # -- the lanes' side ------------------------------------------------------

    def send_queued(self, name: str, notifier: Notifier, queued: Queued) -> bool:
        """One row sent (or dropped for good); True when the lane must stop after it. A
        message of an incident carries the receiver's id of the incident's first message
        there (`thread`), and a first message's id is kept for the ones after it."""
        notification = queued.notification
        incident = notification.incident.id if notification.incident is not None else None
        if incident is not None:
            notification = replace(notification, thread=self.outbox.thread(name, incident))
        error, keep, posted = self._attempt(name, notifier, notification)
        if posted is not None and incident is not None and notification.thread is None:
            self.outbox.remember_thread(name, incident, posted, notification.sent_at.timestamp())
        if error is None or not keep:
            self.outbox.delivered(queued.id)
            return False
        if not self.stopping.is_set():
            self.outbox.failed(queued.id, error)
        return True  # cut short by the shutdown: it waits for the next process

    def _attempt(
        self, name: str, notifier: Notifier, notification: Notification
    ) -> tuple[str | None, bool, str | None]:
        """Send with retries: (the error, or None when sent; whether another try later
        could succeed; the receiver's id of the message, when it gives one)."""

        posted: list[str | None] = [None]

        def attempt() -> None:
            posted[0] = notifier.send(notification)

        def on_retry(attempt_number: int, error: Exception, wait_s: float) -> None:
            log.info(
                "alert_notification_retried",
                notifier=name,
                rule=notification.rule,
                attempt=attempt_number,
                wait_s=round(wait_s, 2),
                error=_describe(error),
            )

        try:
            call_with_retries(
                attempt,
                attempts=self._max_attempts,
                base_s=self._base_s,
                max_s=self._max_backoff_s,
                retryable=_retryable,
                retry_after=_retry_after,
                max_retry_after_s=self._max_retry_after_s,
                should_stop=self.stopping.is_set,
                sleep=self.stopping.wait,
                on_retry=on_retry,
            )
        except Exception as error:
            text = _describe(error)
            keep = _retryable(error)
            self._metrics.alert_notifications.labels(notifier=name, result="failed").inc()
            log.error(
                "alert_notification_failed",
                notifier=name,
                rule=notification.rule,
                state=notification.state,
                dedup_key=notification.dedup_key,
                error=text,
                kept=keep,  # in the outbox, tried again at the next evaluation
            )
            return text, _retryable(error), None
        self._metrics.alert_notifications.labels(notifier=name, result="sent").inc()
        log.info(
            "alert_notification_sent",
            notifier=name,
            rule=notification.rule,
            state=notification.state,
            dedup_key=notification.dedup_key,
        )
        return None, False, posted[0]

    def _dropped(self, name: str, notification: Notification, reason: str) -> None:
        """Count every drop; the log line is limited by `telemetry.logging.limit_repeats`."""
        self._metrics.alert_notifications.labels(notifier=name, result="dropped").inc()
        log.warning(
            "alert_notification_dropped", notifier=name, reason=reason, rule=notification.rule
        )


def _retryable(error: Exception) -> bool:
    # Anything but a NotifyError is a bug in the notifier: another try would hit it again.
    return isinstance(error, NotifyError) and error.retryable


def _retry_after(error: Exception) -> float | None:
    return error.retry_after_s if isinstance(error, NotifyError) else None


def _describe(error: Exception) -> str:
    """The error for a log line. A notifier's own message holds no secret; another
    exception's message might (a URL, a header), so only its type is told."""
    if isinstance(error, NotifyError):
        return str(error)
    return f"{type(error).__name__} raised by the notifier"
