"""Every message a notifier sends is true in its words: a table over every notifier's
rendering (Slack's blocks and text, PagerDuty's event, Alertmanager's alert, the
webhook's JSON) of every kind of alert, built as the daemon builds them.

For each: no `inf`, `nan` or `None` in anything a person reads (and JSON a receiver
accepts); a resolve says its value is below (or above) its line in true words; one
moment is called "since"; the layer is named, or said unclear with why; internal
values read as people say them (uncited answers, never `top_doc=none`); a group whose
every sample is bad is "the whole group", never "no segment".
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from observer.alerts.engine import AlertEvent, Example, Top
from observer.alerts.incidents import tell
from observer.alerts.messages import (
    digest_notification,
    regression_notification,
    trace_notification,
    window_notification,
)
from observer.alerts.notifiers.alertmanager import AlertmanagerNotifier
from observer.alerts.notifiers.pagerduty import PagerDutyNotifier
from observer.alerts.notifiers.slack import blocks, text
from observer.alerts.notifiers.webhook import payload
from observer.alerts.regression import Finding, default_regression_rules
from observer.alerts.rules import WindowRule, default_trace_rules, default_window_rules
from observer.alerts.triage import triage
from observer.state.rows import Incident, Notification, Row, Segment, Triage
from tests.alerts.test_triage import PROD, T, grounding_rule, release_scenario

NOW = datetime.fromtimestamp(T + 30, UTC)
BASE = "https://langfuse.example.com"
RULES = {r.name: r for r in default_window_rules()}
NEW = "2026.12.03-rc2"
PRICING = (("environment", "production"), ("query_type", "pricing"))


def event(rule: WindowRule, transition: str, value: float | None, **changes: Any) -> AlertEvent:
    made = {
        "rule": rule.name,
        "group": PRICING,
        "transition": transition,
        "at": T,
        "severity": "page",
        "previous_severity": None,
        "value": value,
        "samples": 812,
        "since": T - 600,
        "examples": (Example("t1", "p1", 1.0),),
    }
    made.update(changes)
    return AlertEvent(**made)  # type: ignore[arg-type]


def real_triage() -> Triage:
    """The release scenario's triage: release, query type, onset, generation."""
    return triage(grounding_rule(), PROD, release_scenario(), T)


UNCITED = Triage(
    samples=400,
    bad=120,
    bad_when="invalid_citations > 0",
    segments=(Segment((("top_doc", "none"),), 100, 90, 0.9, 0.1, 0.9, 0.1, 0.75, 60.0),),
    onset=T - 1500,
    layer=None,
    layer_shares=(),
    unclear=(("no_retrieval_score", 90),),
)
WHOLE = Triage(samples=120, bad=120, bad_when="ungrounded", segments=(), onset=T - 900,
               layer="retrieval", layer_shares=(("retrieval", 1.0),))  # fmt: skip


def finding(z: float) -> Finding:
    group = (*PRICING, ("release", NEW), ("signal", "numeric_grounding"))
    return Finding(group, NEW, "2026.12.01", "numeric_grounding", "mean", 0.62, 0.97, 140, 410, z)


def kinds() -> Iterator[tuple[str, Notification]]:
    band, lag, ungrounded = (
        RULES["low_band_rate_high"],
        RULES["pipeline_lag_high"],
        RULES["ungrounded_rate_high"],
    )
    triaged = real_triage()
    yield (
        "page, triaged",
        window_notification(
            band, event(band, "firing", 0.41), BASE, NOW, triage=triaged, layer="generation"
        ),
    )
    yield "warn", window_notification(
        band, event(band, "firing", 0.25, severity="warn"), BASE, NOW, triage=triaged,
        layer="generation",
    )  # fmt: skip
    yield (
        "updated (a repeat)",
        window_notification(
            band, event(band, "renotified", 0.43), BASE, NOW, triage=triaged, layer="generation"
        ),
    )
    yield "escalated", window_notification(
        band, event(band, "escalated", 0.33, previous_severity="warn"), BASE, NOW,
        triage=triaged, layer="generation",
    )  # fmt: skip
    yield (
        "resolved",
        window_notification(
            ungrounded, event(ungrounded, "resolved", 0.0299), BASE, NOW, layer="generation"
        ),
    )
    yield "resolved, no samples", window_notification(
        ungrounded, event(ungrounded, "resolved", None, samples=0), BASE, NOW,
        layer=None, layer_note="no samples arrive",
    )  # fmt: skip
    yield "uncited answers", window_notification(
        band, event(band, "firing", 0.41), BASE, NOW, triage=UNCITED,
        layer_note="120 of the bad samples cannot be placed",
    )  # fmt: skip
    yield (
        "the whole group",
        window_notification(
            ungrounded, event(ungrounded, "firing", 1.0), BASE, NOW, triage=WHOLE, layer="retrieval"
        ),
    )
    yield "no data", window_notification(
        band, event(band, "no_data", None, samples=0), BASE, NOW,
        layer_note="no samples arrive, so none can be placed",
    )  # fmt: skip
    yield (
        "pipeline",
        window_notification(
            lag, event(lag, "firing", 912.0, group=()), BASE, NOW, layer="pipeline"
        ),
    )
    skipped = RULES["skip_rate_high"]
    yield "top skip reason", window_notification(
        skipped, event(skipped, "firing", 0.6, top=Top("no_answer_text", 41, 52)), BASE, NOW,
        triage=triaged, layer="generation",
    )  # fmt: skip
    (regression,) = default_regression_rules()
    for z in (4.2, math.inf):
        yield (
            f"regression, z {z}",
            regression_notification(
                regression, finding(z).group, finding(z), T, T - 600, BASE, NOW, layer="generation"
            ),
        )
    yield (
        "regression resolved",
        regression_notification(
            regression, finding(4.2).group, None, T, T - 600, BASE, NOW, layer="generation"
        ),
    )
    (trace_rule,) = default_trace_rules()
    row = Row(T, {"critical_unsupported": True}, "t9", "p1", "production", "none")
    yield "trace rule", trace_notification(trace_rule, row, BASE, NOW)
    yield (
        "digest",
        digest_notification(
            trace_rule, "2026-12-07T05", 31, (Example("t2", "p1", 1.0),), BASE, NOW
        ),
    )


def in_incidents() -> Iterator[tuple[str, Notification]]:
    """A bad release's symptoms in one incident: opened, joined, resolved at last."""
    known: dict[str, Incident] = {}
    messages = dict(kinds())
    steps = [
        (messages["page, triaged"], T),
        (messages["regression, z 4.2"], T + 60),
    ]
    ends = [
        (messages["page, triaged"], T + 3600),
        (messages["regression resolved"], T + 3660),
    ]
    for n, at in steps:
        placed = tell(known, n, ("pd",), at)
        known[placed.incident.id] = placed.incident
        yield f"incident {placed.notification.role}", placed.notification
    for n, at in ends:
        ended = n if n.state == "resolved" else dataclasses.replace(
            n, transition="resolved", state="resolved", value=0.18, threshold=0.2,
            triage=None, ended_at=datetime.fromtimestamp(at, UTC),
        )  # fmt: skip
        placed = tell(known, ended, ("pd",), at)
        known[placed.incident.id] = placed.incident
        yield f"incident {placed.notification.role}", placed.notification


CASES = [*kinds(), *in_incidents()]


def slack(n: Notification) -> dict[str, Any]:
    return {"text": text(n), "blocks": blocks(n)}


def pagerduty(n: Notification) -> dict[str, Any]:
    return PagerDutyNotifier("pd", "R0ut1ngKey", url="http://127.0.0.1:9").event(n)


def alertmanager(n: Notification) -> dict[str, Any]:
    return AlertmanagerNotifier("am", "http://127.0.0.1:9").alert(n)


RENDERERS: dict[str, Callable[[Notification], dict[str, Any]]] = {
    "slack": slack,
    "pagerduty": pagerduty,
    "alertmanager": alertmanager,
    "webhook": payload,
}
# Keys whose values are machine fields, not words a person reads.
MACHINE = {"dedup_key", "id", "incident_key", "routing_key", "href", "type", "group_key"}


def words(rendered: Any, key: str = "") -> Iterator[str]:
    """Every string a person reads in a rendered message."""
    if isinstance(rendered, str):
        if key not in MACHINE and not rendered.startswith("http"):
            yield rendered
    elif isinstance(rendered, dict):
        for k, v in rendered.items():
            yield from words(v, k)
    elif isinstance(rendered, list | tuple):
        for v in rendered:
            yield from words(v, key)


SINCE = re.compile(r"\b[Ss]ince:? (\d{4}-\d\d-\d\dT)?(\d\d:\d\d)")
UNTRUE = re.compile(r"\b(inf|nan|infinity)\b", re.I)


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
@pytest.mark.parametrize(("kind", "notification"), CASES, ids=[c[0] for c in CASES])
def test_every_message_is_true_in_its_words(
    kind: str, notification: Notification, renderer: str
) -> None:
    rendered = RENDERERS[renderer](notification)
    json.dumps(rendered, allow_nan=False)  # a receiver refuses NaN and Infinity
    said = list(words(rendered))
    for line in said:
        assert not UNTRUE.search(line), (kind, line)
        assert not re.search(r"\bNone\b", line), (kind, line)
        assert "=none" not in line, (kind, line)  # internal: said in words
        assert "no segment stands out" not in line or kind != "the whole group", line
    sinces = {m.group(2) for line in said for m in SINCE.finditer(line)}
    assert len(sinces) <= 1, (kind, sinces)
    everything = "\n".join(said)
    if renderer == "webhook":
        assert rendered["layer"] is not None or rendered["layer_note"], kind
    elif rendered.get("event_action") != "resolve":  # PagerDuty's resolve carries no text
        assert re.search(r"Layer( unclear)?: \S", everything), kind
    if kind == "resolved" and renderer != "pagerduty":
        assert "0.0299, below the 0.03 line" in everything
        assert "> 0.03" not in everything and "back within" not in everything
    if kind == "uncited answers" and renderer != "pagerduty":
        assert "uncited answers" in everything
    if kind == "the whole group" and renderer in ("slack", "alertmanager"):
        assert "the whole group" in everything


@pytest.mark.parametrize(("kind", "notification"), CASES, ids=[c[0] for c in CASES])
def test_a_pagerduty_resolve_closes_the_incident_only_when_its_last_symptom_ends(
    kind: str, notification: Notification
) -> None:
    event_ = pagerduty(notification)
    ends = notification.state == "resolved" and (
        notification.incident is None or not notification.incident.open
    )
    assert (event_["event_action"] == "resolve") is ends, kind
    assert event_["dedup_key"] == notification.incident_key
