"""Alertmanager: `POST {url}/api/v2/alerts` with one alert per notification.

Alertmanager knows an alert by its label set: `alertname` (the rule),
`severity` (`warn` | `page`), the group's labels (`environment`,
`query_type`, whichever the rule groups by), `layer` (when named), `incident` (the id
of the incident the alert belongs to: group by it, `group_by: [incident]`, and one
cause is one notification however many rules it trips) and `service="observer"`. Routing,
grouping, silences and inhibition are Alertmanager's; we only post.

Staying alive while firing: Alertmanager resolves an alert by itself at its
`endsAt`. So a firing alert is posted with `endsAt = sent_at + firing_ttl_s`
and the caller re-posts it while it fires (the engine does so after every
pass), each post pushing `endsAt` further. If observer stops, the alert
resolves `firing_ttl_s` after the last post. The default, an hour, outlasts
restarts and a Langfuse outage of many passes without flapping the page, yet
does not leave an alert firing for ever once observer is gone; a watchdog on
observer's own metrics is the way to learn that observer is down. A resolve
is posted with `endsAt = ended_at` (in the past), which resolves it at once.

The test alert (`observer alerts test`, kind `test`) carries the extra label
`test="true"` and ends by itself: `endsAt = sent_at + test_ttl_s` (5 s), so
it shows in Alertmanager for a few seconds and nothing stays open. The
shipped deploy/alertmanager/alertmanager.yml routes `test="true"` to a
receiver that delivers nowhere (`observer-test`), not to the tickets.

Annotations: `summary`, `description`, `runbook_url` (when set),
`langfuse_url` (the first example trace, when any), `what_changed` (the triage and
the layer), `segment` and `onset` (with a triage), and `incident` (its cause and
symptoms, when it has several); `generatorURL` is the
configured `generator_url`, else that first trace (Alertmanager's "Source").
"""

from __future__ import annotations

import base64
import json
import re
from datetime import timedelta
from typing import Any, ClassVar

from observer.alerts.notifiers import TestEnd, _http
from observer.alerts.notifiers._text import incident_lines, iso, segment_where, what_changed
from observer.state.rows import Notification

_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_FIRING_TTL_S = 3600.0
TEST_TTL_S = 5.0
TEST_LABEL = ("test", "true")


class AlertmanagerNotifier:
    kind = "alertmanager"
    test_end: ClassVar[TestEnd] = "expires"

    def __init__(
        self,
        name: str,
        url: str,
        *,
        secret: str | None = None,
        username: str | None = None,
        timeout_s: float = 10.0,
        firing_ttl_s: float = DEFAULT_FIRING_TTL_S,
        generator_url: str | None = None,
        test_ttl_s: float = TEST_TTL_S,
    ) -> None:
        """`url` is Alertmanager's base URL (`http://alertmanager:9093`). `secret`, when set,
        is the basic-auth password of `username` (Alertmanager's own `--web.config.file`),
        or without a username a bearer token (an Alertmanager behind an auth proxy)."""
        self.name = name
        self._what = f"alertmanager notifier {name!r}"
        if firing_ttl_s <= 0 or test_ttl_s <= 0:
            raise ValueError(f"{self._what}: firing_ttl_s and test_ttl_s must be positive")
        self._endpoint = _http.check_url(self._what, url) + "/api/v2/alerts"
        self._secret = secret
        self._authorization: str | None = None
        if secret and username is not None:
            pair = base64.b64encode(f"{username}:{secret}".encode()).decode()
            self._authorization = f"Basic {pair}"
        elif secret:
            self._authorization = f"Bearer {secret}"
        self._firing_ttl = timedelta(seconds=firing_ttl_s)
        self.test_ttl_s = test_ttl_s
        self._generator_url = generator_url
        self._client = _http.make_client(timeout_s)

    def send(self, notification: Notification) -> None:
        """Post the alert (its receiver threads nothing: no id to keep)."""
        headers = {"Content-Type": "application/json"}
        if self._authorization is not None:
            headers["Authorization"] = self._authorization
        body = json.dumps([self.alert(notification)]).encode()
        _http.post(
            self._client,
            self._what,
            self._endpoint,
            content=body,
            headers=headers,
            secrets=(self._secret, self._authorization),
        )

    def close(self) -> None:
        self._client.close()

    def alert(self, notification: Notification) -> dict[str, Any]:
        """The postable alert (Alertmanager's `PostableAlert`) for one notification."""
        n = notification
        labels = {"alertname": n.rule, "severity": n.severity}
        for key, value in n.group:
            # Left out: a label name Alertmanager refuses, an empty value (it means "absent").
            if value and _LABEL_NAME.fullmatch(key) and key not in labels:
                labels[key] = value
        if n.layer:
            labels["layer"] = n.layer  # route by the layer to blame (docs/alerts.md#triage)
        labels["service"] = "observer"
        test = n.kind == "test"
        if test:
            labels[TEST_LABEL[0]] = TEST_LABEL[1]
        else:  # one notification group per incident (docs/alerts.md#incidents)
            labels["incident"] = n.incident_key

        annotations = {"summary": n.summary, "description": n.description}
        if n.runbook_url:
            annotations["runbook_url"] = n.runbook_url
        if n.trace_urls:
            annotations["langfuse_url"] = n.trace_urls[0]
        told = what_changed(n)
        if told:
            annotations["what_changed"] = "\n".join(told)
        if n.triage is not None:
            if n.triage.lead is not None:
                annotations["segment"] = segment_where(n.triage.lead)
            if n.triage.onset is not None:
                annotations["onset"] = n.triage.fields()["onset_at"]
        incident = incident_lines(n)
        if incident:
            annotations["incident"] = "\n".join(incident)

        resolved = n.state == "resolved"
        ttl = timedelta(seconds=self.test_ttl_s) if test else self._firing_ttl
        ends = (n.ended_at or n.sent_at) if resolved else n.sent_at + ttl
        ends = max(ends, n.started_at)  # Alertmanager refuses an end before the start

        alert: dict[str, Any] = {
            "labels": labels,
            "annotations": annotations,
            "startsAt": iso(n.started_at),
            "endsAt": iso(ends),
        }
        source = self._generator_url or (n.trace_urls[0] if n.trace_urls else None)
        if source:
            alert["generatorURL"] = source
        return alert
