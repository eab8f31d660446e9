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

from observer.alerts.notifiers.notifier import (
    Notifier,
    NotifyError,
    TestEnd,
)

__all__ = ["Notifier", "NotifyError", "TestEnd"]
