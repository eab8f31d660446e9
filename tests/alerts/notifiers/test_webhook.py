"""The generic webhook over real HTTP: the body a receiver gets, and its signature."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from observer.alerts.notifiers import NotifyError
from observer.alerts.notifiers.webhook import WebhookNotifier
from tests.alerts.notifiers.samples import RUNBOOK, TRACE_URLS, firing, resolved, triaged
from tests.fakes.receiver import Receiver

KEY = bytes(range(24))
SECRET = "whsec_" + base64.b64encode(KEY).decode()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


def test_the_receiver_verifies_the_signature_and_reads_every_field(receiver: Receiver) -> None:
    message = firing(summary="Couverture basse ✓ 生产环境")  # the signature covers UTF-8 bytes
    WebhookNotifier("hook", receiver.url + "/alerts", secret=SECRET).send(message)

    (request,) = receiver.requests
    assert (request.method, request.path) == ("POST", "/alerts")
    assert request.headers["content-type"] == "application/json"
    assert request.headers["webhook-id"] == message.id
    assert request.headers["webhook-signature"].startswith("v1,")
    body = Webhook(SECRET).verify(request.body, request.headers)
    assert body == {
        "rule": "coverage_low",
        "kind": "window",
        "state": "firing",
        "severity": "page",
        "group": {"environment": "production", "query_type": "billing"},
        "signal": "coverage",
        "aggregate": "p50",
        "value": 0.42,
        "threshold": 0.6,
        "op": "<",
        "window_s": 900.0,
        "samples": 120,
        "summary": message.summary,
        "description": message.description,
        "started_at": body["started_at"],
        "ended_at": None,
        "sent_at": body["sent_at"],
        "trace_urls": list(TRACE_URLS[:3]),
        "runbook_url": RUNBOOK,
        "dedup_key": message.dedup_key,
        "layer": None,
        "layer_note": None,
        "transition": None,
        "triage": None,
        "incident": None,
        "incident_role": None,
    }
    assert body["started_at"].endswith("Z")


def test_a_wrong_secret_or_a_changed_body_does_not_verify(receiver: Receiver) -> None:
    WebhookNotifier("hook", receiver.url, secret=SECRET).send(firing())
    (request,) = receiver.requests
    other = "whsec_" + base64.b64encode(b"another key of 24 bytes!").decode()
    with pytest.raises(WebhookVerificationError):
        Webhook(other).verify(request.body, request.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(request.body.replace(b"production", b"staging"), request.headers)


def test_a_resolve_carries_the_same_dedup_key_and_its_end(receiver: Receiver) -> None:
    notifier = WebhookNotifier("hook", receiver.url, secret=SECRET)
    message = firing()
    notifier.send(message)
    notifier.send(resolved(message))
    first, second = (Webhook(SECRET).verify(r.body, r.headers) for r in receiver.wait_for(2))
    assert second["state"] == "resolved"
    assert second["dedup_key"] == first["dedup_key"]
    assert second["ended_at"] is not None


def test_a_retry_keeps_the_id_and_is_signed_with_its_own_timestamp(receiver: Receiver) -> None:
    clock = iter([1_000_000.0, 1_000_042.0])
    notifier = WebhookNotifier("hook", receiver.url, secret=SECRET, clock=lambda: next(clock))
    receiver.fail(1)
    message = firing()
    with pytest.raises(NotifyError):
        notifier.send(message)
    notifier.send(message)
    first, second = receiver.wait_for(2)
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == message.id
    assert (first.headers["webhook-timestamp"], second.headers["webhook-timestamp"]) == (
        "1000000",
        "1000042",
    )
    assert first.headers["webhook-signature"] != second.headers["webhook-signature"]


def test_a_bare_base64_secret_signs_like_its_whsec_form(receiver: Receiver) -> None:
    WebhookNotifier("hook", receiver.url, secret=base64.b64encode(KEY).decode()).send(firing())
    (request,) = receiver.requests
    Webhook(SECRET).verify(request.body, request.headers)


@pytest.mark.parametrize("secret", ["not base64 at all!", "whsec_", "whsec_$$$$"])
def test_a_secret_in_another_format_is_refused_without_being_shown(secret: str) -> None:
    with pytest.raises(ValueError, match="whsec_") as caught:
        WebhookNotifier("hook", "http://127.0.0.1:9/", secret=secret)
    if secret != "whsec_":
        assert secret not in str(caught.value)


def test_without_a_secret_the_message_goes_out_unsigned(receiver: Receiver) -> None:
    WebhookNotifier("hook", receiver.url).send(firing())
    (request,) = receiver.requests
    assert "webhook-signature" not in request.headers
    assert request.headers["webhook-id"]
    assert request.json()["rule"] == "coverage_low"


def test_a_value_json_cannot_hold_is_sent_as_null(receiver: Receiver) -> None:
    WebhookNotifier("hook", receiver.url, secret=SECRET).send(firing(value=float("nan")))
    body = Webhook(SECRET).verify(receiver.requests[0].body, receiver.requests[0].headers)
    assert body["value"] is None


def test_the_triage_travels_as_fields(receiver: Receiver) -> None:
    message = triaged()
    WebhookNotifier("hook", receiver.url + "/alerts", secret=SECRET).send(message)
    body = Webhook(SECRET).verify(receiver.requests[0].body, receiver.requests[0].headers)
    triage = body["triage"]
    assert body["layer"] == "generation"
    assert triage["layer"] == "generation"
    assert triage["onset_at"] == "2026-12-03T09:10:00Z"
    (lead,) = triage["segments"]
    assert lead["where"] == {"release": "2026.12.03-rc2", "query_type": "pricing"}
    assert (lead["samples"], lead["bad"]) == (150, 133)
    assert triage["examples"] == ["trace-9"]
