"""Delivery: hands notifications to notifiers without ever blocking the engine.

    engine --submit(names, n)--> [lane "pagerduty": bounded queue -> worker thread] --> PagerDuty
                                 [lane "slack":     bounded queue -> worker thread] --> Slack

One lane per notifier, so a receiver that is down or slow delays only its own
messages. `submit()` returns at once: a message for a full queue is dropped,
as is one for a notifier name the configuration does not have; both counted
(`observer_alert_notifications_total{result="dropped"}`) and logged, at most
once per 10 s per notifier and reason. A worker sends its messages in order,
each retried per `observer.retry` (bounded attempts, jittered backoff,
Retry-After honoured; `NotifyError(retryable=False)` is not retried), then
counts it `sent` or `failed` (and logs `alert_notification_failed` with the
error, which holds no secret). A worker never dies of a notifier's error.

`flush(timeout_s)` waits until every queue is empty and idle.
`shutdown(timeout_s)` flushes within the budget, then stops: waits are cut
short, no new attempt starts, whatever is still queued is dropped and
counted; it is idempotent. `send_now()` is the synchronous path of
`observer alerts test`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence

import structlog

from observer.alerts.model import Notification
from observer.alerts.notifiers import Notifier, NotifyError
from observer.retry import call_with_retries
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.alerts.delivery")

DROP_LOG_INTERVAL_S = 10.0


class _Lane:
    """One notifier's bounded queue; its worker thread is started on the first message."""

    def __init__(self, name: str, notifier: Notifier, capacity: int) -> None:
        self.name = name
        self.notifier = notifier
        self.capacity = capacity
        self.cond = threading.Condition()
        self.items: deque[Notification] = deque()
        self.busy = False  # a message is being sent (or waits for its next attempt)
        self.closed = False
        self.thread: threading.Thread | None = None

    def offer(self, notification: Notification) -> bool:
        with self.cond:
            if self.closed or len(self.items) >= self.capacity:
                return False
            self.items.append(notification)
            self.cond.notify_all()
            return True

    def take(self) -> Notification | None:
        """The next message (marking the lane busy), or None once the lane is closed."""
        with self.cond:
            while not self.items and not self.closed:
                self.cond.wait()
            if self.closed:
                return None
            self.busy = True
            return self.items.popleft()

    def done(self) -> None:
        with self.cond:
            self.busy = False
            self.cond.notify_all()

    def wait_idle(self, deadline: float) -> bool:
        with self.cond:
            while self.items or self.busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cond.wait(remaining)
            return True

    def close(self) -> list[Notification]:
        """Stop the worker after its current message; returns what was still queued."""
        with self.cond:
            self.closed = True
            left = list(self.items)
            self.items.clear()
            self.cond.notify_all()
            return left


class Delivery:
    def __init__(
        self,
        notifiers: Mapping[str, Notifier],
        metrics: Metrics,
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
        self._lanes = {name: _Lane(name, n, queue_size) for name, n in notifiers.items()}
        self._metrics = metrics
        self._max_attempts = max_attempts
        self._base_s = base_s
        self._max_backoff_s = max_backoff_s
        self._max_retry_after_s = max_retry_after_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._shutdown_started = False
        self._shutdown_result: bool | None = None
        self._drop_logged: dict[tuple[str, str], tuple[float, int]] = {}

    # -- the engine's side ----------------------------------------------------

    def submit(self, names: Sequence[str], notification: Notification) -> None:
        """Queue `notification` for each named notifier. Never blocks, never raises."""
        for name in names:
            lane = self._lanes.get(name)
            if lane is None:
                self._dropped(name, notification, "unknown_notifier")
            elif self._stop.is_set() or self._shutdown_started:
                self._dropped(name, notification, "shut_down")
            elif not lane.offer(notification):
                self._dropped(name, notification, "queue_full")
            else:
                self._start(lane)

    def send_now(self, name: str, notification: Notification) -> str | None:
        """Send synchronously, with the same retries; the error text, or None when sent."""
        lane = self._lanes.get(name)
        if lane is None:
            known = ", ".join(sorted(self._lanes)) or "none"
            return f"no notifier named {name!r} (configured: {known})"
        return self._deliver(lane.name, lane.notifier, notification)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queue is empty and no message is in flight; False on timeout."""
        deadline = time.monotonic() + timeout_s
        return all([lane.wait_idle(deadline) for lane in self._lanes.values()])

    def shutdown(self, timeout_s: float) -> bool:
        """Deliver what can be within `timeout_s`, then stop the workers.

        True when nothing was left undelivered. A second call returns at once
        (with the first call's result, or False while it is still running).
        """
        with self._lock:
            if self._shutdown_started:
                return bool(self._shutdown_result)
            self._shutdown_started = True
        deadline = time.monotonic() + timeout_s
        flushed = self.flush(timeout_s)
        self._stop.set()  # cuts retry waits short; no attempt starts after this
        for lane in self._lanes.values():
            left = lane.close()
            for notification in left:
                self._dropped(lane.name, notification, "shut_down")
            flushed = flushed and not left
        for lane in self._lanes.values():
            if lane.thread is not None:
                # An attempt in flight ends within its notifier's timeout; wait a little for it.
                lane.thread.join(timeout=max(0.1, deadline - time.monotonic()))
            close = getattr(lane.notifier, "close", None)
            if callable(close):
                close()
        self._shutdown_result = flushed
        return flushed

    # -- the workers' side ----------------------------------------------------

    def _start(self, lane: _Lane) -> None:
        with self._lock:
            if lane.thread is None and not self._shutdown_started:
                lane.thread = threading.Thread(
                    target=self._work,
                    args=(lane,),
                    name=f"observer-notifier-{lane.name}",
                    daemon=True,
                )
                lane.thread.start()

    def _work(self, lane: _Lane) -> None:
        while (notification := lane.take()) is not None:
            try:
                self._deliver(lane.name, lane.notifier, notification)
            except Exception:  # the worker never dies; the message was counted or is lost here
                log.exception("alert_notification_worker_failed", notifier=lane.name)
            finally:
                lane.done()

    def _deliver(self, name: str, notifier: Notifier, notification: Notification) -> str | None:
        def attempt() -> None:
            notifier.send(notification)

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
                should_stop=self._stop.is_set,
                sleep=self._stop.wait,
                on_retry=on_retry,
            )
        except Exception as error:
            text = _describe(error)
            self._metrics.alert_notifications.labels(notifier=name, result="failed").inc()
            log.error(
                "alert_notification_failed",
                notifier=name,
                rule=notification.rule,
                state=notification.state,
                dedup_key=notification.dedup_key,
                error=text,
            )
            return text
        self._metrics.alert_notifications.labels(notifier=name, result="sent").inc()
        log.info(
            "alert_notification_sent",
            notifier=name,
            rule=notification.rule,
            state=notification.state,
            dedup_key=notification.dedup_key,
        )
        return None

    def _dropped(self, name: str, notification: Notification, reason: str) -> None:
        """Count every drop; log the first, then at most one line (with a count) per interval."""
        self._metrics.alert_notifications.labels(notifier=name, result="dropped").inc()
        key = (name, reason)
        now = time.monotonic()
        with self._lock:
            last, unlogged = self._drop_logged.get(key, (-DROP_LOG_INTERVAL_S, 0))
            if now - last < DROP_LOG_INTERVAL_S:
                self._drop_logged[key] = (last, unlogged + 1)
                return
            self._drop_logged[key] = (now, 0)
        log.warning(
            "alert_notification_dropped",
            notifier=name,
            reason=reason,
            rule=notification.rule,
            dropped=unlogged + 1,
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
