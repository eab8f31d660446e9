"""The values alerting passes around: what a notifier is asked to say.

A `Notification` is built by the pure engine (window rules), by the trace-rule
evaluator (one bad trace, or an hourly digest) or by `observer alerts test`,
and handed to every notifier the rule names. Notifiers only format and send it.
On its way it waits in the state file's outbox: `Outgoing` is what is
written there (with the decision that made it, in one transaction), `Queued`
what a notifier's lane reads back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

Severity = Literal["warn", "page"]
NotificationKind = Literal["window", "trace", "digest", "test"]
NotificationState = Literal["firing", "resolved"]


@dataclass(frozen=True, slots=True)
class Notification:
    """One message about one alert (a rule and one group of it).

    `dedup_key` is stable for a rule and group across messages and restarts
    (PagerDuty's `dedup_key`, Alertmanager's label set); `id` is unique per
    message (the Standard Webhooks `webhook-id`). `group` holds the group's
    labels in `group_by` order, e.g. (("environment", "production"),
    ("query_type", "billing")). `trace_urls` links up to 5 example traces in
    Langfuse, worst first.
    """

    id: str
    dedup_key: str
    rule: str
    kind: NotificationKind
    state: NotificationState
    severity: Severity
    group: tuple[tuple[str, str], ...]
    summary: str
    description: str
    started_at: datetime
    sent_at: datetime
    ended_at: datetime | None = None
    signal: str | None = None
    aggregate: str | None = None
    value: float | None = None
    op: str | None = None
    threshold: float | None = None
    window_s: float | None = None
    samples: int | None = None
    trace_urls: tuple[str, ...] = ()
    runbook_url: str | None = None

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.group)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A notification for one notifier, to be written to the state file's outbox.

    `supersede`: a newer message with the same key replaces one still waiting
    (Alertmanager's re-posts of a firing alert: only the latest is worth sending).
    """

    notifier: str
    notification: Notification
    supersede: str | None = None


@dataclass(frozen=True, slots=True)
class Queued:
    """A notification waiting in the outbox (oldest first per notifier, by `id`)."""

    id: int
    notifier: str
    notification: Notification
    attempts: int = 0
