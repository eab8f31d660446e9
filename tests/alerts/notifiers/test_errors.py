"""Every notifier behind Delivery, over real HTTP, when its receiver misbehaves.

What on-call would notice: a 5xx is retried until the message gets through,
a refusal (400) is not retried, a 429 is waited out for its Retry-After, a
receiver that is down is counted and logged (without its secret), never
raises into the engine and keeps the message in the outbox for the next
evaluation, and one receiver down does not hold up another.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from observer.alerts.delivery import Delivery
from observer.alerts.notifiers import Notifier
from observer.alerts.notifiers.alertmanager import AlertmanagerNotifier
from observer.alerts.notifiers.pagerduty import PagerDutyNotifier
from observer.alerts.notifiers.slack import SlackNotifier
from observer.alerts.notifiers.webhook import WebhookNotifier
from observer.background import Deadline
from observer.state import State
from observer.telemetry.metrics import Metrics
from tests.alerts.notifiers.samples import firing
from tests.alerts.outbox_helpers import post, until
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


@pytest.fixture
def state(tmp_path: Path) -> Iterator[State]:
    opened = State(tmp_path / "s.sqlite")
    yield opened
    opened.close()


def delivery_for(notifier: Notifier, metrics: Metrics, state: State) -> Delivery:
    # Tiny backoff so retries happen within the test; the policy is the same as in production.
    return Delivery(
        {"n": notifier}, metrics, state.alerts, max_attempts=4, base_s=0.01, max_backoff_s=0.05
    )


def counts(metrics: Metrics) -> dict[str, float]:
    return {
        result: metrics.value("observer_alert_notifications_total", notifier="n", result=result)
        for result in ("sent", "failed", "dropped")
    }


def test_a_5xx_is_retried_until_the_message_gets_through(
    kind: str, receiver: Receiver, state: State
) -> None:
    metrics = Metrics()
    delivery = delivery_for(BUILDERS[kind](receiver.url), metrics, state)
    receiver.fail(2, status=503)
    post(state, delivery, ["n"], firing())
    assert delivery.flush(Deadline.within(5))
    assert len(receiver.requests) == 3
    assert counts(metrics) == {"sent": 1, "failed": 0, "dropped": 0}
    assert state.alerts.waiting() == 0
    assert delivery.shutdown(Deadline.within(1))


def test_a_refusal_is_not_retried_and_is_logged_with_the_receivers_reason(
    kind: str, receiver: Receiver, state: State
) -> None:
    metrics = Metrics()
    delivery = delivery_for(BUILDERS[kind](receiver.url), metrics, state)
    receiver.script(Answer(400, b"invalid_payload"))
    with capture_logs() as logs:
        post(state, delivery, ["n"], firing())
        assert delivery.flush(Deadline.within(5))
    assert len(receiver.requests) == 1
    assert counts(metrics) == {"sent": 0, "failed": 1, "dropped": 0}
    assert state.alerts.waiting() == 0  # refused for good: not kept
    (failed,) = [e for e in logs if e["event"] == "alert_notification_failed"]
    assert (failed["notifier"], failed["rule"]) == ("n", "coverage_low")
    assert "HTTP 400: invalid_payload" in failed["error"]
    assert failed["kept"] is False
    delivery.shutdown(Deadline.within(1))


def test_a_429_waits_for_its_retry_after(kind: str, receiver: Receiver, state: State) -> None:
    metrics = Metrics()
    delivery = delivery_for(BUILDERS[kind](receiver.url), metrics, state)
    receiver.rate_limit("0.4")
    post(state, delivery, ["n"], firing())
    assert delivery.flush(Deadline.within(5))
    first, second = receiver.wait_for(2)
    assert second.at - first.at >= 0.35  # the backoff alone would be 0.05 s at most
    assert counts(metrics)["sent"] == 1
    delivery.shutdown(Deadline.within(1))


def test_a_receiver_that_is_down_is_counted_and_logged_without_secrets(
    kind: str, state: State
) -> None:
    down = Receiver().start()
    url = down.url
    down.stop()
    metrics = Metrics()
    delivery = delivery_for(BUILDERS[kind](url), metrics, state)
    with capture_logs() as logs:
        post(state, delivery, ["n"], firing())  # never raises
        # its retries ran out: it waits in the outbox for the next evaluation
        assert delivery.flush(Deadline.within(10)) is False
    assert counts(metrics) == {"sent": 0, "failed": 1, "dropped": 0}
    assert state.alerts.waiting("n") == 1
    (failed,) = [e for e in logs if e["event"] == "alert_notification_failed"]
    assert "unreachable" in failed["error"]
    assert failed["kept"] is True
    logged = repr(logs)
    assert not [secret for secret in SECRETS if secret in logged]
    delivery.shutdown(Deadline.within(1))


def test_one_receiver_down_does_not_hold_up_another(
    kind: str, receiver: Receiver, state: State
) -> None:
    metrics = Metrics()
    with Receiver() as stuck:
        stuck.slow(30)  # answers long after the test is over (it is cut at stop)
        delivery = Delivery(
            {"stuck": BUILDERS[kind](stuck.url), "n": BUILDERS[kind](receiver.url)},
            metrics,
            state.alerts,
            base_s=0.01,
            max_backoff_s=0.05,
        )
        started = time.monotonic()
        post(state, delivery, ["stuck", "n"], firing())
        receiver.wait_for(1, timeout_s=5)
        assert time.monotonic() - started < 5  # the stuck one answers after 30 s
        stuck.wait_for(1)
        # the stuck one is still waiting for its answer
        assert not delivery.flush(Deadline.within(0.2))
    until(lambda: counts(metrics)["sent"] == 1)  # the lane's thread counts it after the answer
    delivery.shutdown(Deadline.within(0.5))
