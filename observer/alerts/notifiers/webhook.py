"""Generic webhook: one JSON object per notification, signed per the Standard Webhooks spec.

Body (every key always present, `null` when the notification has no value):

    {rule, kind, state, severity, group: {label: value}, signal, aggregate, value,
     threshold, op, window_s, samples, summary, description, started_at, ended_at,
     sent_at, trace_urls, runbook_url, dedup_key, layer, layer_note, transition,
     triage, incident, incident_role}

`incident` (a window alert or a release regression; docs/alerts.md#incidents) is an
object: `{id, state: open|resolved, environment, cause: {dimension: value} | null,
since, opened_at, resolved_at, severity, symptoms: [{rule, group, state, severity,
value, summary, layer, fired_at, resolved_at}]}`; `incident_role` says what this
message is to it (`opened`, `joined`, `update`, `symptom_resolved`, `resolved`). A
receiver that keeps one thing per incident keys it by `incident.id` and closes it
when `incident.state` is `resolved`; `dedup_key` stays the alert's own (a rule and
group).

`triage` (a firing window alert; docs/alerts.md#triage) is an object:
`{samples, bad, bad_when, segments: [{where: {dimension: value}, samples, bad,
bad_rate, rest_bad_rate, value, rest_value, share_of_bad, excess}], onset,
onset_open, onset_at, layer, layer_shares: {layer: share}, examples: [trace_id]}`.

Headers: `webhook-id` (the notification's id: the same on every retry, so a
receiver can drop duplicates), `webhook-timestamp` (unix seconds of this
attempt) and `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`,
made by the `standardwebhooks` package, so a receiver verifies with
`standardwebhooks.Webhook(secret).verify(body, headers)` or any other
implementation of the spec.

The secret is the spec's: `whsec_` followed by base64 of the key (what
Standard Webhooks libraries and providers generate), or that base64 alone.
Anything else is refused when the notifier is built, rather than signing
with a key other implementations would derive differently. Without a secret
the message goes out unsigned (id and timestamp headers only), for receivers
that cannot verify.

The test alert (`observer alerts test`) is a message of kind `test`, firing,
then its resolved message with the same `dedup_key` (`test_end =
"resolve"`): a receiver that opens something per dedup_key closes it again.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

from standardwebhooks import Webhook

from observer.alerts.notifiers import TestEnd, _http
from observer.alerts.notifiers._text import finite, iso
from observer.state.rows import Notification

SECRET_PREFIX = "whsec_"


def signing_key(what: str, secret: str) -> bytes:
    """The HMAC key of a `whsec_<base64>` (or bare base64) secret; ValueError otherwise."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not key:
        raise ValueError(
            f"{what}: the secret must be 'whsec_' followed by base64 (or base64 alone)"
        ) from None
    return key


class WebhookNotifier:
    kind = "webhook"
    test_end: ClassVar[TestEnd] = "resolve"

    def __init__(
        self,
        name: str,
        url: str,
        *,
        secret: str | None = None,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self._what = f"webhook notifier {name!r}"
        self._url = _http.check_url(self._what, url)
        self._signer = Webhook(signing_key(self._what, secret)) if secret else None
        self._secret = secret
        self._clock = clock
        self._client = _http.make_client(timeout_s)

    def send(self, notification: Notification) -> None:
        """POST the signed body (a webhook threads nothing: no id to keep)."""
        body = json.dumps(payload(notification), ensure_ascii=False)
        timestamp = int(self._clock())
        headers = {
            "Content-Type": "application/json",
            "webhook-id": notification.id,
            "webhook-timestamp": str(timestamp),
        }
        if self._signer is not None:
            # Signed again on every attempt: receivers refuse timestamps older than 5 minutes.
            moment = datetime.fromtimestamp(timestamp, UTC)
            headers["webhook-signature"] = self._signer.sign(notification.id, moment, body)
        _http.post(
            self._client,
            self._what,
            self._url,
            content=body.encode(),
            headers=headers,
            secrets=(self._secret,),
        )

    def close(self) -> None:
        self._client.close()


def payload(notification: Notification) -> dict[str, Any]:
    """The JSON body of one notification."""
    n = notification
    return {
        "rule": n.rule,
        "kind": n.kind,
        "state": n.state,
        "severity": n.severity,
        "group": dict(n.group),
        "signal": n.signal,
        "aggregate": n.aggregate,
        "value": finite(n.value),
        "threshold": finite(n.threshold),
        "op": n.op,
        "window_s": n.window_s,
        "samples": n.samples,
        "summary": n.summary,
        "description": n.description,
        "started_at": iso(n.started_at),
        "ended_at": iso(n.ended_at) if n.ended_at is not None else None,
        "sent_at": iso(n.sent_at),
        "trace_urls": list(n.trace_urls),
        "runbook_url": n.runbook_url,
        "dedup_key": n.dedup_key,
        "layer": n.layer,
        "layer_note": n.layer_note,
        "transition": n.transition or None,
        "triage": n.triage.fields() if n.triage is not None else None,
        "incident": n.incident.as_dict() if n.incident is not None else None,
        "incident_role": n.role,
    }
