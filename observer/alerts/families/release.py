"""Release regressions: a new release against the one before it, every `every_s` of event
time up to the watermark (observer.alerts.regression decides; SQLite sums the history).

A finding that begins fires, one that ends resolves; its state is a group of the rule's
alert state, shown by `alerts status`, `observer_alerts_active` and the dashboards like
any window rule's. Its layer is placed as a triage places one, over the new release's
samples in the group that are worse than the release before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

import structlog

from observer.alerts.announce import Message
from observer.alerts.engine import MAX_EXAMPLES, Example
from observer.alerts.families import Rows
from observer.alerts.messages import regression_notification
from observer.alerts.notifiers._text import layer_note
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
from observer.alerts.sender import Sender
from observer.alerts.triage import blame
from observer.state import State
from observer.state.releases import first_seen, release_rows, release_stats
from observer.state.rows import AlertState, Outgoing, Triage
from observer.state.slices import Query, places
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.alerts")


def release_findings(rule: RegressionRule, rows: Rows, at: float) -> list[Finding]:
    """`regression.compare` at `at`, its statistics computed by SQLite over the stored
    history rather than from rows read into memory (bench/triage.py)."""
    start = at - rule.read_s
    groups = other_groups(rule)
    signals = [c.name for c in rule.checks]
    found: list[Finding] = []
    with rows.connection() as db:
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


def layer_of_finding(
    rule: RegressionRule, finding: Finding, rows: Rows, at: float
) -> tuple[str | None, str | None]:
    """The layer of the new release's samples worse than the one before it, placed as a
    triage places a bad sample; or None and why."""
    check = next(c for c in rule.checks if c.name == finding.signal)
    expression = check.expression
    scope = tuple(sorted((k, v) for k, v in finding.group if k != "signal"))
    query = Query(
        signal=expression.signal,
        op=expression.op,
        operand=expression.operand,
        bad_op=None if check.aggregate == "rate" else check.worse,
        line=finding.before_value,
        scope=scope,
    )
    with rows.connection() as db:
        counted = places(db, query, (), at - rule.read_s, at)
    layer, shares, unclear = blame(counted)
    if layer is not None:
        return layer, None
    told = Triage(samples=0, bad=sum(counted.values()), layer_shares=shares, unclear=unclear)
    return None, layer_note(told)


class Regressions:
    name = "release regressions"

    def __init__(
        self,
        rules: Sequence[RegressionRule],
        state: State,
        sender: Sender,
        metrics: Metrics,
        *,
        base_url: str,
    ) -> None:
        self.rules = tuple(rules)
        self.state = state
        self.sender = sender
        self.metrics = metrics
        self.base_url = base_url
        for rule in self.rules:
            for outcome in ("ok", "firing"):
                metrics.alert_evaluations.labels(rule=rule.name, outcome=outcome)

    def step(self, now: datetime, rows: Rows) -> list[Outgoing]:
        """Each rule, every `every_s` of event time up to the watermark: the findings that
        began fire, those that ended resolve."""
        watermark = self.state.scored_through()
        if watermark is None or not self.rules:
            return []
        at = watermark.timestamp()
        progress = self.state.alerts.progress()
        stored = self.state.alerts.load()
        out: list[Outgoing] = []
        for rule in self.rules:
            last = progress.get(rule.name)
            if last is not None and at - last < rule.every_s:
                continue
            before = stored.get(rule.name, {})
            found = release_findings(rule, rows, at)
            states, happened = regression_step(found, before, at)
            for group, state in states.items():  # the layer, kept from firing to resolved
                if group in before:
                    kept = before[group]
                    states[group] = replace(state, layer=kept.layer, layer_note=kept.layer_note)
            messages: list[Message] = []
            for transition, group, finding in happened:
                log.warning(f"alert_{transition}", rule=rule.name, group=dict(group))
                told = states.get(group) or before.get(group) or AlertState()
                if finding is not None:
                    layer, note = self._layer(rule, finding, rows, at)
                    told = states[group] = replace(told, layer=layer, layer_note=note)
                since = before[group].since if group in before else at
                notification = regression_notification(
                    rule,
                    group,
                    finding,
                    at,
                    since or at,
                    self.base_url,
                    now,
                    layer=told.layer,
                    layer_note=told.layer_note,
                )
                messages.append(Message(self.sender.routing.targets(rule.notify), notification))
            out.extend(self.sender.commit(rule.name, states, at, messages))
            self.sender.export_active(rule.name, states)
            outcome = "firing" if states else "ok"
            self.metrics.alert_evaluations.labels(rule=rule.name, outcome=outcome).inc()
        return out

    def _layer(
        self, rule: RegressionRule, finding: Finding, rows: Rows, at: float
    ) -> tuple[str | None, str | None]:
        try:
            return layer_of_finding(rule, finding, rows, at)
        except Exception as error:  # a page never waits on its layer
            log.error("alert_triage_failed", rule=rule.name, error=repr(error))
            return None, "its layer could not be read from the history"

    def export(self) -> None:
        """What fired before a restart is active now: exported before the first step."""
        stored = self.state.alerts.load()
        for rule in self.rules:
            self.sender.export_active(rule.name, stored.get(rule.name, {}))
