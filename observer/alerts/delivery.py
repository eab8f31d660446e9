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

Durable lanes (`use_outbox(outbox)`, what the daemon's alert service uses):
the lane's queue is the state file's outbox, where the engine wrote each
notification in the transaction that decided it. `wake(names)` tells a lane
there is something new; the lane sends its notifier's rows oldest first and
deletes each once sent (or refused for good: a 4xx, a notifier's bug). When
the retries of a row run out (5xx, timeouts, a long Retry-After) the row
stays, the lane stops (what comes after it must not overtake it: a resolve
before its page) and `resume()`, called at every evaluation, starts it
again: a receiver that was down gets the messages at the next evaluation,
not after the rule's `repeat`. `shutdown` drops nothing there: what is left
waits in the outbox for the next process.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from typing import Protocol

import structlog

from observer.alerts.notifiers import Notifier, NotifyError
from observer.retry import call_with_retries
from observer.state.rows import Notification, Outgoing, Queued
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.alerts.delivery")

DROP_LOG_INTERVAL_S = 10.0


class Outbox(Protocol):
    """Where durable lanes read their notifications (`observer.state.alerts.AlertStore`)."""

    def queue(self, outgoing: Sequence[Outgoing], max_queued: int = 1000) -> Counter[str]: ...

    def next_notification(self, notifier: str) -> Queued | None: ...

    def delivered(self, queued_id: int) -> None: ...

    def failed(self, queued_id: int, error: str) -> None: ...

    def waiting(self, notifier: str | None = None) -> int: ...


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


class _OutboxLane:
    """One notifier's rows in the outbox, oldest first; stopped after a row's retries ran
    out until `resume()`."""

    def __init__(self, name: str, notifier: Notifier, outbox: Outbox) -> None:
        self.name = name
        self.notifier = notifier
        self.outbox = outbox
        self.cond = threading.Condition()
        self.unread = True  # rows may be waiting that the lane has not looked for
        self.paused = False
        self.busy = False
        self.closed = False
        self.thread: threading.Thread | None = None

    def wake(self, resume: bool = False) -> None:
        with self.cond:
            self.unread = True
            if resume:
                self.paused = False
            self.cond.notify_all()

    def take(self) -> Queued | None:
        """The oldest row (marking the lane busy), or None once the lane is closed."""
        with self.cond:
            while not self.closed:
                if self.unread and not self.paused:
                    try:
                        found = self.outbox.next_notification(self.name)
                    except Exception:  # the state file failed us: try at the next evaluation
                        log.exception("alert_outbox_unreadable", notifier=self.name)
                        self.paused = True
                        self.cond.notify_all()
                        continue
                    if found is not None:
                        self.busy = True
                        return found
                    self.unread = False
                    self.cond.notify_all()  # idle: a flush waiting for it may return
                self.cond.wait()
            return None

    def done(self, *, stop: bool) -> None:
        with self.cond:
            self.busy = False
            self.unread = True
            self.paused = self.paused or stop
            self.cond.notify_all()

    def wait_idle(self, deadline: float) -> bool:
        """Until nothing is in flight and the lane has nothing to do; True when no row is
        left (a stopped lane with rows returns False at once)."""
        with self.cond:
            while self.busy or (self.unread and not self.paused and not self.closed):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cond.wait(remaining)
        return self.outbox.waiting(self.name) == 0

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


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
        self._durable: dict[str, _OutboxLane] = {}
        self._outbox: Outbox | None = None
        self._queue_size = queue_size
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

    @property
    def durable(self) -> bool:
        return self._outbox is not None

    @property
    def queue_size(self) -> int:
        """The most notifications waiting per notifier."""
        return self._queue_size

    def use_outbox(self, outbox: Outbox) -> None:
        """From now on every lane sends from `outbox` (before the first message)."""
        with self._lock:
            if any(lane.thread is not None for lane in self._lanes.values()):
                raise RuntimeError("use_outbox() must come before the first message")
            self._outbox = outbox
            self._durable = {
                name: _OutboxLane(name, lane.notifier, outbox) for name, lane in self._lanes.items()
            }

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
        """Durable lanes: there are new rows for these notifiers (all, without names)."""
        for name in self._durable if names is None else names:
            lane = self._durable.get(name)
            if lane is not None:
                lane.wake()
                self._start(lane)

    def resume(self) -> None:
        """Durable lanes: start again the lanes a failure stopped (at every evaluation)."""
        for lane in self._durable.values():
            lane.wake(resume=True)
            self._start(lane)

    def count_dropped(self, dropped: Mapping[str, int], notification: Notification) -> None:
        """Rows the outbox dropped to stay within its size, counted and logged as drops."""
        for name, n in dropped.items():
            for _ in range(n):
                self._dropped(name, notification, "queue_full")

    def submit(self, names: Sequence[str], notification: Notification) -> None:
        """Queue `notification` for each named notifier. Never blocks, never raises (a
        durable Delivery writes it to the outbox)."""
        if self._outbox is not None:
            known = self.known(names, notification)
            outgoing = [Outgoing(name, notification) for name in known]
            self.count_dropped(self._outbox.queue(outgoing, self._queue_size), notification)
            self.wake(known)
            return
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
        """Wait until every queue is empty and no message is in flight; False on timeout
        (and, for durable lanes, when a receiver left rows waiting for the next evaluation)."""
        deadline = time.monotonic() + timeout_s
        if self._outbox is not None:
            return all([lane.wait_idle(deadline) for lane in self._durable.values()])
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
        if self._outbox is not None:
            flushed = self._shutdown_durable(deadline) and flushed
            self._shutdown_result = flushed
            return flushed
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

    def _shutdown_durable(self, deadline: float) -> bool:
        for durable in self._durable.values():
            durable.close()
        for durable in self._durable.values():
            if durable.thread is not None:
                durable.thread.join(timeout=max(0.1, deadline - time.monotonic()))
        for lane in self._lanes.values():
            close = getattr(lane.notifier, "close", None)
            if callable(close):
                close()
        assert self._outbox is not None
        left = self._outbox.waiting()
        if left:
            log.warning("alert_notifications_kept", waiting=left, until="the next start")
        return left == 0

    # -- the workers' side ----------------------------------------------------

    def _start(self, lane: _Lane | _OutboxLane) -> None:
        with self._lock:
            if lane.thread is None and not self._shutdown_started:
                target = self._work if isinstance(lane, _Lane) else self._work_durable
                lane.thread = threading.Thread(
                    target=target,
                    args=(lane,),
                    name=f"observer-notifier-{lane.name}",
                    daemon=True,
                )
                lane.thread.start()

    def _work_durable(self, lane: _OutboxLane) -> None:
        while (queued := lane.take()) is not None:
            stop = False
            try:
                error, keep = self._attempt(lane.name, lane.notifier, queued.notification)
                if error is None or not keep:
                    lane.outbox.delivered(queued.id)
                elif not self._stop.is_set():
                    lane.outbox.failed(queued.id, error)
                    stop = True
                else:
                    stop = True  # cut short by the shutdown: it waits for the next process
            except Exception:  # the worker never dies; the row stays for the next evaluation
                log.exception("alert_notification_worker_failed", notifier=lane.name)
                stop = True
            finally:
                lane.done(stop=stop)

    def _work(self, lane: _Lane) -> None:
        while (notification := lane.take()) is not None:
            try:
                self._deliver(lane.name, lane.notifier, notification)
            except Exception:  # the worker never dies; the message was counted or is lost here
                log.exception("alert_notification_worker_failed", notifier=lane.name)
            finally:
                lane.done()

    def _deliver(self, name: str, notifier: Notifier, notification: Notification) -> str | None:
        return self._attempt(name, notifier, notification)[0]

    def _attempt(
        self, name: str, notifier: Notifier, notification: Notification
    ) -> tuple[str | None, bool]:
        """Send with retries: (the error, or None when sent; whether another try later
        could succeed)."""

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
            keep = self._outbox is not None and _retryable(error)
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
            return text, _retryable(error)
        self._metrics.alert_notifications.labels(notifier=name, result="sent").inc()
        log.info(
            "alert_notification_sent",
            notifier=name,
            rule=notification.rule,
            state=notification.state,
            dedup_key=notification.dedup_key,
        )
        return None, False

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
