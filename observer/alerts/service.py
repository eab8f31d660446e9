"""Alerting in the daemon: a thin front over the rule families (observer.alerts.families).

    scored(row) / judged(...) --> TraceRules.step(now, [row])
    evaluate_step(now)        --> JudgeHealth, WindowRules, Regressions, Digests: .step(now, rows)
                                  each family: decide -> Sender.commit (incidents, one
                                  transaction, lanes woken) -> what it queued

- Every scored trace is checked against the trace rules at once, on the very row the
  scorer wrote (with what the resolver found), and again when the judge's values
  arrive.
- `evaluate_step()` brings each window rule a bounded number of evaluation points
  closer to its target; the daemon runs it on a thread of its own
  (`observer.alerts.evaluator.AlertEvaluator`), so a long catch-up never holds the
  poll loop; `evaluate()` runs steps until caught up (`run --once`). Each step also
  starts again the notifier lanes a failed delivery stopped.
- Alerts that share a cause are one incident (observer.alerts.incidents): the
  `Sender` places every message in its incident before it is queued.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from observer.alerts.announce import Routing
from observer.alerts.delivery import Delivery
from observer.alerts.engine import AlertEvent, AlertState, GroupKey, Row
from observer.alerts.families import Options, Rows
from observer.alerts.families.cache import BucketCache
from observer.alerts.families.release import Regressions
from observer.alerts.families.trace import Digests, SharedTraceRules, TraceRules, hour_of
from observer.alerts.families.window import (
    JudgeHealth,
    Progress,
    WindowRules,
    chain,
    split_judge_health,
    triage_at,
)
from observer.alerts.history import judge_values
from observer.alerts.incidents import forget
from observer.alerts.regression import RegressionRule
from observer.alerts.rules import Route, TraceRule, WindowRule
from observer.alerts.sender import Sender
from observer.background import Deadline
from observer.judge.outcome import JudgeResult
from observer.model import RagRecord
from observer.state import State
from observer.state.rows import Incident, Triage
from observer.telemetry.metrics import Metrics

__all__ = ["AlertService", "Options", "RuleSet", "RuleStatus", "SharedTraceRules", "StepResult"]

# Evaluation points per rule in one step of `evaluate()` (the daemon's evaluator sets its own).
STEP_POINTS = 60


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Every rule the service runs, and the routes by layer."""

    window: tuple[WindowRule, ...] = ()
    trace: tuple[TraceRule, ...] = ()
    regressions: tuple[RegressionRule, ...] = ()
    routes: tuple[Route, ...] = ()


@dataclass(frozen=True, slots=True)
class RuleStatus:
    """One rule and group as `observer alerts status` shows it."""

    rule: WindowRule | RegressionRule
    group: GroupKey
    state: AlertState
    at: float


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one evaluation step did."""

    events: tuple[AlertEvent, ...] = ()
    points: int = 0  # evaluation points worked off, all rules together
    left: int = 0  # points still to go (a catch-up continues at the next step)
    evaluated_to: float | None = None  # the earliest point a rule of this step reached

    @property
    def behind(self) -> bool:
        return self.left > 0


@dataclass
class AlertService:
    """The rule families around one `Sender`; what fired before a restart is exported as
    active before the first step."""

    state: State
    metrics: Metrics
    rule_set: RuleSet
    delivery: Delivery | None = None
    notifiers: Mapping[str, str] = field(default_factory=dict)  # name -> kind
    options: Options = field(default_factory=Options)
    shared: SharedTraceRules | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    def __post_init__(self) -> None:
        o, rules = self.options, self.rule_set
        self.rules, self.trace_rules, self.regressions = (
            rules.window,
            rules.trace,
            rules.regressions,
        )
        self.max_groups, self.step_s = o.max_groups, o.step_s
        self.metrics.notifiers_known(self.notifiers)
        self.sender = Sender(
            self.state,
            self.metrics,
            Routing(dict(self.notifiers), rules.routes),
            self.delivery,
            correlation_window_s=o.correlation_window_s,
        )
        health, others = split_judge_health(rules.window)
        kept = BucketCache(rules.window, o.step_s)
        self.judge_health = JudgeHealth(
            health, self.state, self.sender, self.metrics, o, buckets=kept
        )
        unhealthy = self.judge_health.unhealthy
        self.window_rules = WindowRules(
            others,
            self.state,
            self.sender,
            self.metrics,
            o,
            judge_unhealthy=unhealthy,
            buckets=kept,
        )
        self.regression_rules = Regressions(
            rules.regressions, self.state, self.sender, self.metrics, base_url=o.base_url
        )
        self.trace_family = TraceRules(
            rules.trace, self.sender, self.metrics, o, judge_unhealthy=unhealthy, shared=self.shared
        )
        self.digests = Digests(rules.trace, self.state, self.sender, o)
        self._forgot = False
        self._evaluating = threading.Lock()  # one step at a time, whichever thread asks
        self._dropped_seen = self.metrics.total("observer_scores_dropped_total")
        stored = self.state.alerts.load()
        for rule in self.rules:
            if rule.name in stored:
                self.sender.export_active(rule.name, stored[rule.name])
        self.regression_rules.export()
        self.sender.export_incidents()

    # -- per trace --------------------------------------------------------------

    def scored(self, row: Row) -> None:
        """A trace's scores are in the outbox with its history row, `row`: the trace rules
        see that very row (the resolver's values in it), never one rebuilt from signals."""
        self.trace_family.step(self.clock(), [row])

    def judged(self, record: RagRecord, result: JudgeResult) -> None:
        """The judge's values join the trace's row; trace rules see them at once."""
        row = self.state.history.merge(record.trace_id, judge_values(result))
        if row is not None:
            self.trace_family.step(self.clock(), [row])

    # -- the daemon's own samples -------------------------------------------------

    def record_pass(self, now: datetime, lag_s: float) -> None:
        """After a pass: the lag, and the scores dropped since the last pass."""
        dropped = self.metrics.total("observer_scores_dropped_total")
        self.state.history.add_samples(
            now.timestamp(), {"lag_s": lag_s, "scores_dropped": dropped - self._dropped_seen}
        )
        self._dropped_seen = dropped

    # -- evaluation ---------------------------------------------------------------

    def evaluate(self, now: datetime | None = None) -> list[AlertEvent]:
        """Evaluate until every rule is caught up, save, notify; the events that happened."""
        now = now or self.clock()
        happened: list[AlertEvent] = []
        while True:
            step = self.evaluate_step(now, max_points=STEP_POINTS)
            happened.extend(step.events)
            if not step.behind:
                return happened

    def evaluate_step(
        self,
        now: datetime | None = None,
        *,
        max_points: int | None = None,
        rows: Rows | None = None,
        should_stop: Callable[[], bool] | None = None,
        resume: bool = True,
    ) -> StepResult:
        """At most `max_points` evaluation points per window rule; each family's step in
        turn (the judge's health first: the rules after it hold by it), then the release
        comparisons and the digests due; with `resume`, the lanes a failure had stopped
        started again. `should_stop` is asked between rules."""
        now = now or self.clock()
        history: Rows = rows or self.state.history
        windows = (self.judge_health, self.window_rules)
        with self._evaluating:
            if not self._forgot:
                kept = {r.name for r in self.rules} | {r.name for r in self.regressions}
                self.state.alerts.forget_other_rules(kept)
                gone = forget(self.state.alerts.incidents(), kept, now.timestamp())
                self.state.alerts.save_incidents(gone)  # no incident waits on a rule removed
                self._forgot = True
            for family in windows:
                family.step(now, history, max_points=max_points, should_stop=should_stop)
            if should_stop is None or not should_stop():
                self.regression_rules.step(now, history)
            self.digests.step(now)
            if resume and self.delivery is not None:
                self.delivery.resume()
        done: Progress = chain(*(f.progress for f in windows))
        return StepResult(done.events, done.points, done.left, min(done.reached, default=None))

    def triage_at(
        self, rule: WindowRule, group: GroupKey, at: float, rows: Rows | None = None
    ) -> Triage | None:
        """The triage of `rule`'s `group` at `at` over the stored history (`alerts status`
        and `backtest` too); None for a rule on the daemon's own samples."""
        return triage_at(rule, group, at, rows or self.state.history)

    def resume_delivery(self) -> None:
        """Send what waits in the outbox (at start: what a killed process left)."""
        if self.delivery is not None:
            self.delivery.resume()

    # -- status -------------------------------------------------------------------

    def status(self, now: datetime | None = None) -> list[RuleStatus]:
        """Each rule and group as the next evaluation would leave it (nothing is saved),
        the release regressions' as they stand."""
        now = now or self.clock()
        stored = self.state.alerts.load()
        progress = self.state.alerts.progress()
        fresh = {}
        for family in (self.judge_health, self.window_rules):
            fresh.update(family.preview(stored, now, progress, self.state.history))
        out: list[RuleStatus] = []
        ruled: Sequence[WindowRule | RegressionRule] = (*self.rules, *self.regressions)
        for rule in ruled:
            states: Mapping[GroupKey, AlertState]
            states = fresh[rule.name].states if rule.name in fresh else stored.get(rule.name, {})
            for group, state in sorted(states.items()):
                out.append(RuleStatus(rule, group, state, state.evaluated_at or now.timestamp()))
        return out

    def incidents(self, since: float | None = None) -> list[Incident]:
        """The incidents open now, and those resolved at or after `since`."""
        return self.state.alerts.incidents(since)

    # -- housekeeping -------------------------------------------------------------

    def prune(self, now: datetime) -> int:
        before = now - timedelta(days=self.options.history_days)
        self.state.alerts.prune(before.timestamp(), hour_of(before))
        return self.state.history.prune(before.timestamp())

    def flush(self, deadline: Deadline) -> bool:
        return self.delivery.flush(deadline) if self.delivery is not None else True

    def shutdown(self, deadline: Deadline) -> bool:
        """The notifiers' lanes stopped by `deadline`; True when nothing waits."""
        return self.delivery.shutdown(deadline) if self.delivery is not None else True

    @property
    def ended(self) -> bool:
        """After a shutdown: no notifier's lane still sends (the state may be closed)."""
        return self.delivery.ended if self.delivery is not None else True
