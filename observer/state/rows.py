"""The rows the state file keeps for alerting, as values: the signal history's
`Row`, a rule group's `AlertState` between evaluations, and the notifications
waiting in its outbox (`Outgoing` written, `Queued` read back).

They live here, below both the store and alerting, so that the store never
imports alerting: observer.alerts builds and reads them, observer.state keeps them.

A `Notification` is built by the pure engine (window rules), by the trace-rule
evaluator (one bad trace, or an hourly digest) or by `observer alerts test`,
and handed to every notifier the rule names. Notifiers only format and send it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final, Literal

Value = float | str | bool | None
GroupKey = tuple[tuple[str, str], ...]
Status = Literal["ok", "pending", "firing"]


# The dimensions a row keeps beside environment and query type (docs/alerts.md#window-rules).
DIMS: Final = ("trace_name", "release", "version", "model", "prompt", "top_doc")
# A label a row does not carry reads as this (as a trace without a query type does).
NO_LABEL: Final = "none"
# Every row without dimensions (the daemon's samples, most skip rows) shares this one.
NO_DIMS: Final[Mapping[str, str]] = MappingProxyType({})


def _no_dims() -> Mapping[str, str]:
    return NO_DIMS


@dataclass(frozen=True, slots=True)
class Row:
    """One entry of the signal history: a scored trace, or a sample of the daemon.

    `dims` holds the trace's other dimensions (`DIMS`), only those it has: what rules
    may group by and filter on besides environment and query type.
    """

    at: float  # event time, unix seconds: the answer generation's start (or the sample's time)
    values: Mapping[str, Value]
    trace_id: str | None = None
    project_id: str | None = None
    environment: str = "default"
    query_type: str = NO_LABEL
    dims: Mapping[str, str] = field(default_factory=_no_dims)

    def label(self, name: str) -> str:
        """The row's value of a dimension; `none` when it has none."""
        if name == "environment":
            return self.environment
        if name == "query_type":
            return self.query_type
        return self.dims.get(name, NO_LABEL)


@dataclass(frozen=True, slots=True)
class Example:
    trace_id: str
    project_id: str | None
    value: float


@dataclass(frozen=True, slots=True)
class AlertState:
    """What survives between evaluations (and restarts) for one rule and group."""

    status: Status = "ok"
    severity: str | None = None  # of the pending or firing alert
    since: float | None = None  # pending since, or firing since
    last_notified: float | None = None
    escalate_since: float | None = None  # a page-level breach while firing as warn
    no_data_since: float | None = None
    no_data_firing: bool = False  # firing because the data stopped (no_data = "alert")
    value: float | None = None
    samples: int = 0
    evaluated_at: float | None = None
    # The layer the firing alert's triage blamed when it began: Alertmanager knows the alert
    # by its labels, `layer` among them, so it stays the same until the alert resolves.
    layer: str | None = None
    # Firing while the judge was unhealthy, nobody told yet (docs/judge.md#a-drifting-judge).
    held: bool = False
    # Why no layer was named when it began (its resolve says the same).
    layer_note: str | None = None


@dataclass(frozen=True, slots=True)
class Segment:
    """Samples that share one value of a dimension (or two), set against the rest."""

    where: tuple[tuple[str, str], ...]  # (("release", "2026.12.03-rc2"), ("query_type", "pricing"))
    samples: int
    bad: int
    bad_rate: float
    rest_bad_rate: float
    value: float | None  # the rule's aggregate inside
    rest_value: float | None  # ... and outside
    share: float  # of all the bad samples of the window
    excess: float  # bad samples beyond what the rest's bad share predicts

    def text(self) -> str:
        return " and ".join(f"{k}={v}" for k, v in self.where)

    def as_dict(self) -> dict[str, Any]:
        return {
            "where": dict(self.where),
            "samples": self.samples,
            "bad": self.bad,
            "bad_rate": self.bad_rate,
            "rest_bad_rate": self.rest_bad_rate,
            "value": self.value,
            "rest_value": self.rest_value,
            "share_of_bad": self.share,
            "excess": self.excess,
        }


@dataclass(frozen=True, slots=True)
class Triage:
    """The triage of one firing group; `segments` ranked, the leading one first."""

    samples: int  # in the window
    bad: int
    bad_when: str = ""  # what makes one sample bad: `numeric_grounding < 0.95`
    segments: tuple[Segment, ...] = ()
    onset: float | None = None  # unix seconds
    onset_open: bool = False  # the history read starts there: the change began then or before
    layer: str | None = None
    layer_shares: tuple[tuple[str, float], ...] = ()
    examples: tuple[Example, ...] = ()
    # Bad samples of the leading segment no layer rule could place, by why (most first):
    # `no_retrieval_score` (§ unknown is not zero), `ambiguous`, `refused_without_evidence`.
    unclear: tuple[tuple[str, int], ...] = ()

    @property
    def lead(self) -> Segment | None:
        return self.segments[0] if self.segments else None

    @property
    def whole_group(self) -> bool:
        """Every sample of the window is bad: no segment can stand out, the group is it."""
        return self.samples > 0 and self.bad == self.samples

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "bad": self.bad,
            "bad_when": self.bad_when,
            "segments": [s.as_dict() for s in self.segments],
            "onset": self.onset,
            "onset_open": self.onset_open,
            "layer": self.layer,
            "layer_shares": dict(self.layer_shares),
            "unclear": dict(self.unclear),
            "examples": [e.trace_id for e in self.examples],
        }

    def fields(self) -> dict[str, Any]:
        """`as_dict` with the onset as RFC 3339 text too, for receivers' JSON."""
        out = self.as_dict()
        if self.onset is not None:
            moment = datetime.fromtimestamp(self.onset, UTC)
            out["onset_at"] = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
        return out

    @classmethod
    def stored(cls, data: Mapping[str, Any]) -> Triage:
        """Back from the outbox, where orjson wrote the dataclass field by field."""
        segments = tuple(
            Segment(**{**s, "where": tuple((str(k), str(v)) for k, v in s["where"])})
            for s in data.get("segments", ())
        )
        return cls(
            samples=int(data.get("samples", 0)),
            bad=int(data.get("bad", 0)),
            bad_when=str(data.get("bad_when", "")),
            segments=segments,
            onset=data.get("onset"),
            onset_open=bool(data.get("onset_open", False)),
            layer=data.get("layer"),
            layer_shares=tuple((str(k), float(v)) for k, v in data.get("layer_shares", ())),
            examples=tuple(Example(**e) for e in data.get("examples", ())),
            unclear=tuple((str(k), int(v)) for k, v in data.get("unclear", ())),
        )


Severity = Literal["warn", "page"]
NotificationKind = Literal["window", "trace", "digest", "test"]
NotificationState = Literal["firing", "resolved"]
# What a message is to its incident (docs/alerts.md#incidents): the first symptom opens it
# (the page), a later one joins it, a symptom's repeat or change updates it, a symptom that
# ends while others fire is `symptom_resolved`, the last one's end resolves it (said once).
IncidentRole = Literal["opened", "joined", "update", "symptom_resolved", "resolved"]


@dataclass(frozen=True, slots=True)
class Symptom:
    """One alert (a rule and a group of it) inside an incident, as last told."""

    rule: str
    group: GroupKey
    key: str  # the alert's dedup key: stable for the rule and group
    severity: str
    value: float | None
    fired_at: float  # unix seconds (event time)
    summary: str
    resolved_at: float | None = None
    layer: str | None = None

    @property
    def firing(self) -> bool:
        return self.resolved_at is None

    @classmethod
    def stored(cls, data: Mapping[str, Any]) -> Symptom:
        group = tuple((str(k), str(v)) for k, v in data.get("group", ()))
        return cls(**{**data, "group": group})


@dataclass(frozen=True, slots=True)
class Incident:
    """Alerts that share one cause: the same leading segment (a release, a model, ...) in
    one environment, firing within the correlation window; an alert without a shared
    cause is an incident of its own, its id the alert's dedup key."""

    id: str
    environment: str
    cause: tuple[tuple[str, str], ...]  # (("release", "2026.12.07-rc1"),); () for none
    since: float  # when the change began (the earliest onset of a symptom), else first fired
    opened_at: float
    last_fired: float  # the latest symptom's firing: the correlation window runs from it
    symptoms: tuple[Symptom, ...]
    notified: tuple[str, ...] = ()  # the notifiers its messages went to
    resolved_at: float | None = None

    @property
    def open(self) -> bool:
        return self.resolved_at is None

    @property
    def firing(self) -> tuple[Symptom, ...]:
        return tuple(s for s in self.symptoms if s.firing)

    @property
    def severity(self) -> Severity:
        """`page` while a firing symptom pages (or, resolved, when any did), else `warn`."""
        told = self.firing or self.symptoms
        return "page" if any(s.severity == "page" for s in told) else "warn"

    def as_dict(self) -> dict[str, Any]:
        """For receivers' JSON: times as RFC 3339, the cause and groups as objects."""
        return {
            "id": self.id,
            "state": "open" if self.open else "resolved",
            "environment": self.environment,
            "cause": dict(self.cause) or None,
            "since": _rfc3339(self.since),
            "opened_at": _rfc3339(self.opened_at),
            "resolved_at": _rfc3339(self.resolved_at) if self.resolved_at is not None else None,
            "severity": self.severity,
            "symptoms": [
                {
                    "rule": s.rule,
                    "group": dict(s.group),
                    "state": "firing" if s.firing else "resolved",
                    "severity": s.severity,
                    "value": s.value if s.value is None or math.isfinite(s.value) else None,
                    "summary": s.summary,
                    "layer": s.layer,
                    "fired_at": _rfc3339(s.fired_at),
                    "resolved_at": _rfc3339(s.resolved_at) if s.resolved_at is not None else None,
                }
                for s in self.symptoms
            ],
        }

    @classmethod
    def stored(cls, data: Mapping[str, Any]) -> Incident:
        """Back from the state file or the outbox, where orjson wrote it field by field."""
        return cls(
            id=str(data["id"]),
            environment=str(data["environment"]),
            cause=tuple((str(k), str(v)) for k, v in data.get("cause", ())),
            since=float(data["since"]),
            opened_at=float(data["opened_at"]),
            last_fired=float(data["last_fired"]),
            symptoms=tuple(Symptom.stored(s) for s in data.get("symptoms", ())),
            notified=tuple(str(n) for n in data.get("notified", ())),
            resolved_at=data.get("resolved_at"),
        )


def _rfc3339(at: float) -> str:
    moment = datetime.fromtimestamp(at, UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Notification:
    """One message about one alert (a rule and one group of it).

    `dedup_key` is stable for a rule and group across messages and restarts
    (PagerDuty's `dedup_key`, Alertmanager's label set); `id` is unique per
    message (the Standard Webhooks `webhook-id`). `group` holds the group's
    labels in `group_by` order, e.g. (("environment", "production"),
    ("query_type", "billing")). `trace_urls` links up to 5 example traces in
    Langfuse, worst first.
    """

    id: str
    dedup_key: str
    rule: str
    kind: NotificationKind
    state: NotificationState
    severity: Severity
    group: tuple[tuple[str, str], ...]
    summary: str
    description: str
    started_at: datetime
    sent_at: datetime
    ended_at: datetime | None = None
    signal: str | None = None
    aggregate: str | None = None
    value: float | None = None
    op: str | None = None
    threshold: float | None = None
    window_s: float | None = None
    samples: int | None = None
    trace_urls: tuple[str, ...] = ()
    runbook_url: str | None = None
    # What changed, where, since when and whose (a firing window alert; alerts.triage).
    triage: Triage | None = None
    layer: str | None = None  # the alert's layer label (kept from firing to resolved)
    layer_note: str | None = None  # without a layer: why none is named ("layer unclear")
    # What happened to the alert: firing, renotified, escalated, deescalated, no_data,
    # resolved; `refresh` (an Alertmanager re-post), `closing` (its old severity closed),
    # `released` (told once the judge is healthy again); "" for a trace, digest or test.
    transition: str = ""
    incident: Incident | None = None  # the incident as it stands after this message
    role: IncidentRole | None = None
    # The receiver's id of the incident's first message to this notifier (Slack's `ts`),
    # set by the delivery when it sends: a later message of the incident replies to it.
    thread: str | None = None

    @property
    def incident_key(self) -> str:
        """What a receiver keeps one thing per incident by (PagerDuty's dedup_key)."""
        return self.incident.id if self.incident is not None else self.dedup_key

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.group)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A notification for one notifier, to be written to the state file's outbox.

    `supersede`: a newer message with the same key replaces one still waiting
    (Alertmanager's re-posts of a firing alert: only the latest is worth sending).
    """

    notifier: str
    notification: Notification
    supersede: str | None = None


@dataclass(frozen=True, slots=True)
class Queued:
    """A notification waiting in the outbox (oldest first per notifier, by `id`)."""

    id: int
    notifier: str
    notification: Notification
    attempts: int = 0
