"""Where every rule family's decisions become outbox rows (the one door to the notifiers).

    family --(state, messages)--> Sender.commit --> incidents placed (alerts.incidents)
                                               --> one transaction: state, incidents, outbox
                                               --> the notifiers' lanes woken

A message of a window alert or a release regression is placed in its incident first
(`observer.alerts.incidents.tell`): it leaves carrying the incident and its role, and
the last symptom's resolve also goes to every notifier an earlier message of the
incident reached (not Alertmanager's: there each symptom is an alert of its own, and
its own resolve closes it). A name the configuration does not have is counted as a
drop (`unknown_notifier`), and what the outbox drops to stay within its size too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from observer.alerts.announce import Message, Routing
from observer.alerts.delivery import Delivery
from observer.alerts.incidents import DEFAULT_WINDOW_S, tell
from observer.state import State
from observer.state.rows import AlertState, Example, GroupKey, Incident, Outgoing
from observer.telemetry.metrics import Metrics


class Sender:
    def __init__(
        self,
        state: State,
        metrics: Metrics,
        routing: Routing,
        delivery: Delivery | None,
        *,
        correlation_window_s: float = DEFAULT_WINDOW_S,
    ) -> None:
        """`correlation_window_s`: how long after an incident's latest symptom fired an alert
        of the same cause joins it (0: every alert is an incident of its own)."""
        self.state = state
        self.metrics = metrics
        self.routing = routing
        self.delivery = delivery
        self.window_s = correlation_window_s
        self.max_queued = delivery.queue_size if delivery is not None else 1000

    def outgoing(self, message: Message) -> list[Outgoing]:
        """A message for each of its notifiers the configuration has."""
        if self.delivery is None or not message.names:
            return []
        known = self.delivery.known(message.names, message.notification)
        return [Outgoing(name, message.notification, message.supersede) for name in known]

    def place(
        self, messages: Sequence[Message], at: float
    ) -> tuple[list[Outgoing], list[Incident]]:
        """The messages placed in their incidents (window alerts and release regressions),
        as outbox rows; and the incidents they changed."""
        if not any(m.notification.kind == "window" for m in messages):
            return [o for m in messages for o in self.outgoing(m)], []
        incidents = {i.id: i for i in self.state.alerts.incidents()}
        changed: dict[str, Incident] = {}
        out: list[Outgoing] = []
        for message in messages:
            if message.notification.kind != "window":
                out.extend(self.outgoing(message))
                continue
            told = tell(incidents, message.notification, message.names, at, self.window_s)
            incidents[told.incident.id] = changed[told.incident.id] = told.incident
            also = [n for n in told.also if n not in self.routing.managers(told.also)]
            names = (*message.names, *also)
            out.extend(self.outgoing(Message(names, told.notification, message.supersede)))
        return out, list(changed.values())

    def commit(
        self,
        rule: str,
        states: Mapping[GroupKey, AlertState],
        at: float,
        messages: Sequence[Message],
    ) -> list[Outgoing]:
        """A rule's step: its whole state, the point it reached, its messages placed in
        their incidents, in one transaction; the lanes woken. What was queued."""
        outgoing, incidents = self.place(messages, at)
        dropped = self.state.alerts.commit(
            rule, states, at, outgoing, self.max_queued, incidents=incidents
        )
        self.count_dropped(dropped, outgoing)
        if incidents:
            self.export_incidents()
        self.wake(outgoing)
        return outgoing

    def admit(
        self,
        rule: str,
        trace_id: str,
        hour: str,
        at: float,
        example: Example,
        cap: int,
        message: Message,
    ) -> tuple[str, list[Outgoing]]:
        """A trace rule's trace: notified now, kept for the digest, or a duplicate."""
        outgoing = self.outgoing(message)
        admitted = self.state.alerts.admit(
            rule, trace_id, hour, at, example, cap, outgoing, self.max_queued
        )
        return admitted, outgoing if admitted == "notify" else []

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

    def export_incidents(self) -> None:
        """`observer_alert_incidents_open{environment}` from the incidents open now."""
        counts: Counter[str] = Counter(i.environment for i in self.state.alerts.incidents())
        self.metrics.set_incidents_open(counts)

    def count_dropped(self, dropped: Mapping[str, int], outgoing: Sequence[Outgoing]) -> None:
        if self.delivery is not None and dropped and outgoing:
            self.delivery.count_dropped(dropped, outgoing[-1].notification)

    def wake(self, outgoing: Iterable[Outgoing]) -> None:
        names = sorted({o.notifier for o in outgoing})
        if self.delivery is not None and names:
            self.delivery.wake(names)
