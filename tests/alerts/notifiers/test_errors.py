"""Every notifier behind Delivery, over real HTTP, when its receiver misbehaves.

What on-call would notice: a 5xx is retried until the message gets through,
a refusal (400) is not retried, a 429 is waited out for its Retry-After, a
receiver that is down is counted and logged (without its secret) and never
raises into the engine, and one receiver down does not hold up another.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator

import pytest
from structlog.testing import capture_logs

from observer.alerts.delivery import Delivery
from observer.alerts.notifiers import Notifier
from observer.alerts.notifiers.alertmanager import AlertmanagerNotifier
from observer.alerts.notifiers.pagerduty import PagerDutyNotifier
from observer.alerts.notifiers.slack import SlackNotifier
from observer.alerts.notifiers.webhook import WebhookNotifier
from observer.telemetry.metrics import Metrics
from tests.alerts.notifiers.samples import firing
from tests.fakes.receiver import Answer, Receiver

ROUTING_KEY = "pd-routing-key-0123456789abcdef"
SLACK_PATH = "/services/T0/B0/slack-token-0123456789"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"webhook signing key 0123").decode()
SECRETS = (ROUTING_KEY, "slack-token-0123456789", WEBHOOK_SECRET)

BUILDERS: dict[str, Callable[[str], Notifier]] = {
    "alertmanager": lambda url: AlertmanagerNotifier("am", url, timeout_s=2),
    "pagerduty": lambda url: PagerDutyNotifier("pd", ROUTING_KEY, url=url, timeout_s=2),
    "slack": lambda url: SlackNotifier("slack", url + SLACK_PATH, timeout_s=2),
    "webhook": lambda url: WebhookNotifier(
        "hook", url + "/hook", secret=WEBHOOK_SECRET, timeout_s=2
    ),
}


@pytest.fixture(params=sorted(BUILDERS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(Answer(202, b'{"status":"success","dedup_key":"k"}')) as server:
        yield server


def delivery_for(notifier: Notifier, metrics: Metrics) -> Delivery:
    # Tiny backoff so retries happen within the test; the policy is the same as in production.
    return Delivery({"n": notifier}, metrics, max_attempts=4, base_s=0.01, max_backoff_s=0.05)


def counts(metrics: Metrics) -> dict[str, float]:
    return {
        result: metrics.value("observer_alert_notifications_total", notifier="n", result=result)
        for result in ("sent", "failed", "dropped")
    }


def test_a_5xx_is_retried_until_the_message_gets_through(kind: str, receiver: Receiver) -> None:
    metrics = Metrics()
    delivery = delivery_for(BUILDERS[kind](receiver.url), metrics)
    receiver.fail(2, status=503)
    delivery.submit(["n"], firing())
    assert delivery.flush(5)
    assert len(receiver.requests) == 3
    assert counts(metrics) == {"sent": 1, "failed": 0, "dropped": 0}
    assert delivery.shutdown(1)


def test_a_refusal_is_not_retried_and_is_logged_with_the_receivers_reason(
    kind: str, receiver: Receiver
) -> None:
    metrics = Metrics()
    delivery = delivery_for(BUILDERS[kind](receiver.url), metrics)
    receiver.script(Answer(400, b"invalid_payload"))
    with capture_logs() as logs:
        delivery.submit(["n"], firing())
        assert delivery.flush(5)
    assert len(receiver.requests) == 1
    assert counts(metrics) == {"sent": 0, "failed": 1, "dropped": 0}
    (failed,) = [e for e in logs if e["event"] == "alert_notification_failed"]
    assert (failed["notifier"], failed["rule"]) == ("n", "coverage_low")
    assert "HTTP 400: invalid_payload" in failed["error"]
    delivery.shutdown(1)


def test_a_429_waits_for_its_retry_after(kind: str, receiver: Receiver) -> None:
    metrics = Metrics()
    delivery = delivery_for(BUILDERS[kind](receiver.url), metrics)
    receiver.rate_limit("0.4")
    delivery.submit(["n"], firing())
    assert delivery.flush(5)
    first, second = receiver.wait_for(2)
    assert second.at - first.at >= 0.35  # the backoff alone would be 0.05 s at most
    assert counts(metrics)["sent"] == 1
    delivery.shutdown(1)


def test_a_receiver_that_is_down_is_counted_and_logged_without_secrets(kind: str) -> None:
    down = Receiver().start()
    url = down.url
    down.stop()
    metrics = Metrics()
    delivery = delivery_for(BUILDERS[kind](url), metrics)
    with capture_logs() as logs:
        delivery.submit(["n"], firing())  # never raises
        assert delivery.flush(10)
    assert counts(metrics) == {"sent": 0, "failed": 1, "dropped": 0}
    (failed,) = [e for e in logs if e["event"] == "alert_notification_failed"]
    assert "unreachable" in failed["error"]
    logged = repr(logs)
    assert not [secret for secret in SECRETS if secret in logged]
    delivery.shutdown(1)


def test_one_receiver_down_does_not_hold_up_another(kind: str, receiver: Receiver) -> None:
    metrics = Metrics()
    with Receiver() as stuck:
        stuck.slow(10)  # answers long after the test is over (it is cut at stop)
        delivery = Delivery(
            {"stuck": BUILDERS[kind](stuck.url), "n": BUILDERS[kind](receiver.url)},
            metrics,
            base_s=0.01,
            max_backoff_s=0.05,
        )
        started = time.monotonic()
        delivery.submit(["stuck", "n"], firing())
        receiver.wait_for(1, timeout_s=1)
        assert time.monotonic() - started < 1
        assert not delivery.flush(0.2)  # the stuck one is still waiting for its answer
    assert counts(metrics)["sent"] == 1
    delivery.shutdown(0.5)
