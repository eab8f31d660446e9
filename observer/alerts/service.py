"""Alerting in the daemon: history in, rules evaluated, notifications out. Thin I/O.

- Every scored trace is checked against the trace rules at once (and again
  when the judge's values arrive); a trace notifies a rule at most once, at
  most `max_per_hour` an hour, the rest in an hourly digest.
- `evaluate()` runs after every pass (and once at the end of `run --once`):
  each window rule is brought up to its evaluation point (the watermark, or
  the clock for the daemon's own samples) by the pure engine, its state saved,
  and what a person must know handed to the notifiers, which never block.
- While an alert fires, Alertmanager receivers get it again after every
  evaluation, so it never times out there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog

from observer.alerts.delivery import Delivery
from observer.alerts.engine import (
    AlertEvent,
    AlertState,
    Evaluation,
    Example,
    GroupKey,
    Row,
    evaluation_points,
    replay,
)
from observer.alerts.history import judge_values, signal_values, trace_row
from observer.alerts.messages import (
    digest_notification,
    trace_notification,
    window_notification,
)
from observer.alerts.model import Notification
from observer.alerts.rules import TraceRule, WindowRule
from observer.judge.outcome import JudgeResult
from observer.model import RagRecord, Signals
from observer.state import State
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.alerts")


def hour_of(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H")


@dataclass(frozen=True, slots=True)
class RuleStatus:
    """One rule and group as `observer alerts status` shows it."""

    rule: WindowRule
    group: GroupKey
    state: AlertState
    at: float


class AlertService:
    def __init__(
        self,
        state: State,
        metrics: Metrics,
        rules: Sequence[WindowRule],
        trace_rules: Sequence[TraceRule],
        *,
        notifier_kinds: Mapping[str, str],
        delivery: Delivery | None,
        base_url: str,
        max_groups: int = 50,
        history_days: float = 8.0,
        step_s: float = 60.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.state = state
        self.metrics = metrics
        self.rules = tuple(rules)
        self.trace_rules = tuple(trace_rules)
        self.notifier_kinds = dict(notifier_kinds)
        self.delivery = delivery
        self.base_url = base_url
        self.max_groups = max_groups
        self.history_days = history_days
        self.step_s = step_s
        self.clock = clock
        self._dropped_seen = self._dropped_total()
        metrics.notifiers_known(self.notifier_kinds)
        for rule in self.rules:
            for outcome in ("ok", "pending", "firing"):
                metrics.alert_evaluations.labels(rule=rule.name, outcome=outcome)

    # -- targets ------------------------------------------------------------------

    def targets(self, notify: Sequence[str]) -> list[str]:
        """The notifiers a rule names; all of them when it names none."""
        return list(notify) or list(self.notifier_kinds)

    def _send(self, names: Sequence[str], notification: Notification) -> None:
        if self.delivery is not None and names:
            self.delivery.submit(names, notification)

    # -- per trace ----------------------------------------------------------------

    def scored(self, record: RagRecord, signals: Signals) -> None:
        """A trace's scores are in the outbox (its history row with them): trace rules."""
        self.check_trace(trace_row(record, signal_values(signals), self.clock()))

    def judged(self, record: RagRecord, result: JudgeResult) -> None:
        """The judge's values join the trace's row; trace rules see them at once."""
        row = self.state.history.merge(record.trace_id, judge_values(result))
        if row is not None:
            self.check_trace(row)

    def check_trace(self, row: Row) -> None:
        if row.trace_id is None:
            return
        labels = {"environment": row.environment, "query_type": row.query_type}
        now = self.clock()
        for rule in self.trace_rules:
            if not rule.matches(row.values, labels):
                continue
            example = Example(row.trace_id, row.project_id, 1.0)
            admitted = self.state.alerts.admit(
                rule.name, row.trace_id, hour_of(now), row.at, example, rule.max_per_hour
            )
            if admitted == "duplicate":
                continue
            log.warning(
                "trace_alert_raised",
                rule=rule.name,
                trace_id=row.trace_id,
                environment=row.environment,
                query_type=row.query_type,
                sent=admitted == "notify",
            )
            if admitted == "notify":
                self._send(
                    self.targets(rule.notify),
                    trace_notification(rule, row, self.base_url, now),
                )

    # -- the daemon's own samples -------------------------------------------------

    def _dropped_total(self) -> float:
        return self.metrics.total("observer_scores_dropped_total")

    def record_pass(self, now: datetime, lag_s: float) -> None:
        """After a pass: the lag, and the scores dropped since the last pass."""
        dropped = self._dropped_total()
        self.state.history.add_samples(
            now.timestamp(), {"lag_s": lag_s, "scores_dropped": dropped - self._dropped_seen}
        )
        self._dropped_seen = dropped

    # -- window rules -------------------------------------------------------------

    def _points(self, rule: WindowRule, last: float | None, now: datetime) -> list[float]:
        if rule.pipeline:
            target = now.timestamp()
        else:
            watermark = self.state.watermark()
            if watermark is None:
                return []  # no pass has completed: no window is known to be whole
            target = watermark.timestamp()
        return evaluation_points(last, target, self.step_s, rule.for_s + self.step_s)

    def run_rules(
        self,
        stored: Mapping[str, Mapping[GroupKey, AlertState]],
        now: datetime,
    ) -> dict[str, tuple[WindowRule, Evaluation]]:
        """Every rule brought up to its evaluation point from `stored` (nothing saved)."""
        plans: list[tuple[WindowRule, Mapping[GroupKey, AlertState], list[float]]] = []
        for rule in self.rules:
            states = stored.get(rule.name, {})
            last = max((s.evaluated_at for s in states.values() if s.evaluated_at), default=None)
            points = self._points(rule, last, now)
            if points:
                plans.append((rule, states, points))
        if not plans:
            return {}
        start = min(p[0] - r.window_s for r, _, p in plans)
        end = max(p[-1] for _, _, p in plans)
        read = {r.expression.signal for r, _, _ in plans}
        rows = self.state.history.rows(start, end, read)
        return {
            rule.name: (rule, replay(rule, rows, states, points, self.max_groups))
            for rule, states, points in plans
        }

    def evaluate(self, now: datetime | None = None) -> list[AlertEvent]:
        """Evaluate, save the state, notify; the events that happened."""
        now = now or self.clock()
        self.state.alerts.forget_other_rules({r.name for r in self.rules})
        happened: list[AlertEvent] = []
        for rule, result in self.run_rules(self.state.alerts.load(), now).values():
            self.state.alerts.save(rule.name, result.states)
            self._observe(rule, result)
            notified = {e.group for e in result.events if e.notify}
            for event in result.events:
                self._announce(rule, event, now)
            self._refresh(rule, result, notified, now)
            happened.extend(result.events)
        self._digests(now)
        return happened

    def _observe(self, rule: WindowRule, result: Evaluation) -> None:
        if result.capped:
            log.warning("alert_groups_capped", rule=rule.name, left_out=result.capped)
        for group, state in result.states.items():
            self.metrics.alert_evaluations.labels(rule=rule.name, outcome=state.status).inc()
            labels = dict(group)
            for severity in ("warn", "page"):
                self.metrics.alerts_active.labels(
                    rule=rule.name,
                    environment=labels.get("environment", ""),
                    query_type=labels.get("query_type", ""),
                    severity=severity,
                ).set(1 if state.status == "firing" and state.severity == severity else 0)

    def _announce(self, rule: WindowRule, event: AlertEvent, now: datetime) -> None:
        if not event.notify:
            return
        log.warning(
            f"alert_{event.transition}",
            rule=rule.name,
            group=dict(event.group),
            severity=event.severity,
            value=event.value,
            samples=event.samples,
        )
        names = self.targets(rule.notify)
        changed = event.previous_severity and event.previous_severity != event.severity
        if event.transition in ("escalated", "deescalated", "no_data") and changed:
            # Alertmanager knows an alert by its labels, severity among them: close the old one.
            closing = window_notification(
                rule, event, self.base_url, now, state="resolved", severity=event.previous_severity
            )
            self._send([n for n in names if self.notifier_kinds.get(n) == "alertmanager"], closing)
        self._send(names, window_notification(rule, event, self.base_url, now))

    def _refresh(
        self, rule: WindowRule, result: Evaluation, notified: set[GroupKey], now: datetime
    ) -> None:
        names = [
            n for n in self.targets(rule.notify) if self.notifier_kinds.get(n) == "alertmanager"
        ]
        if not names:
            return
        for group, state in result.states.items():
            if state.status != "firing" or group in notified:
                continue
            event = AlertEvent(
                rule=rule.name,
                group=group,
                transition="no_data" if state.no_data_firing else "firing",
                at=state.evaluated_at or now.timestamp(),
                severity=state.severity or "page",
                previous_severity=None,
                value=state.value,
                samples=state.samples,
                since=state.since or now.timestamp(),
                examples=result.examples.get(group, ()),
            )
            self._send(names, window_notification(rule, event, self.base_url, now))

    def _digests(self, now: datetime) -> None:
        by_name = {r.name: r for r in self.trace_rules}
        for digest in self.state.alerts.due_digests(hour_of(now)):
            rule = by_name.get(digest.rule)
            if rule is not None:
                log.warning("trace_alert_digest", rule=rule.name, traces=digest.suppressed)
                self._send(
                    self.targets(rule.notify),
                    digest_notification(
                        rule, digest.hour, digest.suppressed, digest.examples, self.base_url, now
                    ),
                )
            self.state.alerts.mark_digested(digest)

    # -- status -------------------------------------------------------------------

    def status(self, now: datetime | None = None) -> list[RuleStatus]:
        """Each rule and group as the next evaluation would leave it (nothing is saved)."""
        now = now or self.clock()
        stored = self.state.alerts.load()
        fresh = self.run_rules(stored, now)
        out: list[RuleStatus] = []
        for rule in self.rules:
            if rule.name in fresh:
                states: Mapping[GroupKey, AlertState] = fresh[rule.name][1].states
            else:
                states = stored.get(rule.name, {})
            for group, state in sorted(states.items()):
                out.append(RuleStatus(rule, group, state, state.evaluated_at or now.timestamp()))
        return out

    # -- housekeeping -------------------------------------------------------------

    def prune(self, now: datetime) -> int:
        before = now - timedelta(days=self.history_days)
        self.state.alerts.prune(before.timestamp(), hour_of(before))
        return self.state.history.prune(before.timestamp())

    def flush(self, timeout_s: float) -> bool:
        return self.delivery.flush(timeout_s) if self.delivery is not None else True

    def shutdown(self, timeout_s: float) -> bool:
        return self.delivery.shutdown(timeout_s) if self.delivery is not None else True
