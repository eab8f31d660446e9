"""PagerDuty: Events API v2 (`POST {url}/v2/enqueue`), `trigger` while firing, `resolve` after.

The PagerDuty alert is keyed by `dedup_key` = the notification's incident's id
(observer.alerts.incidents: one cause, one key, however many rules it trips; an
alert without a shared cause keeps its own key, stable for its rule and group), so
the first symptom triggers it, later symptoms and repeats update it (PagerDuty
appends a trigger with an open key to that alert), and the end of its last symptom
resolves it; a symptom that ends while others fire is an update. Severity: `page` ->
`critical`, `warn` -> `warning` (of the incident: critical while a symptom pages).
The secret is the integration's routing key (sent in the body, as the API wants).
The test alert (`observer alerts test`) is a `warning` trigger followed by
its resolve (`test_end = "resolve"`): the incident opens and closes.

The event has the shape the `pagerduty` package's `EventsApiV2Client`
builds (`trigger(summary, source, dedup_key, severity, payload,
custom_details, links)` and `resolve(dedup_key)`); the tests check ours
against it byte for byte. We do not send through that client, for two
reasons found in its source (7.2): its base URL must be `https://`, so no
loopback receiver or plain-HTTP relay can stand in for PagerDuty; and it
retries inside every request by itself (429 without limit and without
reading Retry-After, with blocking sleeps), which would hide rate limits
from, and stack under, observer's own retry policy.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from observer.alerts.notifiers import TestEnd, _http
from observer.alerts.notifiers._text import (
    condition,
    finite,
    group_text,
    incident_lines,
    iso,
    what_changed,
    where_text,
)
from observer.state.rows import Notification

DEFAULT_URL = (
    "https://events.pagerduty.com"  # the EU service region: https://events.eu.pagerduty.com
)
SEVERITY = {"page": "critical", "warn": "warning"}
_SUMMARY_CHARS = 1024  # the API refuses a longer payload.summary


class PagerDutyNotifier:
    kind = "pagerduty"
    test_end: ClassVar[TestEnd] = "resolve"

    def __init__(
        self,
        name: str,
        secret: str,
        *,
        url: str = DEFAULT_URL,
        timeout_s: float = 10.0,
        source: str = "observer",
    ) -> None:
        """`secret` is the routing (integration) key; `url` the Events API base URL."""
        self.name = name
        self._what = f"pagerduty notifier {name!r}"
        if not secret:
            raise ValueError(f"{self._what}: the routing key is empty")
        self._endpoint = _http.check_url(self._what, url) + "/v2/enqueue"
        self._routing_key = secret
        self._source = source
        self._client = _http.make_client(timeout_s)

    def send(self, notification: Notification) -> None:
        """Enqueue the event (PagerDuty keeps it by its dedup key: no id to keep)."""
        body = json.dumps(self.event(notification)).encode()
        _http.post(
            self._client,
            self._what,
            self._endpoint,
            content=body,
            headers={"Content-Type": "application/json"},
            secrets=(self._routing_key,),
        )

    def close(self) -> None:
        self._client.close()

    def event(self, notification: Notification) -> dict[str, Any]:
        """The Events API v2 event (routing key included) for one notification."""
        n = notification
        ends = n.state == "resolved" and (n.incident is None or not n.incident.open)
        action: Literal["trigger", "resolve"] = "resolve" if ends else "trigger"
        if action == "resolve":
            return {
                "event_action": "resolve",
                "dedup_key": n.incident_key,
                "routing_key": self._routing_key,
            }
        severity = n.incident.severity if n.incident is not None else n.severity
        payload: dict[str, Any] = {
            "summary": _summary(n)[:_SUMMARY_CHARS],
            "source": self._source,
            "severity": SEVERITY[severity],
            "timestamp": iso(n.started_at),
            "class": n.rule,
        }
        group = dict(n.group)
        if "environment" in group:
            payload["group"] = group["environment"]
        if "query_type" in group:
            payload["component"] = group["query_type"]
        payload["custom_details"] = _details(n)
        links = [
            {"href": url, "text": f"Langfuse trace {i}"} for i, url in enumerate(n.trace_urls, 1)
        ]
        if n.runbook_url:
            links.append({"href": n.runbook_url, "text": "Runbook"})
        event: dict[str, Any] = {"event_action": "trigger", "payload": payload}
        if links:
            event["links"] = links
        event["dedup_key"] = n.incident_key
        event["routing_key"] = self._routing_key
        return event


def _summary(n: Notification) -> str:
    # The incident title on-call sees first: the rule, where, and what was measured; for an
    # incident of several symptoms, its cause and how many fire, then the latest.
    measured = condition(n)
    text = f"[{n.rule}] {n.summary}"
    if n.group:
        text += f" ({group_text(n)})"
    if measured and measured not in n.summary:
        text += f": {measured}"
    incident = n.incident
    if incident is not None and len(incident.symptoms) > 1:
        cause = where_text(incident.cause, "one cause")
        place = incident.environment or "every environment"
        head = f"[incident: {cause} in {place}, {len(incident.firing)} symptoms firing]"
        text = f"{head} {text}"
    return text


def _details(n: Notification) -> dict[str, Any]:
    details: dict[str, Any] = {
        "rule": n.rule,
        "kind": n.kind,
        "description": n.description,
        "group": dict(n.group),
        "value": finite(n.value),
        "op": n.op,
        "threshold": finite(n.threshold),
        "samples": n.samples,
        "window_s": n.window_s,
        "signal": n.signal,
        "aggregate": n.aggregate,
        "started_at": iso(n.started_at),
        "trace_urls": list(n.trace_urls),
        "runbook_url": n.runbook_url,
        "layer": n.layer,
        "layer_note": n.layer_note,
        "what_changed": "\n".join(what_changed(n)) or None,
        "incident": n.incident.as_dict() if n.incident is not None else None,
        "incident_role": n.role,
        "incident_summary": "\n".join(incident_lines(n)) or None,
    }
    if n.triage is not None:
        details["triage"] = n.triage.fields()
    return {key: value for key, value in details.items() if value is not None}
