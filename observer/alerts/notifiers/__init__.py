"""Notifiers: one file each, thin I/O that formats a `Notification` and sends it.

Every notifier raises `NotifyError` (never a third-party exception) when a
message could not be delivered; the message of the error never holds a secret.
Retries, backoff and threading live in `observer.alerts.delivery`, not here.
"""

from __future__ import annotations

from typing import Protocol

from observer.alerts.model import Notification


class NotifyError(Exception):
    """A notification was not delivered. `retryable` is False for a 4xx other than 429."""

    def __init__(self, message: str, *, retryable: bool = True, retry_after_s: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class Notifier(Protocol):
    name: str
    kind: str

    def send(self, notification: Notification) -> None:
        """Deliver one notification, or raise NotifyError."""
        ...
