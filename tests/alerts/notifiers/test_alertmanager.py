"""The Alertmanager notifier over real HTTP against the recording receiver."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from observer.alerts.notifiers import NotifyError
from observer.alerts.notifiers.alertmanager import AlertmanagerNotifier
from tests.alerts.notifiers.samples import RUNBOOK, TRACE_URLS, firing, resolved, triaged
from tests.fakes.receiver import Answer, Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


def parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_a_firing_alert_carries_the_labels_and_annotations_on_call_routes_by(
    receiver: Receiver,
) -> None:
    notifier = AlertmanagerNotifier("am", receiver.url, firing_ttl_s=600)
    message = firing()
    notifier.send(message)

    (request,) = receiver.requests
    assert (request.method, request.path) == ("POST", "/api/v2/alerts")
    assert request.headers["content-type"] == "application/json"
    (alert,) = request.json()
    assert alert["labels"] == {
        "alertname": "coverage_low",
        "severity": "page",
        "environment": "production",
        "query_type": "billing",
        "service": "observer",
        "incident": message.dedup_key,  # an alert of its own: its incident is itself
    }
    assert alert["annotations"] == {
        "summary": message.summary,
        "description": message.description,
        "runbook_url": RUNBOOK,
        "langfuse_url": TRACE_URLS[0],
        "what_changed": "Layer unclear: nothing the message carries places it.",
    }
    assert parse(alert["startsAt"]) == message.started_at
    # Alive for the TTL after this post; the engine re-posts while it fires.
    assert parse(alert["endsAt"]) == message.sent_at + timedelta(seconds=600)
    assert alert["generatorURL"] == TRACE_URLS[0]


def test_the_resolve_has_the_same_labels_and_ends_when_the_alert_ended(
    receiver: Receiver,
) -> None:
    notifier = AlertmanagerNotifier("am", receiver.url)
    message = firing()
    end = resolved(message)
    notifier.send(message)
    notifier.send(end)

    first, second = (r.json()[0] for r in receiver.wait_for(2))
    assert second["labels"] == first["labels"]  # the same alert, to Alertmanager
    assert parse(second["endsAt"]) == end.ended_at
    assert parse(second["startsAt"]) == message.started_at


def test_labels_a_group_lacks_are_left_out_and_the_configured_source_link_wins(
    receiver: Receiver,
) -> None:
    notifier = AlertmanagerNotifier(
        "am", receiver.url + "/", generator_url="https://grafana.example.com/d/observer"
    )
    notifier.send(firing(group=(("environment", "staging"),), trace_urls=(), runbook_url=None))
    (alert,) = receiver.requests[0].json()
    assert alert["labels"] == {
        "alertname": "coverage_low",
        "severity": "page",
        "environment": "staging",
        "service": "observer",
        "incident": firing().dedup_key,
    }
    assert set(alert["annotations"]) == {"summary", "description", "what_changed"}
    assert alert["generatorURL"] == "https://grafana.example.com/d/observer"
    assert receiver.requests[0].path == "/api/v2/alerts"


def test_a_bearer_token_is_sent_and_never_shown_in_an_error(receiver: Receiver) -> None:
    token = "am-token-5b7e1c"
    receiver.script(Answer(500, f"proxy refused Bearer {token}".encode()))
    notifier = AlertmanagerNotifier("am", receiver.url, secret=token)
    with pytest.raises(NotifyError) as caught:
        notifier.send(firing())
    assert receiver.requests[0].headers["authorization"] == f"Bearer {token}"
    assert caught.value.retryable
    assert "HTTP 500" in str(caught.value)
    assert token not in str(caught.value)


def test_alertmanager_refusing_the_alert_is_not_retryable_and_says_why(receiver: Receiver) -> None:
    receiver.script(Answer(400, b'{"code":400,"message":"start time must be before end time"}'))
    with pytest.raises(NotifyError) as caught:
        AlertmanagerNotifier("am", receiver.url).send(firing())
    assert not caught.value.retryable
    assert "start time must be before end time" in str(caught.value)


def test_with_a_username_the_secret_is_a_basic_auth_password(receiver: Receiver) -> None:
    AlertmanagerNotifier("am", receiver.url, secret="pa55:word", username="observer").send(firing())
    expected = base64.b64encode(b"observer:pa55:word").decode()
    assert receiver.requests[0].headers["authorization"] == f"Basic {expected}"


@pytest.mark.parametrize("url", ["alertmanager:9093", "ftp://host/", ""])
def test_a_url_that_is_not_http_is_refused_when_built(url: str) -> None:
    with pytest.raises(ValueError, match="http"):
        AlertmanagerNotifier("am", url)


def test_a_triaged_alert_carries_its_layer_as_a_label_and_what_changed(
    receiver: Receiver,
) -> None:
    notifier = AlertmanagerNotifier("am", receiver.url)
    message = triaged()
    # The resolve carries no triage, only the layer label it fired with.
    end = resolved(message, triage=None)
    notifier.send(message)
    notifier.send(end)

    first, second = (r.json()[0] for r in receiver.wait_for(2))
    assert first["labels"]["layer"] == "generation"  # an Alertmanager route can match it
    assert second["labels"] == first["labels"]
    annotations = first["annotations"]
    assert annotations["segment"] == "release=2026.12.03-rc2 and query_type=pricing"
    assert annotations["onset"] == "2026-12-03T09:10:00Z"
    assert "Layer: generation" in annotations["what_changed"]
    # The resolve names the layer its page named, and no triage: nothing changes now.
    assert second["annotations"]["what_changed"].startswith("Layer: generation: ")
