"""The alert commands' part: rules over a state file (`alerts status`, `backtest`),
and a test alert through the notifiers (`alerts test`).

`alert_status` is what `alerts status` shows: every rule and group as the next
evaluation would leave it, the triage of each firing group, and the incidents open
(and resolved within the last day of event time). `backtest` replays the window rules
from a clean state, `backtest_regressions` the release regressions, and
`backtest_incidents` what the notifiers would have been told of them, as incidents.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from observer.alerts.delivery import Delivery, NothingQueued
from observer.alerts.engine import AlertEvent, evaluation_points, replay
from observer.alerts.incidents import tell
from observer.alerts.messages import layer_of_window, regression_notification, window_notification
from observer.alerts.notifiers.trial import TestOutcome, send_test
from observer.alerts.regression import RegressionRule
from observer.alerts.regression import Transition as RegressionTransition
from observer.alerts.regression import replay as replay_regression
from observer.alerts.rules import WindowRule, row_keys
from observer.alerts.service import AlertService, RuleStatus
from observer.alerts.triage import keys as triage_keys
from observer.alerts.triage import lookback_s, triage
from observer.app.builders import build_alerts, build_notifiers, now_utc
from observer.background import Deadline
from observer.config import ConfigError, Settings
from observer.state import State, StateError
from observer.state.rows import GroupKey, Incident, Notification, Triage
from observer.telemetry.metrics import Metrics


@contextmanager
def open_alerts(settings: Settings, state_path: Path) -> Iterator[AlertService]:
    """Rules over an existing state file, for `alerts status` and `backtest`: nothing is
    sent (no notifier is built). The state file is closed on the way out, also when the
    rules cannot be built."""
    if not state_path.exists():
        raise StateError(f"state file {state_path} does not exist (run the daemon first)")
    with closing(State(state_path)) as state:
        yield build_alerts(settings, state, Metrics(), notify=False)


# `alerts status` also lists the incidents resolved this long before the watermark.
RESOLVED_SHOWN_S = 24 * 3600.0


@dataclass(frozen=True)
class AlertStatus:
    """What `alerts status` shows."""

    statuses: list[RuleStatus]
    triages: dict[tuple[str, GroupKey], Triage]
    incidents: list[Incident]
    watermark: float | None
    rules: tuple[WindowRule | RegressionRule, ...]
    trace_rules: int


def alert_status(alerts: AlertService, now: datetime | None = None) -> AlertStatus:
    """Every rule and group now (nothing sent, nothing saved), the triage of each firing
    group of a window rule, and the incidents open or resolved within the last day."""
    statuses = alerts.status(now)
    triages: dict[tuple[str, GroupKey], Triage] = {}
    for item in statuses:
        if item.state.status == "firing" and isinstance(item.rule, WindowRule):
            found = alerts.triage_at(item.rule, item.group, item.at)
            if found is not None:
                triages[(item.rule.name, item.group)] = found
    mark = alerts.state.scored_through()
    at = mark.timestamp() if mark is not None else None
    shown = alerts.incidents(None if at is None else at - RESOLVED_SHOWN_S)
    return AlertStatus(
        statuses,
        triages,
        shown,
        at,
        (*alerts.rules, *alerts.regressions),
        len(alerts.trace_rules),
    )


@dataclass
class Backtest:
    rule: WindowRule
    events: list[AlertEvent]
    # The triage of each firing event, by its index in `events`.
    triages: dict[int, Triage] = field(default_factory=dict)

    @property
    def notifications(self) -> int:
        return sum(1 for e in self.events if e.notify)


def backtest(
    alerts: AlertService, start: datetime, end: datetime, step_s: float, rule: str | None = None
) -> list[Backtest]:
    """Replay the rules over the stored history, from a clean state, as the daemon would."""
    chosen = [r for r in alerts.rules if rule is None or r.name == rule]
    if rule is not None and not chosen and rule not in {r.name for r in alerts.regressions}:
        names = ", ".join([r.name for r in alerts.rules] + [r.name for r in alerts.regressions])
        names = names or "none"
        raise ConfigError(f"no window rule named {rule!r} (configured: {names})")
    longest = max((max(r.window_s, lookback_s(r)) for r in chosen), default=0.0)
    read = row_keys({key for r in chosen for key in triage_keys(r)})
    rows = alerts.state.history.rows(start.timestamp() - longest, end.timestamp(), read)
    points = evaluation_points(start.timestamp(), end.timestamp(), step_s, 0.0, None)
    results = []
    for rule_ in chosen:
        events = replay(rule_, rows, {}, points, alerts.max_groups).events
        triages = {
            i: triage(rule_, e.group, rows, e.at)
            for i, e in enumerate(events)
            if e.transition == "firing" and not rule_.pipeline
        }
        results.append(Backtest(rule_, events, triages))
    return results


@dataclass
class RegressionBacktest:
    rule: RegressionRule
    events: list[tuple[float, RegressionTransition]]


def backtest_regressions(
    alerts: AlertService, start: datetime, end: datetime, step_s: float, rule: str | None = None
) -> list[RegressionBacktest]:
    """The release-regression rules replayed over the stored history, as the daemon would."""
    chosen = [r for r in alerts.regressions if rule is None or r.name == rule]
    out: list[RegressionBacktest] = []
    points = evaluation_points(start.timestamp(), end.timestamp(), step_s, 0.0, None)
    for each in chosen:
        rows = alerts.state.history.rows(
            start.timestamp() - each.read_s, end.timestamp(), each.keys(), samples=False
        )
        out.append(RegressionBacktest(each, replay_regression(each, rows, points)))
    return out


def backtest_incidents(
    alerts: AlertService,
    results: Sequence[Backtest],
    regressions: Sequence[RegressionBacktest],
    sent_at: datetime,
) -> list[Incident]:
    """What the notifiers would have been told of the replayed alerts, as incidents: every
    notifying event and release finding in event time, placed by the daemon's rules."""
    told: list[tuple[float, int, Notification]] = []
    window_s = alerts.options.correlation_window_s
    for result in results:
        layers: dict[GroupKey, tuple[str | None, str | None]] = {}
        for i, event in enumerate(result.events):
            if not event.notify:
                continue
            triage = result.triages.get(i)
            if event.transition in ("firing", "no_data"):
                layers[event.group] = layer_of_window(result.rule, event.transition, triage)
            layer, note = layers.get(event.group, (None, None))
            made = window_notification(
                result.rule, event, "", sent_at, triage=triage, layer=layer, layer_note=note
            )
            told.append((event.at, len(told), made))
    for replayed in regressions:
        since: dict[GroupKey, float] = {}
        for at, (transition, group, finding) in replayed.events:
            began = since.setdefault(group, at)
            made = regression_notification(replayed.rule, group, finding, at, began, "", sent_at)
            told.append((at, len(told), made))
            if transition == "resolved":
                since.pop(group, None)
    incidents: dict[str, Incident] = {}
    for at, _, notification in sorted(told, key=lambda item: (item[0], item[1])):
        placed = tell(incidents, notification, (), at, window_s).incident
        incidents[placed.id] = placed
    return sorted(incidents.values(), key=lambda i: (i.opened_at, i.id))


def test_notification(sent_at: datetime) -> Notification:
    """What `observer alerts test` sends: plainly a test, resolving nothing real."""
    return Notification(
        id=f"msg_test_{int(sent_at.timestamp())}",
        dedup_key="observer-test",
        rule="observer_test",
        kind="test",
        state="firing",
        severity="warn",
        group=(("environment", "test"), ("query_type", "test")),
        summary="observer test alert: notifications reach this receiver",
        description="Sent by `observer alerts test`. Nothing is wrong; no action needed.",
        started_at=sent_at,
        sent_at=sent_at,
    )


def test_notifiers(
    settings: Settings, name: str | None = None, *, resolve_after_s: float | None = None
) -> list[TestOutcome]:
    """A test alert through each notifier (or the one named), ended as each notifier's
    test ends (observer.alerts.notifiers.trial): per notifier `(name, error or None)`,
    with `.sent` saying what it received (`sent, resolved`). Only the notifiers tested
    are built, so only their secrets are needed."""
    configured = [n.name for n in settings.alerts.notifiers]
    if name is not None and name not in configured:
        known = ", ".join(configured) or "none"
        raise ConfigError(f"no notifier named {name!r} (configured: {known})")
    notifiers = build_notifiers(settings, name)
    delivery = Delivery(notifiers, Metrics(), NothingQueued(), max_attempts=2, base_s=0.5)
    try:
        return send_test(
            delivery.send_now,
            notifiers,
            [each for each in notifiers if name is None or each == name],
            test_notification(now_utc()),
            now=now_utc,
            resolve_after_s=resolve_after_s,
        )
    finally:
        delivery.shutdown(Deadline.within(1.0))
