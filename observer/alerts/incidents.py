"""Incidents: the alerts one cause trips, told as one (pure). docs/alerts.md#incidents

A bad release trips several rules at once: the low-band rate of a query type, the
release regression on two signals, a grounding rule. Each alert still has its own
state, but a person is told of one incident:

- **The cause** of a firing alert is one (dimension, value) pair: among its triage's
  leading segment and its own group (environment apart; a release regression's group
  names its release), the pair of the first dimension in `CAUSE_DIMENSIONS` (a release
  before a version, a model, a prompt, a document, a query type, a trace name). `none`
  and `other` are no cause. Alerts on the daemon's own samples, the judge's health and
  missing data have none.
- **Joining.** An alert with a cause joins the open incident of the same cause in the
  same environment when it fires within `window_s` of that incident's latest symptom
  firing (each new symptom extends the window); otherwise it opens one. An alert
  without a cause (or with `window_s` = 0: correlation off) is an incident of its own,
  whose id is the alert's dedup key, as before incidents.
- **Roles.** The first symptom opens the incident (the page), a later one joins it, a
  symptom's repeat, escalation or re-post updates it, a symptom that ends while others
  fire is `symptom_resolved`, and the last one's end resolves the incident: said once,
  also to every notifier an earlier message of it reached (`Told.also`).

`tell` is the whole of it: the incidents as they stand and one message in, the
message as the notifiers send it (its incident and role) and the incident as it now
stands out. No clock: times are the events' (event time, so a backtest agrees).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from observer.state.rows import GroupKey, Incident, IncidentRole, Notification, Symptom

# Which pair of an alert's segments is its cause: the first of these it has.
CAUSE_DIMENSIONS: Final = (
    "release",
    "version",
    "model",
    "prompt",
    "top_doc",
    "query_type",
    "trace_name",
)
NOT_A_CAUSE: Final = frozenset({"", "none", "other"})
# Layers whose alerts are about observer or its judge, never about the answers' cause.
OWN_LAYERS: Final = frozenset({"judge", "pipeline"})
DEFAULT_WINDOW_S: Final = 900.0


@dataclass(frozen=True, slots=True)
class Told:
    """One message placed in its incident."""

    notification: Notification  # with its incident and role
    incident: Incident  # as it stands after the message
    also: tuple[str, ...] = ()  # notifiers beyond the message's own that must hear it


def environment_of(group: GroupKey) -> str:
    return dict(group).get("environment", "")


def cause_of(notification: Notification) -> tuple[str, str] | None:
    """The alert's cause: the first dimension of `CAUSE_DIMENSIONS` among its leading
    segment and its group; None when it has none or is about observer itself."""
    if notification.layer in OWN_LAYERS or notification.transition == "no_data":
        return None
    pairs: list[tuple[str, str]] = [p for p in notification.group if p[0] != "environment"]
    triage = notification.triage
    if triage is not None and triage.lead is not None:
        pairs.extend(triage.lead.where)
    found = [
        (key, value) for key, value in pairs if key in CAUSE_DIMENSIONS and value not in NOT_A_CAUSE
    ]
    if not found:
        return None
    return min(found, key=lambda pair: CAUSE_DIMENSIONS.index(pair[0]))


def incident_id(environment: str, cause: tuple[str, str], opened_at: float) -> str:
    """Stable for an incident across messages, restarts and replicas."""
    described = f"{environment}|{cause[0]}={cause[1]}|{opened_at:.3f}"
    return "observer-incident-" + hashlib.sha256(described.encode()).hexdigest()[:24]


def since_of(notification: Notification) -> float:
    """When the alert's change began: its triage's onset, else when it fired."""
    triage = notification.triage
    if triage is not None and triage.onset is not None:
        return min(triage.onset, notification.started_at.timestamp())
    return notification.started_at.timestamp()


def _symptom(notification: Notification, at: float) -> Symptom:
    return Symptom(
        rule=notification.rule,
        group=notification.group,
        key=notification.dedup_key,
        severity=notification.severity,
        value=notification.value,
        fired_at=at,
        summary=notification.summary,
        layer=notification.layer,
    )


def _holding(incidents: Iterable[Incident], key: str) -> Incident | None:
    """The open incident in which the alert `key` fires."""
    for incident in incidents:
        if incident.open and any(s.key == key and s.firing for s in incident.symptoms):
            return incident
    return None


def _joinable(
    incidents: Iterable[Incident],
    environment: str,
    cause: tuple[str, str],
    at: float,
    window_s: float,
) -> Incident | None:
    """The open incident of this cause whose latest symptom fired within the window."""
    fitting = [
        i
        for i in incidents
        if i.open
        and i.environment == environment
        and i.cause == (cause,)
        and 0 <= at - i.last_fired <= window_s
    ]
    return max(fitting, key=lambda i: (i.last_fired, i.id), default=None)


def _names(*groups: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for group in groups:
        out.extend(name for name in group if name not in out)
    return tuple(out)


def tell(
    incidents: Mapping[str, Incident] | Sequence[Incident],
    notification: Notification,
    names: Sequence[str],
    at: float,
    window_s: float = DEFAULT_WINDOW_S,
) -> Told:
    """Place one message of a window alert or a release regression in its incident;
    `names` are the notifiers it goes to, `at` its event time."""
    known = list(incidents.values()) if isinstance(incidents, Mapping) else list(incidents)
    holding = _holding(known, notification.dedup_key)
    transition = notification.transition
    if transition in ("firing", "no_data", "released") and holding is None:
        # A held alert told once the judge is healthy again is told for the first time.
        return _fired(known, notification, names, at, window_s)
    if transition == "resolved":
        return _ended(holding, notification, names, at)
    return _updated(holding, notification, names, at)


def _told(notification: Notification, incident: Incident, role: IncidentRole) -> Notification:
    return replace(notification, incident=incident, role=role)


def _fired(
    known: Sequence[Incident],
    notification: Notification,
    names: Sequence[str],
    at: float,
    window_s: float,
) -> Told:
    environment = environment_of(notification.group)
    cause = cause_of(notification) if window_s > 0 else None
    symptom = _symptom(notification, at)
    began = since_of(notification)
    joined = None if cause is None else _joinable(known, environment, cause, at, window_s)
    if joined is not None:
        kept = tuple(s for s in joined.symptoms if s.key != symptom.key)
        incident = replace(
            joined,
            symptoms=(*kept, symptom),
            last_fired=max(joined.last_fired, at),
            since=min(joined.since, began),
            notified=_names(joined.notified, names),
        )
        return Told(_told(notification, incident, "joined"), incident)
    incident = Incident(
        id=notification.dedup_key if cause is None else incident_id(environment, cause, at),
        environment=environment,
        cause=() if cause is None else (cause,),
        since=began,
        opened_at=at,
        last_fired=at,
        symptoms=(symptom,),
        notified=_names(names),
    )
    return Told(_told(notification, incident, "opened"), incident)


def _alone(notification: Notification, names: Sequence[str], at: float) -> Incident:
    """An alert told before incidents existed (firing across the upgrade): its own."""
    began = min(since_of(notification), at)
    symptom = replace(_symptom(notification, at), fired_at=began)
    return Incident(
        id=notification.dedup_key,
        environment=environment_of(notification.group),
        cause=(),
        since=began,
        opened_at=began,
        last_fired=began,
        symptoms=(symptom,),
        notified=_names(names),
    )


def _ended(
    holding: Incident | None, notification: Notification, names: Sequence[str], at: float
) -> Told:
    incident = holding if holding is not None else _alone(notification, names, at)
    symptoms = tuple(
        replace(s, resolved_at=at, value=notification.value)
        if s.key == notification.dedup_key and s.firing
        else s
        for s in incident.symptoms
    )
    still = any(s.firing for s in symptoms)
    incident = replace(
        incident,
        symptoms=symptoms,
        notified=_names(incident.notified, names),
        resolved_at=None if still else at,
    )
    if still:
        return Told(_told(notification, incident, "symptom_resolved"), incident)
    also = tuple(n for n in incident.notified if n not in names)
    return Told(_told(notification, incident, "resolved"), incident, also)


def _updated(
    holding: Incident | None, notification: Notification, names: Sequence[str], at: float
) -> Told:
    incident = holding if holding is not None else _alone(notification, names, at)
    if notification.transition != "closing":  # the old severity's close: nothing changes
        symptoms = tuple(
            replace(
                s,
                severity=notification.severity,
                value=notification.value,
                summary=notification.summary,
            )
            if s.key == notification.dedup_key and s.firing
            else s
            for s in incident.symptoms
        )
        incident = replace(incident, symptoms=symptoms)
    incident = replace(incident, notified=_names(incident.notified, names))
    return Told(_told(notification, incident, "update"), incident)


def forget(incidents: Sequence[Incident], kept: set[str], at: float) -> list[Incident]:
    """The incidents changed when the rules not in `kept` are no longer configured: their
    symptoms end (nobody is told: the rule is gone), an incident left with none resolves."""
    changed: list[Incident] = []
    for incident in incidents:
        if not incident.open or all(s.rule in kept for s in incident.firing):
            continue
        symptoms = tuple(
            s if s.rule in kept or not s.firing else replace(s, resolved_at=at)
            for s in incident.symptoms
        )
        still = any(s.firing for s in symptoms)
        changed.append(replace(incident, symptoms=symptoms, resolved_at=None if still else at))
    return changed
