"""Notifiers: one file each, thin I/O that formats a `Notification` and sends it.

Every notifier raises `NotifyError` (never a third-party exception) when a
message could not be delivered; the message of the error never holds a secret.
Retries, backoff and threading live in `observer.alerts.delivery`, not here.

How each notifier's test alert (`observer alerts test`) ends is its class
attribute `test_end` (`observer.alerts.notifiers.trial` sends it):

    alertmanager   "expires"   one post, `endsAt` a few seconds on: it ends by itself
    pagerduty      "resolve"   a trigger, then a resolve with the same dedup_key
    webhook        "resolve"   a firing message, then a resolved one (same dedup_key)
    slack          "nothing"   one message headed TEST: a channel has nothing to close
"""

from __future__ import annotations

from typing import Literal, Protocol

from observer.state.rows import Notification

TestEnd = Literal["expires", "resolve", "nothing"]


class NotifyError(Exception):
    """A notification was not delivered. `retryable` is False for a 4xx other than 429."""

    def __init__(self, message: str, *, retryable: bool = True, retry_after_s: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class Notifier(Protocol):
    name: str
    kind: str

    def send(self, notification: Notification) -> str | None:
        """Deliver one notification, or raise NotifyError. A notifier that threads returns
        the receiver's id of an incident's first message (Slack's `ts`): the delivery
        keeps it, and hands it back as `Notification.thread` with the incident's later
        messages; the others return None."""
        ...
