"""The PagerDuty notifier over real HTTP against the recording receiver, and against the
event the `pagerduty` package's own client would send."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from pagerduty import EventsApiV2Client

from observer.alerts.notifiers import NotifyError
from observer.alerts.notifiers.pagerduty import PagerDutyNotifier
from tests.alerts.notifiers.samples import RUNBOOK, TRACE_URLS, firing, resolved, triaged
from tests.fakes.receiver import Answer, Receiver

ROUTING_KEY = "R0ut1ngKeyR0ut1ngKeyR0ut1ngKey01"
ACCEPTED = Answer(
    202,
    b'{"status":"success","message":"Event processed","dedup_key":"k"}',
    (("Content-Type", "application/json"),),
)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(ACCEPTED) as server:
        yield server


def test_a_page_triggers_a_critical_incident_with_details_and_trace_links(
    receiver: Receiver,
) -> None:
    notifier = PagerDutyNotifier("pd", ROUTING_KEY, url=receiver.url)
    message = firing()
    notifier.send(message)

    (request,) = receiver.requests
    assert (request.method, request.path) == ("POST", "/v2/enqueue")
    event = request.json()
    assert event["routing_key"] == ROUTING_KEY
    assert event["event_action"] == "trigger"
    assert event["dedup_key"] == message.dedup_key
    payload = event["payload"]
    assert payload["severity"] == "critical"
    assert payload["source"] == "observer"
    assert payload["summary"].startswith("[coverage_low] Citation coverage low")
    assert "0.42 < 0.6" in payload["summary"]
    assert (payload["group"], payload["component"]) == ("production", "billing")
    details = payload["custom_details"]
    assert details["value"] == 0.42
    assert (details["op"], details["threshold"]) == ("<", 0.6)
    assert details["samples"] == 120
    assert details["window_s"] == 900
    assert details["group"] == {"environment": "production", "query_type": "billing"}
    assert details["trace_urls"] == list(TRACE_URLS[:3])
    assert event["links"] == [
        {"href": TRACE_URLS[0], "text": "Langfuse trace 1"},
        {"href": TRACE_URLS[1], "text": "Langfuse trace 2"},
        {"href": TRACE_URLS[2], "text": "Langfuse trace 3"},
        {"href": RUNBOOK, "text": "Runbook"},
    ]


def test_a_warning_is_a_warning_and_the_resolve_closes_the_same_incident(
    receiver: Receiver,
) -> None:
    notifier = PagerDutyNotifier("pd", ROUTING_KEY, url=receiver.url)
    message = firing(severity="warn")
    notifier.send(message)
    notifier.send(resolved(message))

    trigger, resolve = (r.json() for r in receiver.wait_for(2))
    assert trigger["payload"]["severity"] == "warning"
    assert resolve == {
        "event_action": "resolve",
        "dedup_key": message.dedup_key,
        "routing_key": ROUTING_KEY,
    }
    assert trigger["dedup_key"] == resolve["dedup_key"]


def official_events(send: Any) -> list[dict[str, Any]]:
    """What `pagerduty.EventsApiV2Client` puts on the wire for `send(client)`."""
    seen: list[dict[str, Any]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        return httpx2.Response(202, json={"status": "success", "dedup_key": "k"})

    send(EventsApiV2Client(ROUTING_KEY, transport=httpx2.MockTransport(answer)))
    return seen


def test_the_events_are_those_the_official_client_builds(receiver: Receiver) -> None:
    notifier = PagerDutyNotifier("pd", ROUTING_KEY, url=receiver.url)
    message = firing()
    notifier.send(message)
    notifier.send(resolved(message))
    ours = [r.json() for r in receiver.wait_for(2)]

    trigger = ours[0]
    payload = dict(trigger["payload"])
    summary, source = payload.pop("summary"), payload.pop("source")
    severity, details = payload.pop("severity"), payload.pop("custom_details")
    theirs = official_events(
        lambda client: (
            client.trigger(
                summary,
                source,
                dedup_key=message.dedup_key,
                severity=severity,
                payload=payload,
                custom_details=details,
                links=trigger["links"],
            ),
            client.resolve(message.dedup_key),
        )
    )
    assert ours == theirs
    assert json.dumps(ours[0]) == json.dumps(theirs[0])  # key order too


def test_rate_limits_and_refusals_are_told_apart_and_the_key_never_shows(
    receiver: Receiver,
) -> None:
    notifier = PagerDutyNotifier("pd", ROUTING_KEY, url=receiver.url)
    receiver.rate_limit("7")
    with pytest.raises(NotifyError) as limited:
        notifier.send(firing())
    assert limited.value.retryable and limited.value.retry_after_s == 7

    refusal = f'{{"status":"invalid event","errors":["routing_key {ROUTING_KEY} unknown"]}}'
    receiver.script(Answer(400, refusal.encode()))
    with pytest.raises(NotifyError) as refused:
        notifier.send(firing())
    assert not refused.value.retryable
    assert "invalid event" in str(refused.value)
    assert ROUTING_KEY not in str(refused.value)


def test_an_empty_routing_key_is_refused_when_built() -> None:
    with pytest.raises(ValueError, match="routing key"):
        PagerDutyNotifier("pd", "")


def test_a_triaged_page_carries_the_triage_in_custom_details(receiver: Receiver) -> None:
    PagerDutyNotifier("pd", ROUTING_KEY, url=receiver.url).send(triaged())
    details = receiver.requests[0].json()["payload"]["custom_details"]
    assert details["layer"] == "generation"
    assert details["triage"]["segments"][0]["where"] == {
        "release": "2026.12.03-rc2",
        "query_type": "pricing",
    }
    assert details["triage"]["onset_at"] == "2026-12-03T09:10:00Z"
    assert details["what_changed"].startswith("Where: release=2026.12.03-rc2")
