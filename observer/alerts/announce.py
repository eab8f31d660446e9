"""What a window alert's events become: messages for notifiers, and the group's new layer
and hold (pure: values in, values out, nothing it is handed is changed).

- **Where it goes.** A rule's notifiers (all of them when it names none), unless its
  layer has a route (`Routing.routed`): a firing alert goes where the first route of
  the layer its triage blames says; its re-posts and its resolve go the same way, the
  layer being kept in the group's state from firing to resolved.
- **Held.** While the judge is unhealthy, an alert on a judge signal is held: nobody is
  told it fired (`hold`); told once the judge is healthy again (`released`), or never
  if it resolved meanwhile.
- **Alertmanager** knows an alert by its labels, severity and layer among them: when
  the severity changes, the alert of the old severity is closed (`closing`); while it
  fires it is re-posted after each step that catches up (`refreshed`), so it never
  times out there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from observer.alerts.engine import AlertEvent, AlertState, Evaluation, GroupKey
from observer.alerts.messages import layer_of_window, window_notification
from observer.alerts.rules import JUDGE_SIGNALS, Route, WindowRule
from observer.state.rows import Notification, Triage

REFRESHING = ("firing", "renotified", "escalated", "deescalated")


@dataclass(frozen=True, slots=True)
class Message:
    """One notification and the notifiers it goes to. `supersede`: a newer message with the
    same key replaces one still waiting (Alertmanager's re-posts of a firing alert)."""

    names: tuple[str, ...]
    notification: Notification
    supersede: str | None = None


@dataclass(frozen=True, slots=True)
class Routing:
    """Who gets what: the configured notifiers (name -> kind) and the routes by layer."""

    notifiers: Mapping[str, str]
    routes: tuple[Route, ...] = ()

    def targets(self, notify: Sequence[str]) -> tuple[str, ...]:
        """The notifiers a rule names; all of them when it names none."""
        return tuple(notify) or tuple(self.notifiers)

    def routed(self, rule: str, notify: Sequence[str], layer: str | None) -> tuple[str, ...]:
        """A window alert's notifiers: the first route of its layer's, else the rule's."""
        for route in self.routes:
            if route.matches(rule, layer):
                return route.notify
        return self.targets(notify)

    def managers(self, names: Sequence[str]) -> tuple[str, ...]:
        """The Alertmanager notifiers among `names`."""
        return tuple(n for n in names if self.notifiers.get(n) == "alertmanager")


@dataclass(frozen=True, slots=True)
class Desk:
    """What announcing needs beside the event: who gets what, the Langfuse base URL for
    trace links, the moment messages are made, and whether the judge is unhealthy."""

    routing: Routing
    base_url: str
    now: datetime
    judge_unhealthy: bool = False


@dataclass(frozen=True, slots=True)
class Announced:
    """An event's messages, and the group's layer, why none, and hold, as they now stand."""

    messages: tuple[Message, ...] = ()
    layer: str | None = None
    layer_note: str | None = None
    held: bool = False


def still_firing(
    group: GroupKey, state: AlertState, result: Evaluation, rule: WindowRule, now: datetime
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


def hold(rule: WindowRule, event: AlertEvent, state: AlertState, desk: Desk) -> bool | None:
    """Whether the event of an alert on a judge signal is held (True), drops a hold that
    was never told (False: nothing to resolve), or is told (None)."""
    if rule.expression.signal not in JUDGE_SIGNALS or rule.pipeline:
        return None
    if event.transition == "resolved" and state.held:
        return False
    if desk.judge_unhealthy and event.transition != "resolved":
        return True
    return None


def announce(
    rule: WindowRule,
    event: AlertEvent,
    state: AlertState,
    triage: Triage | None,
    desk: Desk,
) -> Announced:
    """The messages of one notifying event; `state` is the group's before it (its layer,
    why none, and hold); `triage` the caller's, for an event that tells one."""
    held = hold(rule, event, state, desk)
    if held is not None:
        return Announced(layer=state.layer, layer_note=state.layer_note, held=held)
    layer, note = state.layer, state.layer_note
    if event.transition in ("firing", "no_data"):
        layer, note = layer_of_window(rule, event.transition, triage)
    messages: list[Message] = []
    changed = event.previous_severity and event.previous_severity != event.severity
    if event.transition in ("escalated", "deescalated", "no_data") and changed:
        # Alertmanager knows an alert by its labels, severity among them: close the old one.
        closing = window_notification(
            rule,
            event,
            desk.base_url,
            desk.now,
            transition="closing",
            severity=event.previous_severity,
            layer=state.layer,
            layer_note=state.layer_note,
        )
        managers = desk.routing.managers(desk.routing.routed(rule.name, rule.notify, state.layer))
        if managers:
            messages.append(Message(managers, closing))
    told = triage if event.transition in REFRESHING else None
    notification = window_notification(
        rule, event, desk.base_url, desk.now, triage=told, layer=layer, layer_note=note
    )
    # The resolve goes where the page went: the layer is kept from firing to resolved.
    names = desk.routing.routed(rule.name, rule.notify, layer)
    messages.append(Message(names, notification))
    if event.transition in ("resolved", "no_data"):
        layer, note = (None, None) if event.transition == "resolved" else (layer, note)
    return Announced(tuple(messages), layer, note, held=False)


def released(
    rule: WindowRule,
    group: GroupKey,
    state: AlertState,
    result: Evaluation,
    triage: Triage | None,
    desk: Desk,
) -> Message:
    """A held alert still firing once the judge is healthy again: told now."""
    event = still_firing(group, state, result, rule, desk.now)
    notification = window_notification(
        rule,
        event,
        desk.base_url,
        desk.now,
        transition="released",
        triage=triage,
        layer=state.layer,
        layer_note=state.layer_note,
    )
    return Message(desk.routing.routed(rule.name, rule.notify, state.layer), notification)


def refreshed(
    rule: WindowRule,
    group: GroupKey,
    state: AlertState,
    result: Evaluation,
    triage: Triage | None,
    desk: Desk,
) -> Message | None:
    """An Alertmanager re-post of a group that fires (None when no Alertmanager gets it):
    only the latest is worth sending, so it replaces one still waiting."""
    managers = desk.routing.managers(desk.routing.routed(rule.name, rule.notify, state.layer))
    if not managers:
        return None
    event = still_firing(group, state, result, rule, desk.now)
    notification = window_notification(
        rule,
        event,
        desk.base_url,
        desk.now,
        transition="refresh",
        triage=None if state.no_data_firing else triage,
        layer=state.layer,
        layer_note=state.layer_note,
    )
    return Message(managers, notification, f"refresh:{notification.dedup_key}")
