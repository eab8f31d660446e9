"""Window rules: each step brings every rule a bounded number of evaluation points closer
to its target. A rule on traces reads its windows from minutes of history kept between
steps (observer.alerts.families.cache, docs/alerts.md#what-evaluation-costs); a rule on
the daemon's samples slides over them (observer.alerts.windows).

- **Targets.** A rule on traces is evaluated up to the watermark (no window is judged
  before every trace in it was read), a rule on the daemon's own samples up to the clock.
- **Steps.** Per rule at most `max_points` points (the first ones: a catch-up goes
  forward in event time); the rules whose spans of history overlap read it once.
- **Per rule, one transaction**: its new state, the point it reached and the messages
  its events call for (observer.alerts.announce), placed in their incidents by the
  `Sender`. A firing group's triage (observer.alerts.triage) is computed by SQLite
  on the rows' connection and kept while it fires: Alertmanager's re-posts carry it.
- **While caught up**, each firing group is re-posted to Alertmanager, so it never
  times out there; a held alert (the judge unhealthy) is told once the judge is healthy.

`JudgeHealth` is the same family over the rules on the judge's own health: stepped
before the others, which hold their alerts on judge signals while it fires.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import structlog

from observer.alerts.announce import Desk, Message, announce, refreshed, released
from observer.alerts.buckets import slide_merged
from observer.alerts.engine import AlertEvent, AlertState, Evaluation, GroupKey, evaluation_points
from observer.alerts.families import Options, Rows
from observer.alerts.families.cache import BucketCache
from observer.alerts.rules import JUDGE_HEALTH_RULES, WindowRule, row_keys
from observer.alerts.sender import Sender
from observer.alerts.triage import QUANTILES, lookback_s, stored_slices, triage, triage_of
from observer.alerts.triage import keys as triage_keys
from observer.alerts.windows import slide
from observer.state import State
from observer.state.rows import Outgoing, Triage
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.alerts")

Stored = Mapping[str, Mapping[GroupKey, AlertState]]


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
class Progress:
    """What a family's last step did."""

    events: tuple[AlertEvent, ...] = ()
    points: int = 0  # evaluation points worked off, all rules together
    left: int = 0  # points still to go (a catch-up continues at the next step)
    reached: tuple[float, ...] = ()  # the point each rule stepped reached


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


def triage_at(rule: WindowRule, group: GroupKey, at: float, rows: Rows) -> Triage | None:
    """The triage of `rule`'s `group` at `at` over the stored history; None for a rule on
    the daemon's own samples. SQLite counts the samples; a quantile rule's are read."""
    if rule.pipeline:
        return None
    if rule.aggregate in QUANTILES:
        keys = row_keys(triage_keys(rule))
        read = rows.rows(at - lookback_s(rule), at, keys, traces=True, samples=False)
        return triage(rule, group, read, at)
    with rows.connection() as db:
        return triage_of(rule, group, stored_slices(rule, group, db), at)


class WindowRules:
    name = "window rules"

    def __init__(
        self,
        rules: Sequence[WindowRule],
        state: State,
        sender: Sender,
        metrics: Metrics,
        options: Options,
        *,
        judge_unhealthy: Callable[[], bool] = lambda: False,
        buckets: BucketCache | None = None,
    ) -> None:
        self.rules = tuple(rules)
        self.state = state
        self.sender = sender
        self.metrics = metrics
        self.options = options
        self.judge_unhealthy = judge_unhealthy
        self.progress = Progress()
        # The last triage of each firing group: Alertmanager's re-posts carry it too.
        self._triages: dict[tuple[str, GroupKey], Triage] = {}
        # The minutes kept: one cache for every family on the same history reads each once.
        self.buckets = buckets or BucketCache(self.rules, options.step_s)
        for rule in self.rules:
            for outcome in ("ok", "pending", "firing"):
                metrics.alert_evaluations.labels(rule=rule.name, outcome=outcome)

    # -- planning -------------------------------------------------------------

    def _target(self, rule: WindowRule, now: datetime, watermark: datetime | None) -> float | None:
        if rule.pipeline:
            return now.timestamp()
        # No pass has completed: no window is known to be whole.
        return watermark.timestamp() if watermark is not None else None

    def plans(
        self, stored: Stored, progress: Mapping[str, float], now: datetime, max_points: int | None
    ) -> list[Plan]:
        """Each rule's next points: from the point it reached (its states' evaluation time
        in a state file older than `progress`) up to its target."""
        watermark = self.state.scored_through()
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
            found = plan(rule, states, last, target, self.options.step_s, max_points)
            if found is not None:
                plans.append(found)
        return plans

    def slid(self, plans: Sequence[Plan], rows: Rows) -> Iterable[tuple[Plan, Evaluation]]:
        """Each plan evaluated: the rules on traces over the kept buckets of the history
        (observer.alerts.families.cache), the others over the daemon's samples, read once
        per cluster of overlapping plans."""
        traced = [p for p in plans if not p.rule.pipeline]
        if traced:
            windows = self.buckets.windows(rows, [(p.rule, at) for p in traced for at in p.points])
            for each in traced:
                rule = each.rule
                yield (
                    each,
                    slide_merged(
                        rule,
                        lambda at, rule=rule: windows[(rule, at)],  # type: ignore[misc]
                        each.states,
                        each.points,
                        self.options.max_groups,
                    ),
                )
        for start, end, members in clusters([p for p in plans if p.rule.pipeline]):
            keys = row_keys({p.rule.expression.signal for p in members})
            loaded = rows.rows(start, end, keys, traces=False, samples=True)
            for each in members:
                yield (
                    each,
                    slide(
                        each.rule,
                        loaded,
                        each.states,
                        each.points,
                        self.options.max_groups,
                        ordered=True,
                    ),
                )

    # -- a step ---------------------------------------------------------------

    def step(
        self,
        now: datetime,
        rows: Rows,
        *,
        max_points: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> list[Outgoing]:
        """At most `max_points` evaluation points per rule; per rule its state, the point it
        reached and its messages in one transaction. `should_stop` is asked between rules."""
        plans = self.plans(self.state.alerts.load(), self.state.alerts.progress(), now, max_points)
        out: list[Outgoing] = []
        events: list[AlertEvent] = []
        done = left = 0
        reached: list[float] = []
        skipped = {id(p) for p in plans}
        desk = Desk(self.sender.routing, self.options.base_url, now, self.judge_unhealthy())
        for each, result in self.slid(plans, rows) if plans else ():
            if should_stop is not None and should_stop():
                break
            out.extend(self.commit(each, result, desk, rows))
            skipped.discard(id(each))
            events.extend(result.events)
            done += len(each.points)
            left += each.left
            reached.append(each.points[-1])
            if each.rule.name in JUDGE_HEALTH_RULES:  # the rules after it hold or tell by it
                desk = replace(desk, judge_unhealthy=self.judge_unhealthy())
        left += sum(len(p.points) + p.left for p in plans if id(p) in skipped)
        self.progress = Progress(tuple(events), done, left, tuple(reached))
        return out

    def commit(self, each: Plan, result: Evaluation, desk: Desk, rows: Rows) -> list[Outgoing]:
        """One rule's step: its events announced, its held alerts told when the judge is
        healthy again, its firing groups re-posted when caught up; saved and queued."""
        rule = each.rule
        states = dict(result.states)
        # Each group's layer (Alertmanager's identity of it) and hold, from the step's start.
        told = {g: s for g, s in each.states.items()}
        messages: list[Message] = []
        for event in result.events:
            if not event.notify:
                continue
            before = told.get(event.group, AlertState())
            found = self._triage(rule, event, rows)
            announced = announce(rule, event, before, found, desk)
            self._log(rule, event, before, announced.held, bool(announced.messages))
            told[event.group] = replace(
                before, layer=announced.layer, layer_note=announced.layer_note, held=announced.held
            )
            messages.extend(announced.messages)
        for group, state in list(states.items()):
            if state.status != "firing":
                self._triages.pop((rule.name, group), None)
                continue
            kept = told.get(group, state)
            state = states[group] = replace(
                state, layer=kept.layer, layer_note=kept.layer_note, held=kept.held
            )
            if state.held and not desk.judge_unhealthy:
                log.warning("alert_released", rule=rule.name, group=dict(group))
                triage = self._triage_of(rule, group, state.evaluated_at or each.points[-1], rows)
                messages.append(released(rule, group, state, result, triage, desk))
                states[group] = replace(state, held=False)
        if each.left == 0:  # caught up: re-post what fires to Alertmanager
            notified = {e.group for e in result.events if e.notify}
            for group, state in states.items():
                if state.status != "firing" or group in notified or state.held:
                    continue
                triage = None
                if not state.no_data_firing:
                    at = state.evaluated_at or each.points[-1]
                    triage = self._triages.get((rule.name, group)) or self._triage_of(
                        rule, group, at, rows
                    )
                again = refreshed(rule, group, state, result, triage, desk)
                if again is not None:
                    messages.append(again)
        out = self.sender.commit(rule.name, states, each.points[-1], messages)
        self._observe(rule, result, states)
        return out

    def _triage(self, rule: WindowRule, event: AlertEvent, rows: Rows) -> Triage | None:
        if event.transition not in ("firing", "renotified", "escalated", "deescalated"):
            return None
        return self._triage_of(rule, event.group, event.at, rows)

    def _triage_of(self, rule: WindowRule, group: GroupKey, at: float, rows: Rows) -> Triage | None:
        """The group's triage (kept while it fires); None when the history cannot be read:
        a page never waits on its triage."""
        try:
            found = triage_at(rule, group, at, rows)
        except Exception as error:
            log.error("alert_triage_failed", rule=rule.name, error=repr(error))
            return None
        if found is not None:
            self._triages[(rule.name, group)] = found
        return found

    def _log(
        self, rule: WindowRule, event: AlertEvent, before: AlertState, held: bool, told: bool
    ) -> None:
        group = dict(event.group)
        if held:
            log.warning(
                "alert_held",
                rule=rule.name,
                group=group,
                transition=event.transition,
                reason="the judge is unhealthy (judge_error_rate_high or judge_agreement_low)",
            )
        elif not told and before.held:
            log.warning("alert_held_cleared", rule=rule.name, group=group)
        else:
            log.warning(
                f"alert_{event.transition}",
                rule=rule.name,
                group=group,
                severity=event.severity,
                value=event.value,
                samples=event.samples,
            )

    def _observe(
        self, rule: WindowRule, result: Evaluation, states: Mapping[GroupKey, AlertState]
    ) -> None:
        if result.capped:
            log.warning("alert_groups_capped", rule=rule.name, left_out=result.capped)
        for state in states.values():
            self.metrics.alert_evaluations.labels(rule=rule.name, outcome=state.status).inc()
        self.sender.export_active(rule.name, states)

    # -- status ---------------------------------------------------------------

    def preview(
        self, stored: Stored, now: datetime, progress: Mapping[str, float], rows: Rows
    ) -> dict[str, Evaluation]:
        """Every rule brought all the way to its evaluation point from `stored` (nothing
        saved)."""
        plans = self.plans(stored, progress, now, None)
        return {each.rule.name: result for each, result in self.slid(plans, rows)}


class JudgeHealth(WindowRules):
    """The rules on the judge's own health (its error rate, its agreement with people, its
    canary), stepped before the others: while one fires, alerts on judge signals are held
    (docs/judge.md#a-drifting-judge)."""

    name = "judge health"

    def unhealthy(self) -> bool:
        stored = self.state.alerts.load()
        return any(
            state.status == "firing"
            for rule in self.rules
            for state in stored.get(rule.name, {}).values()
        )


def split_judge_health(rules: Sequence[WindowRule]) -> tuple[list[WindowRule], list[WindowRule]]:
    """The judge's health rules, and the others."""
    health = [r for r in rules if r.name in JUDGE_HEALTH_RULES]
    return health, [r for r in rules if r.name not in JUDGE_HEALTH_RULES]


def chain(*progresses: Progress) -> Progress:
    """The progress of several families' steps, as one."""
    return Progress(
        tuple(itertools.chain.from_iterable(p.events for p in progresses)),
        sum(p.points for p in progresses),
        sum(p.left for p in progresses),
        tuple(itertools.chain.from_iterable(p.reached for p in progresses)),
    )
