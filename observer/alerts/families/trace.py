"""Trace rules: a condition on one trace, notified at once, capped per hour, then a digest.

- `TraceRules.step(now, rows)`: `rows` are the history rows just written: a scored
  trace's, as the scorer wrote it (with what the resolver found), or one the judge's
  values joined. A trace notifies a rule at most once, ever, at most `max_per_hour`
  an hour; the rest wait for the hour's digest. While the judge is unhealthy an alert
  on a judge signal is held (nobody is paged on a judge not trusted now).
- In a fleet (`SharedTraceRules`, observer.fleet.alerts) a trace is raised once per
  fleet and the hourly cap counts the whole fleet's traces.
- `Digests.step(now, rows)`: each hour past, the traces it kept, in one message.

Trace rules and digests are not correlated into incidents: each trace stands alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol

import structlog

from observer.alerts.announce import Message
from observer.alerts.engine import Example
from observer.alerts.families import Options, Rows
from observer.alerts.messages import digest_notification, trace_notification
from observer.alerts.rules import JUDGE_SIGNALS, TraceRule
from observer.alerts.sender import Sender
from observer.state import State
from observer.state.rows import Outgoing, Row
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.alerts")


def hour_of(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H")


class SharedTraceRules(Protocol):
    """A fleet's trace rules (observer.fleet.alerts.FleetAlerts): a trace raised once per
    fleet, the hourly caps counted for all members."""

    def admit(self, rule: str, trace_id: str, hour: str, max_per_hour: int) -> str:
        """Whether this member raises the trace ("notify"), keeps it for the digest
        ("over": the fleet's hourly cap is reached), leaves it to the member that raised
        it ("duplicate"), or decides alone ("unknown": Redis cannot say)."""
        ...

    def confirm(self, rule: str, trace_id: str) -> None:
        """The trace is recorded as raised here: the claim `admit` took holds."""
        ...

    def release(self, rule: str, trace_id: str, hour: str) -> None:
        """Recording it failed: the claim and the hour's count given back."""
        ...


class TraceRules:
    name = "trace rules"

    def __init__(
        self,
        rules: Sequence[TraceRule],
        sender: Sender,
        metrics: Metrics,
        options: Options,
        *,
        judge_unhealthy: Callable[[], bool] = lambda: False,
        shared: SharedTraceRules | None = None,
    ) -> None:
        """`shared`, a fleet's trace rules: whether this member raises a trace, keeps it
        for the digest, or leaves it to the member that raised it; its claim is confirmed
        once the state file records the trace as raised, and released when that fails."""
        self.rules = tuple(rules)
        self.sender = sender
        self.metrics = metrics
        self.options = options
        self.judge_unhealthy = judge_unhealthy
        self.shared = shared
        for rule in self.rules:
            for result in ("notified", "digest", "held"):
                metrics.trace_alerts.labels(rule=rule.name, result=result)

    def step(self, now: datetime, rows: Sequence[Row]) -> list[Outgoing]:
        out: list[Outgoing] = []
        for row in rows:
            if row.trace_id is not None:
                out.extend(self.check(row, now))
        self.sender.wake(out)
        return out

    def check(self, row: Row, now: datetime) -> list[Outgoing]:
        assert row.trace_id is not None
        labels = {key: row.label(key) for rule in self.rules for key, _ in rule.where}
        out: list[Outgoing] = []
        for rule in self.rules:
            if not rule.matches(row.values, labels):
                continue
            if rule.expression.signal in JUDGE_SIGNALS and self.judge_unhealthy():
                # The judge that flagged it is not trusted now: nobody is paged for it.
                log.warning("trace_alert_held", rule=rule.name, trace_id=row.trace_id)
                self.metrics.trace_alerts.labels(rule=rule.name, result="held").inc()
                continue
            out.extend(self._raise(rule, row, now))
        return out

    def _raise(self, rule: TraceRule, row: Row, now: datetime) -> list[Outgoing]:
        assert row.trace_id is not None
        hour = hour_of(now)
        cap = rule.max_per_hour
        example = Example(row.trace_id, row.project_id, 1.0)
        names = self.sender.routing.targets(rule.notify)
        message = Message(names, trace_notification(rule, row, self.options.base_url, now))
        claimed = False  # a fleet's claim on this trace, taken last before the commit
        if self.shared is not None:
            shared = self.shared.admit(rule.name, row.trace_id, hour, cap)
            if shared == "duplicate":
                return []  # another member of the fleet raised it for this trace
            if shared == "over":
                cap = 0  # the fleet notified its hour's worth: kept for the digest
            claimed = shared in ("notify", "over")
        committed = False
        try:
            admitted, queued = self.sender.admit(
                rule.name, row.trace_id, hour, row.at, example, cap, message
            )
            committed = True
        finally:
            if claimed and self.shared is not None:
                if committed:
                    self.shared.confirm(rule.name, row.trace_id)
                else:  # raised when the trace is checked again, by whichever member
                    self.shared.release(rule.name, row.trace_id, hour)
        if admitted == "notify":
            self.metrics.trace_alerts.labels(rule=rule.name, result="notified").inc()
        elif admitted == "suppressed":
            self.metrics.trace_alerts.labels(rule=rule.name, result="digest").inc()
        return queued


class Digests:
    """The trace rules' hourly digests: each hour past whose kept traces were not summed
    up yet, in one message (the rows are not read: the state file keeps the hours)."""

    name = "digests"

    def __init__(
        self, rules: Sequence[TraceRule], state: State, sender: Sender, options: Options
    ) -> None:
        self.rules = {r.name: r for r in rules}
        self.state = state
        self.sender = sender
        self.options = options

    def step(self, now: datetime, rows: Rows | None = None) -> list[Outgoing]:
        out: list[Outgoing] = []
        for digest in self.state.alerts.due_digests(hour_of(now)):
            rule = self.rules.get(digest.rule)
            outgoing: list[Outgoing] = []
            if rule is not None:
                log.warning("trace_alert_digest", rule=rule.name, traces=digest.suppressed)
                notification = digest_notification(
                    rule,
                    digest.hour,
                    digest.suppressed,
                    digest.examples,
                    self.options.base_url,
                    now,
                )
                names = self.sender.routing.targets(rule.notify)
                outgoing = self.sender.outgoing(Message(names, notification))
            self.state.alerts.mark_digested(digest, outgoing, self.sender.max_queued)
            out.extend(outgoing)
        self.sender.wake(out)
        return out
