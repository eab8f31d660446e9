"""Alerting in the daemon: history in, rules evaluated, notifications out. Thin I/O.

- Every scored trace is checked against the trace rules at once (and again
  when the judge's values arrive); a trace notifies a rule at most once, at
  most `max_per_hour` an hour, the rest in an hourly digest.
- `evaluate_step()` brings each window rule a bounded number of evaluation
  points closer to its target (the watermark, or the clock for the daemon's
  own samples), its windows slid incrementally over the history
  (`observer.alerts.windows`); per rule, the new state, the point reached and
  the notifications it decided are saved in one transaction (the outbox), and
  the notifiers' lanes are woken, never waited for. The daemon runs it on a
  thread of its own (`observer.alerts.evaluator.AlertEvaluator`), so a long
  catch-up never holds the poll loop; `evaluate()` runs steps until caught up
  (`run --once`).
- While an alert fires, Alertmanager receivers get it again after every step
  that reaches the target, so it never times out there; a re-post still
  waiting replaces the one before it.
- Each step also starts again the lanes a failed delivery stopped: a receiver
  that was down gets what waits for it at the next evaluation.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

import structlog

from observer.alerts.delivery import Delivery
from observer.alerts.engine import (
    MAX_EXAMPLES,
    AlertEvent,
    AlertState,
    Evaluation,
    Example,
    GroupKey,
    Row,
    evaluation_points,
)
from observer.alerts.history import judge_values
from observer.alerts.messages import (
    digest_notification,
    regression_notification,
    trace_notification,
    window_notification,
)
from observer.alerts.regression import (
    Finding,
    RegressionRule,
    Stats,
    contenders,
    decide,
    other_groups,
    with_examples,
)
from observer.alerts.regression import step as regression_step
from observer.alerts.rules import (
    JUDGE_HEALTH_RULES,
    JUDGE_SIGNALS,
    Route,
    TraceRule,
    WindowRule,
    row_keys,
)
from observer.alerts.triage import keys as triage_keys
from observer.alerts.triage import lookback_s, triage
from observer.alerts.windows import slide
from observer.background import Deadline
from observer.judge.outcome import JudgeResult
from observer.model import RagRecord
from observer.state import State
from observer.state.history import first_seen, release_rows, release_stats
from observer.state.rows import Notification, Outgoing, Triage
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.alerts")

# Evaluation points per rule in one step of `evaluate()` (the daemon's evaluator sets its own).
STEP_POINTS = 60


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


class ReleaseHistory(Protocol):
    """`History` / `HistoryReader`: a connection for the release statistics' queries."""

    def connection(self) -> AbstractContextManager[sqlite3.Connection]: ...


class RowReader(Protocol):
    """`History.rows` / `HistoryReader.rows`: the history with start < at <= end."""

    def __call__(
        self,
        start: float,
        end: float,
        keys: Collection[str] | None = None,
        *,
        traces: bool = True,
        samples: bool = True,
    ) -> list[Row]: ...


@dataclass(frozen=True, slots=True)
class RuleStatus:
    """One rule and group as `observer alerts status` shows it."""

    rule: WindowRule
    group: GroupKey
    state: AlertState
    at: float


@dataclass(frozen=True, slots=True)
class Plan:
    """The points one rule is evaluated at in a step, from its stored state."""

    rule: WindowRule
    states: Mapping[GroupKey, AlertState]
    points: tuple[float, ...]
    left: int  # points beyond this step, for the next ones

    @property
    def start(self) -> float:
        return self.points[0] - self.rule.window_s


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


def plan(
    rule: WindowRule,
    states: Mapping[GroupKey, AlertState],
    last: float | None,
    target: float,
    step_s: float,
    max_points: int | None,
) -> Plan | None:
    """The rule's next points from `last` (None: never evaluated) up to `target`, at most
    `max_points` of them (the first ones: a catch-up goes forward in event time)."""
    points = evaluation_points(last, target, step_s, rule.for_s + step_s)
    if not points:
        return None
    cut = len(points) if max_points is None else max(1, max_points)
    return Plan(rule, states, tuple(points[:cut]), max(0, len(points) - cut))


def clusters(plans: Sequence[Plan]) -> list[tuple[float, float, list[Plan]]]:
    """Plans whose spans of history overlap, read together: (start, end, plans)."""
    out: list[tuple[float, float, list[Plan]]] = []
    for each in sorted(plans, key=lambda p: p.start):
        end = each.points[-1]
        if out and each.start <= out[-1][1]:
            start, last_end, members = out[-1]
            out[-1] = (start, max(last_end, end), [*members, each])
        else:
            out.append((each.start, end, [each]))
    return out


def still_firing(
    rule: WindowRule, group: GroupKey, state: AlertState, result: Evaluation, now: datetime
) -> AlertEvent:
    """A group that fires, as the event of its firing (no-data, when that is why): what an
    Alertmanager re-post and a released held alert tell."""
    return AlertEvent(
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
        top=result.tops.get(group),
    )


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
        shared: SharedTraceRules | None = None,
        routes: Sequence[Route] = (),
        regressions: Sequence[RegressionRule] = (),
    ) -> None:
        """A `delivery` sends from the state file's outbox, where at most
        `delivery.queue_size` notifications wait per notifier.

        `shared`, a fleet's trace rules (observer.fleet.alerts): whether this member
        raises a trace, keeps it for the digest, or leaves it to the member that raised
        it; its claim is confirmed once the state file records the trace as raised, and
        released when that fails."""
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
        self.max_queued = delivery.queue_size if delivery is not None else 1000
        self._dropped_seen = self._dropped_total()
        self._evaluating = threading.Lock()  # one step at a time, whichever thread asks
        self._forgot = False
        self.shared = shared
        self.routes = tuple(routes)
        self._judge_unhealthy = False  # a judge-health rule fires: judge alerts are held
        self.regressions = tuple(regressions)
        # The last triage of each firing group: Alertmanager's re-posts carry it too.
        self._triages: dict[tuple[str, GroupKey], Triage] = {}
        metrics.notifiers_known(self.notifier_kinds)
        for rule in self.rules:
            for outcome in ("ok", "pending", "firing"):
                metrics.alert_evaluations.labels(rule=rule.name, outcome=outcome)
        # What fired before a restart fires now: exported before the first evaluation.
        names = {r.name for r in self.rules}
        for name, states in state.alerts.load().items():
            if name in names:
                self.export_active(name, states)

    # -- targets ------------------------------------------------------------------

    def targets(self, notify: Sequence[str]) -> list[str]:
        """The notifiers a rule names; all of them when it names none."""
        return list(notify) or list(self.notifier_kinds)

    def routed(self, rule: WindowRule, layer: str | None) -> list[str]:
        """A window alert's notifiers: the first route of its layer's, else the rule's."""
        for route in self.routes:
            if route.matches(rule.name, layer):
                return list(route.notify)
        return self.targets(rule.notify)

    def _outgoing(
        self, names: Sequence[str], notification: Notification, supersede: str | None = None
    ) -> list[Outgoing]:
        if self.delivery is None or not names:
            return []
        known = self.delivery.known(names, notification)
        return [Outgoing(name, notification, supersede) for name in known]

    def _wake(self, outgoing: Iterable[Outgoing]) -> None:
        names = sorted({o.notifier for o in outgoing})
        if self.delivery is not None and names:
            self.delivery.wake(names)

    def _count_dropped(self, dropped: Mapping[str, int], outgoing: Sequence[Outgoing]) -> None:
        if self.delivery is not None and dropped and outgoing:
            self.delivery.count_dropped(dropped, outgoing[-1].notification)

    # -- per trace ----------------------------------------------------------------

    def scored(self, row: Row) -> None:
        """A trace's scores are in the outbox with its history row, `row`: the trace rules
        see that very row (the resolver's values in it), never one rebuilt from signals."""
        self.check_trace(row)

    def judged(self, record: RagRecord, result: JudgeResult) -> None:
        """The judge's values join the trace's row; trace rules see them at once."""
        row = self.state.history.merge(record.trace_id, judge_values(result))
        if row is not None:
            self.check_trace(row)

    def judge_unhealthy(self, stored: Mapping[str, Mapping[GroupKey, AlertState]]) -> bool:
        """A rule on the judge's health (its error rate, its agreement with people) fires."""
        return any(
            state.status == "firing"
            for name in JUDGE_HEALTH_RULES
            for state in stored.get(name, {}).values()
        )

    def check_trace(self, row: Row) -> None:
        if row.trace_id is None:
            return
        labels = {key: row.label(key) for rule in self.trace_rules for key, _ in rule.where}
        now = self.clock()
        for rule in self.trace_rules:
            if not rule.matches(row.values, labels):
                continue
            if rule.expression.signal in JUDGE_SIGNALS and self.judge_unhealthy(
                self.state.alerts.load()
            ):
                # The judge that flagged it is not trusted now: nobody is paged for it.
                log.warning("trace_alert_held", rule=rule.name, trace_id=row.trace_id)
                continue
            hour = hour_of(now)
            cap = rule.max_per_hour
            example = Example(row.trace_id, row.project_id, 1.0)
            notification = trace_notification(rule, row, self.base_url, now)
            outgoing = self._outgoing(self.targets(rule.notify), notification)
            claimed = False  # a fleet's claim on this trace, taken last before the commit
            if self.shared is not None:
                shared = self.shared.admit(rule.name, row.trace_id, hour, cap)
                if shared == "duplicate":
                    continue  # another member of the fleet raised it for this trace
                if shared == "over":
                    cap = 0  # the fleet notified its hour's worth: kept for the digest
                claimed = shared in ("notify", "over")
            committed = False
            try:
                admitted = self.state.alerts.admit(
                    rule.name,
                    row.trace_id,
                    hour,
                    row.at,
                    example,
                    cap,
                    outgoing,
                    self.max_queued,
                )
                committed = True
            finally:
                if claimed and self.shared is not None:
                    if committed:
                        self.shared.confirm(rule.name, row.trace_id)
                    else:  # raised when the trace is checked again, by whichever member
                        self.shared.release(rule.name, row.trace_id, hour)
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
                self._wake(outgoing)

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

    def _target(self, rule: WindowRule, now: datetime, watermark: datetime | None) -> float | None:
        if rule.pipeline:
            return now.timestamp()
        # No pass has completed: no window is known to be whole.
        return watermark.timestamp() if watermark is not None else None

    def plans(
        self,
        stored: Mapping[str, Mapping[GroupKey, AlertState]],
        progress: Mapping[str, float],
        now: datetime,
        max_points: int | None,
    ) -> list[Plan]:
        """Each rule's next points: from the point it reached (its states' evaluation time
        in a state file older than `progress`) up to its target."""
        watermark = self.state.watermark()
        plans: list[Plan] = []
        for rule in self.rules:
            states = stored.get(rule.name, {})
            last = progress.get(rule.name)
            if last is None:
                last = max(
                    (s.evaluated_at for s in states.values() if s.evaluated_at), default=None
                )
            target = self._target(rule, now, watermark)
            if target is None:
                continue
            found = plan(rule, states, last, target, self.step_s, max_points)
            if found is not None:
                plans.append(found)
        return plans

    def _slid(self, plans: Sequence[Plan], rows: RowReader) -> Iterable[tuple[Plan, Evaluation]]:
        """Each plan evaluated, the history read once per cluster of overlapping plans (trace
        rows for the rules on traces, the daemon's samples for the others). The judge's
        health first, whichever it reads (its error rate is on traces, its agreement and
        canary are samples): the rules after it are held or told by it."""
        health = [p for p in plans if p.rule.name in JUDGE_HEALTH_RULES]
        others = [p for p in plans if p.rule.name not in JUDGE_HEALTH_RULES]
        for phase, pipeline in itertools.product((health, others), (False, True)):
            chosen = [p for p in phase if p.rule.pipeline == pipeline]
            for start, end, members in clusters(chosen):
                keys = row_keys({p.rule.expression.signal for p in members})
                loaded = rows(start, end, keys, traces=not pipeline, samples=pipeline)
                for each in members:
                    result = slide(
                        each.rule, loaded, each.states, each.points, self.max_groups, ordered=True
                    )
                    yield each, result

    def run_rules(
        self,
        stored: Mapping[str, Mapping[GroupKey, AlertState]],
        now: datetime,
        progress: Mapping[str, float] | None = None,
    ) -> dict[str, tuple[WindowRule, Evaluation]]:
        """Every rule brought all the way to its evaluation point from `stored` (nothing
        saved)."""
        plans = self.plans(stored, progress or {}, now, None)
        return {
            each.rule.name: (each.rule, result)
            for each, result in self._slid(plans, self.state.history.rows)
        }

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
        rows: RowReader | None = None,
        should_stop: Callable[[], bool] | None = None,
        resume: bool = True,
        history: ReleaseHistory | None = None,
    ) -> StepResult:
        """At most `max_points` evaluation points per rule; per rule its state, the point it
        reached and its notifications in one transaction; then the digests due, and (with
        `resume`) the lanes a failure had stopped started again. `should_stop` is asked
        between rules."""
        now = now or self.clock()
        with self._evaluating:
            if not self._forgot:
                kept = {r.name for r in self.rules} | {r.name for r in self.regressions}
                self.state.alerts.forget_other_rules(kept)
                self._forgot = True
            stored = self.state.alerts.load()
            self._judge_unhealthy = self.judge_unhealthy(stored)
            plans = self.plans(stored, self.state.alerts.progress(), now, max_points)
            happened: list[AlertEvent] = []
            done = left = 0
            reached: list[float] = []
            skipped = set(id(p) for p in plans)
            if plans:
                for each, result in self._slid(plans, rows or self.state.history.rows):
                    if should_stop is not None and should_stop():
                        break
                    self._commit(each, result, now, rows or self.state.history.rows)
                    skipped.discard(id(each))
                    happened.extend(result.events)
                    done += len(each.points)
                    left += each.left
                    reached.append(each.points[-1])
            left += sum(len(p.points) + p.left for p in plans if id(p) in skipped)
            if should_stop is None or not should_stop():
                self._compare_releases(history or self.state.history, now)
            self._digests(now)
            if resume and self.delivery is not None:
                self.delivery.resume()
        return StepResult(tuple(happened), done, left, min(reached, default=None))

    def _commit(self, each: Plan, result: Evaluation, now: datetime, rows: RowReader) -> None:
        rule = each.rule
        outgoing: list[Outgoing] = []
        # Each group's layer label, from firing to resolved (Alertmanager's identity of it),
        # and whether it is held (fired while the judge was unhealthy, nobody told yet).
        layers = {group: state.layer for group, state in each.states.items()}
        held = {group: state.held for group, state in each.states.items()}
        for event in result.events:
            outgoing.extend(self._announce(rule, event, now, rows, layers, held))
        for group, state in list(result.states.items()):
            if state.status == "firing" and (
                state.layer != layers.get(group) or state.held != held.get(group, False)
            ):
                state = result.states[group] = replace(
                    state, layer=layers.get(group), held=held.get(group, False)
                )
            if state.status == "firing" and state.held and not self._judge_unhealthy:
                outgoing.extend(self._release(rule, group, state, result, now, rows))
                result.states[group] = replace(state, held=False)
        if each.left == 0:  # caught up: re-post what fires to Alertmanager
            notified = {e.group for e in result.events if e.notify}
            outgoing.extend(self._refresh(rule, result, notified, now, rows))
        for group, state in result.states.items():
            if state.status != "firing":
                self._triages.pop((rule.name, group), None)
        dropped = self.state.alerts.commit(
            rule.name, result.states, each.points[-1], outgoing, self.max_queued
        )
        if rule.name in JUDGE_HEALTH_RULES:  # the rules after it hold or tell by it
            self._judge_unhealthy = self.judge_unhealthy(self.state.alerts.load())
        self._count_dropped(dropped, outgoing)
        self._observe(rule, result)
        self._wake(outgoing)

    def _compare_releases(self, history: ReleaseHistory, now: datetime) -> int:
        """Each release-regression rule, every `every_s` of event time up to the watermark:
        the findings that began fire, those that ended resolve; how many changed."""
        watermark = self.state.watermark()
        if watermark is None or not self.regressions:
            return 0
        at = watermark.timestamp()
        progress = self.state.alerts.progress()
        stored = self.state.alerts.load()
        changed = 0
        for rule in self.regressions:
            last = progress.get(rule.name)
            if last is not None and at - last < rule.every_s:
                continue
            before = stored.get(rule.name, {})
            states, happened = regression_step(self.release_findings(rule, history, at), before, at)
            outgoing: list[Outgoing] = []
            for transition, group, finding in happened:
                log.warning(f"alert_{transition}", rule=rule.name, group=dict(group))
                since = before[group].since if group in before else at
                notification = regression_notification(
                    rule, group, finding, at, since or at, self.base_url, now
                )
                outgoing.extend(self._outgoing(self.targets(rule.notify), notification))
            dropped = self.state.alerts.commit(rule.name, states, at, outgoing, self.max_queued)
            self._count_dropped(dropped, outgoing)
            self._wake(outgoing)
            changed += len(happened)
        return changed

    def release_findings(
        self, rule: RegressionRule, history: ReleaseHistory, at: float
    ) -> list[Finding]:
        """`regression.compare` at `at`, its statistics computed by SQLite over the stored
        history rather than from rows read into memory (bench/triage.py)."""
        start = at - rule.read_s
        groups = other_groups(rule)
        signals = [c.name for c in rule.checks]
        found: list[Finding] = []
        with history.connection() as db:
            for environment, seen in first_seen(db, rule.dimension, start, at).items():
                contending = contenders(rule, seen, at)
                if contending is None:
                    continue
                new, before, since = contending
                raw = release_stats(
                    db,
                    environment=environment,
                    dimension=rule.dimension,
                    new=new,
                    before=before,
                    since=since,
                    baseline_s=rule.baseline_s,
                    groups=groups,
                    signals=signals,
                    start=start,
                    end=at,
                )
                cells = {cell: {n: Stats(*t) for n, t in by.items()} for cell, by in raw.items()}
                for finding in decide(rule, environment, new, before, cells):
                    check = next(c for c in rule.checks if c.name == finding.signal)
                    worst = release_rows(
                        db,
                        environment=environment,
                        dimension=rule.dimension,
                        value=new,
                        where=[(k, v) for k, v in finding.group if k in groups],
                        signal=finding.signal,
                        start=start,
                        end=at,
                        highest=check.worse == ">",
                        limit=MAX_EXAMPLES,
                    )
                    examples = tuple(Example(t, p, v) for t, p, v in worst)
                    found.append(with_examples(finding, examples))
        return found

    def _observe(self, rule: WindowRule, result: Evaluation) -> None:
        if result.capped:
            log.warning("alert_groups_capped", rule=rule.name, left_out=result.capped)
        for state in result.states.values():
            self.metrics.alert_evaluations.labels(rule=rule.name, outcome=state.status).inc()
        self.export_active(rule.name, result.states)

    def export_active(self, rule: str, states: Mapping[GroupKey, AlertState]) -> None:
        """`observer_alerts_active` for the rule's groups firing now (query_type capped); the
        series of a group that resolved is removed."""
        firing: Counter[tuple[str, str, str]] = Counter()
        for group, state in states.items():
            if state.status != "firing":
                continue
            labels = dict(group)
            environment = labels.get("environment", "")
            query_type = self.metrics.alert_query_type(labels.get("query_type", ""))
            firing[(environment, query_type, state.severity or "page")] += 1
        self.metrics.set_alerts_active(rule, firing)

    def triage_of(self, rule: WindowRule, event: AlertEvent, rows: RowReader) -> Triage | None:
        """What changed, where, since when and whose, for a firing group of a rule on
        traces (docs/alerts.md#triage); None for the daemon's own signals, or when the
        history cannot be read (the page goes out without it)."""
        try:
            found = self.triage_at(rule, event.group, event.at, rows)
        except Exception as error:  # a page never waits on its triage
            log.error("alert_triage_failed", rule=rule.name, error=repr(error))
            return None
        if found is not None:
            self._triages[(rule.name, event.group)] = found
        return found

    def triage_at(
        self, rule: WindowRule, group: GroupKey, at: float, rows: RowReader | None = None
    ) -> Triage | None:
        """The triage of `rule`'s `group` at `at` over the stored history (`alerts status`
        and `backtest` too); None for a rule on the daemon's own samples."""
        if rule.pipeline:
            return None
        history = (rows or self.state.history.rows)(
            at - lookback_s(rule), at, row_keys(triage_keys(rule)), traces=True, samples=False
        )
        return triage(rule, group, history, at)

    def _announce(
        self,
        rule: WindowRule,
        event: AlertEvent,
        now: datetime,
        rows: RowReader,
        layers: dict[GroupKey, str | None],
        held: dict[GroupKey, bool] | None = None,
    ) -> list[Outgoing]:
        """The notifications of one event; `layers` (each group's layer label) and `held`
        (fired while the judge was unhealthy) updated."""
        if not event.notify:
            return []
        held = held if held is not None else {}
        if rule.expression.signal in JUDGE_SIGNALS and not rule.pipeline:
            if event.transition == "resolved" and held.get(event.group):
                held[event.group] = False  # nobody was told it fired: nothing to resolve
                log.warning("alert_held_cleared", rule=rule.name, group=dict(event.group))
                return []
            if self._judge_unhealthy and event.transition != "resolved":
                held[event.group] = True
                log.warning(
                    "alert_held",
                    rule=rule.name,
                    group=dict(event.group),
                    transition=event.transition,
                    reason="the judge is unhealthy (judge_error_rate_high or judge_agreement_low)",
                )
                return []
        log.warning(
            f"alert_{event.transition}",
            rule=rule.name,
            group=dict(event.group),
            severity=event.severity,
            value=event.value,
            samples=event.samples,
        )
        known = layers.get(event.group)
        out: list[Outgoing] = []
        changed = event.previous_severity and event.previous_severity != event.severity
        if event.transition in ("escalated", "deescalated", "no_data") and changed:
            # Alertmanager knows an alert by its labels, severity among them: close the old one.
            closing = window_notification(
                rule,
                event,
                self.base_url,
                now,
                state="resolved",
                severity=event.previous_severity,
                layer=known,
            )
            names = self.routed(rule, known)
            managers = [n for n in names if self.notifier_kinds.get(n) == "alertmanager"]
            out.extend(self._outgoing(managers, closing))
        found = None
        layer = known
        if event.transition in ("firing", "renotified", "escalated", "deescalated"):
            found = self.triage_of(rule, event, rows)
            if event.transition == "firing":
                layer = found.layer if found is not None else None
                if rule.name in JUDGE_HEALTH_RULES:
                    layer = "judge"  # the eval owner's route, not the RAG on-call's
                layers[event.group] = layer
        else:  # resolved, or a no-data alert: the breach's label is closed with it
            layers[event.group] = None
        notification = window_notification(
            rule, event, self.base_url, now, triage=found, layer=layer
        )
        # The resolve goes where the page went: the layer is kept from firing to resolved.
        out.extend(self._outgoing(self.routed(rule, layer), notification))
        return out

    def _release(
        self,
        rule: WindowRule,
        group: GroupKey,
        state: AlertState,
        result: Evaluation,
        now: datetime,
        rows: RowReader,
    ) -> list[Outgoing]:
        """A held alert still firing once the judge is healthy again: told now."""
        event = still_firing(rule, group, state, result, now)
        log.warning("alert_released", rule=rule.name, group=dict(group))
        found = self.triage_of(rule, event, rows)
        notification = window_notification(
            rule, event, self.base_url, now, triage=found, layer=state.layer
        )
        notification = replace(
            notification,
            description=notification.description
            + " It was held while the judge was unhealthy; the judge is healthy again.",
        )
        return self._outgoing(self.routed(rule, state.layer), notification)

    def _refresh(
        self,
        rule: WindowRule,
        result: Evaluation,
        notified: set[GroupKey],
        now: datetime,
        rows: RowReader,
    ) -> list[Outgoing]:
        out: list[Outgoing] = []
        for group, state in result.states.items():
            if state.status != "firing" or group in notified or state.held:
                continue
            names = [
                n
                for n in self.routed(rule, state.layer)
                if self.notifier_kinds.get(n) == "alertmanager"
            ]
            if not names:
                continue
            event = still_firing(rule, group, state, result, now)
            found = None
            if not state.no_data_firing:
                found = self._triages.get((rule.name, group)) or self.triage_of(rule, event, rows)
            notification = window_notification(
                rule, event, self.base_url, now, triage=found, layer=state.layer
            )
            # Only the latest re-post of a group is worth sending: it replaces one waiting.
            out.extend(self._outgoing(names, notification, f"refresh:{notification.dedup_key}"))
        return out

    def _digests(self, now: datetime) -> None:
        by_name = {r.name: r for r in self.trace_rules}
        for digest in self.state.alerts.due_digests(hour_of(now)):
            rule = by_name.get(digest.rule)
            outgoing: list[Outgoing] = []
            if rule is not None:
                log.warning("trace_alert_digest", rule=rule.name, traces=digest.suppressed)
                notification = digest_notification(
                    rule, digest.hour, digest.suppressed, digest.examples, self.base_url, now
                )
                outgoing = self._outgoing(self.targets(rule.notify), notification)
            self.state.alerts.mark_digested(digest, outgoing, self.max_queued)
            self._wake(outgoing)

    # -- delivery -----------------------------------------------------------------

    def resume_delivery(self) -> None:
        """Send what waits in the outbox (at start: what a killed process left)."""
        if self.delivery is not None:
            self.delivery.resume()

    # -- status -------------------------------------------------------------------

    def status(self, now: datetime | None = None) -> list[RuleStatus]:
        """Each rule and group as the next evaluation would leave it (nothing is saved)."""
        now = now or self.clock()
        stored = self.state.alerts.load()
        fresh = self.run_rules(stored, now, self.state.alerts.progress())
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

    def flush(self, deadline: Deadline) -> bool:
        return self.delivery.flush(deadline) if self.delivery is not None else True

    def shutdown(self, deadline: Deadline) -> bool:
        """The notifiers' lanes stopped by `deadline`; True when nothing waits."""
        return self.delivery.shutdown(deadline) if self.delivery is not None else True

    @property
    def ended(self) -> bool:
        """After a shutdown: no notifier's lane still sends (the state may be closed)."""
        return self.delivery.ended if self.delivery is not None else True
