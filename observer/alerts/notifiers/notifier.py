"""What a notifier is (the protocol, its error, how its test alert ends)."""

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
