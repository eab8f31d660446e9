"""The alert commands' part: rules over a state file (`alerts status`, `backtest`),
and a test alert through the notifiers (`alerts test`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from observer.alerts.delivery import Delivery, NothingQueued
from observer.alerts.engine import AlertEvent, evaluation_points, replay
from observer.alerts.notifiers.trial import TestOutcome, send_test
from observer.alerts.regression import RegressionRule
from observer.alerts.regression import Transition as RegressionTransition
from observer.alerts.regression import replay as replay_regression
from observer.alerts.rules import WindowRule, row_keys
from observer.alerts.service import AlertService
from observer.alerts.triage import keys as triage_keys
from observer.alerts.triage import lookback_s, triage
from observer.app.builders import build_alerts, build_notifiers, now_utc
from observer.background import Deadline
from observer.config import ConfigError, Settings
from observer.state import State, StateError
from observer.state.rows import Notification, Triage
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
