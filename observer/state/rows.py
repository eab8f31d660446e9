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

    @property
    def lead(self) -> Segment | None:
        return self.segments[0] if self.segments else None

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
        )


Severity = Literal["warn", "page"]
NotificationKind = Literal["window", "trace", "digest", "test"]
NotificationState = Literal["firing", "resolved"]


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
