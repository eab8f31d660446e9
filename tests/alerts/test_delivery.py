"""Delivery: the engine never waits, each notifier has its own lane, and nothing is lost silently.

Over real HTTP: the notifiers are the real webhook notifier posting to the
recording receiver on 127.0.0.1. The retry policy underneath
(`observer.retry`) is checked at the end through its own seams.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from observer.alerts.delivery import Delivery
from observer.alerts.notifiers import NotifyError
from observer.alerts.notifiers.webhook import WebhookNotifier
from observer.retry import call_with_retries, parse_retry_after
from observer.state import State
from observer.state.rows import Notification
from observer.telemetry.metrics import Metrics
from tests.alerts.notifiers.samples import firing
from tests.fakes.receiver import Answer, Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


def count(metrics: Metrics, result: str, notifier: str = "hook") -> float:
    return metrics.value("observer_alert_notifications_total", notifier=notifier, result=result)


def make(receiver: Receiver, metrics: Metrics, **options: Any) -> Delivery:
    options = {"base_s": 0.01, "max_backoff_s": 0.05, **options}
    notifier = WebhookNotifier("hook", receiver.url, timeout_s=5)
    return Delivery({"hook": notifier}, metrics, **options)


def test_submit_returns_at_once_while_the_receiver_is_slow(
    receiver: Receiver, metrics: Metrics
) -> None:
    delivery = make(receiver, metrics)
    receiver.slow(0.3, times=20)
    started = time.monotonic()
    for _ in range(20):
        delivery.submit(["hook"], firing())
    assert time.monotonic() - started < 0.1
    delivery.shutdown(0.1)


def test_messages_of_one_notifier_arrive_in_the_order_submitted(
    receiver: Receiver, metrics: Metrics
) -> None:
    delivery = make(receiver, metrics)
    rules = [f"rule_{i}" for i in range(6)]
    for rule in rules:
        delivery.submit(["hook"], firing(rule=rule))
    assert delivery.flush(5)
    assert [r.json()["rule"] for r in receiver.requests] == rules
    assert count(metrics, "sent") == 6
    assert delivery.shutdown(1)


def test_a_full_queue_drops_counts_and_logs_once(receiver: Receiver, metrics: Metrics) -> None:
    delivery = make(receiver, metrics, queue_size=2)
    receiver.slow(0.4)
    with capture_logs() as logs:
        delivery.submit(["hook"], firing(rule="in_flight"))
        receiver.wait_for(1)  # the worker holds it; the queue is empty again
        for i in range(4):
            delivery.submit(["hook"], firing(rule=f"queued_{i}"))
        assert delivery.flush(5)
    assert [r.json()["rule"] for r in receiver.requests] == ["in_flight", "queued_0", "queued_1"]
    assert (count(metrics, "sent"), count(metrics, "dropped")) == (3, 2)
    dropped = [e for e in logs if e["event"] == "alert_notification_dropped"]
    assert len(dropped) == 1  # one line per interval, not one per message
    assert (dropped[0]["reason"], dropped[0]["notifier"]) == ("queue_full", "hook")
    delivery.shutdown(1)


def test_an_unknown_notifier_is_counted_and_logged_and_the_others_still_get_it(
    receiver: Receiver, metrics: Metrics
) -> None:
    delivery = make(receiver, metrics)
    with capture_logs() as logs:
        delivery.submit(["nope", "hook"], firing())
        assert delivery.flush(5)
    assert count(metrics, "dropped", notifier="nope") == 1
    assert count(metrics, "sent") == 1
    (dropped,) = [e for e in logs if e["event"] == "alert_notification_dropped"]
    assert (dropped["notifier"], dropped["reason"]) == ("nope", "unknown_notifier")
    delivery.shutdown(1)


def test_flush_waits_for_the_answer_and_gives_up_at_its_timeout(
    receiver: Receiver, metrics: Metrics
) -> None:
    delivery = make(receiver, metrics)
    assert delivery.flush(0)  # nothing submitted: idle
    receiver.slow(0.5)
    delivery.submit(["hook"], firing())
    started = time.monotonic()
    assert not delivery.flush(0.1)
    assert time.monotonic() - started < 0.3
    assert delivery.flush(5)
    assert count(metrics, "sent") == 1
    delivery.shutdown(1)


def test_shutdown_cuts_a_backoff_short_and_counts_the_message_failed(
    receiver: Receiver, metrics: Metrics
) -> None:
    receiver.default = Answer(503, b"down for maintenance")
    delivery = make(receiver, metrics, base_s=60, max_backoff_s=60)
    delivery.submit(["hook"], firing())
    receiver.wait_for(1)
    started = time.monotonic()
    assert delivery.shutdown(0.2) is False
    assert time.monotonic() - started < 1
    assert count(metrics, "failed") == 1
    assert len(receiver.requests) == 1  # no attempt after the stop


def test_shutdown_is_idempotent_and_later_messages_are_dropped(
    receiver: Receiver, metrics: Metrics
) -> None:
    delivery = make(receiver, metrics)
    delivery.submit(["hook"], firing())
    assert delivery.shutdown(5) is True
    started = time.monotonic()
    assert delivery.shutdown(5) is True
    assert time.monotonic() - started < 0.05
    delivery.submit(["hook"], firing())
    assert count(metrics, "dropped") == 1
    assert len(receiver.requests) == 1


def test_shutdown_drops_and_counts_what_it_could_not_send(
    receiver: Receiver, metrics: Metrics
) -> None:
    delivery = make(receiver, metrics)
    receiver.slow(1.0)
    for _ in range(3):
        delivery.submit(["hook"], firing())
    receiver.wait_for(1)
    assert delivery.shutdown(0.1) is False
    assert count(metrics, "dropped") == 2  # the two still queued; the third was in flight


def test_send_now_reports_success_refusal_and_unknown_names(
    receiver: Receiver, metrics: Metrics
) -> None:
    delivery = make(receiver, metrics)
    receiver.fail(1, status=502)
    assert delivery.send_now("hook", firing()) is None  # retried once, then sent
    assert len(receiver.requests) == 2
    receiver.script(Answer(400, b"unknown rule"))
    error = delivery.send_now("hook", firing())
    assert error is not None and "HTTP 400: unknown rule" in error
    assert delivery.send_now("pager", firing()) == "no notifier named 'pager' (configured: hook)"
    assert (count(metrics, "sent"), count(metrics, "failed")) == (1, 1)


def test_a_retry_after_beyond_the_limit_fails_at_once(receiver: Receiver, metrics: Metrics) -> None:
    delivery = make(receiver, metrics, max_retry_after_s=10)
    receiver.rate_limit("3600")
    started = time.monotonic()
    assert delivery.send_now("hook", firing()) is not None
    assert time.monotonic() - started < 0.5
    assert len(receiver.requests) == 1


class Broken:
    """A notifier with a bug: it raises something other than NotifyError, secret included."""

    kind = "broken"

    def __init__(self) -> None:
        self.name = "broken"
        self.calls = 0

    def send(self, notification: Notification) -> None:
        self.calls += 1
        if notification.rule == "boom":
            raise RuntimeError("token=s3cr3t-token in a third-party message")


def test_a_notifier_bug_is_not_retried_hides_its_message_and_the_worker_survives(
    metrics: Metrics,
) -> None:
    broken = Broken()
    delivery = Delivery({"broken": broken}, metrics, base_s=0.01, max_backoff_s=0.05)
    with capture_logs() as logs:
        delivery.submit(["broken"], firing(rule="boom"))
        delivery.submit(["broken"], firing(rule="fine"))
        assert delivery.flush(5)
    assert broken.calls == 2  # one attempt each: a bug does not go away on retry
    assert count(metrics, "failed", notifier="broken") == 1
    assert count(metrics, "sent", notifier="broken") == 1
    (failed,) = [e for e in logs if e["event"] == "alert_notification_failed"]
    assert failed["error"] == "RuntimeError raised by the notifier"
    assert "s3cr3t" not in repr(logs)
    delivery.shutdown(1)


# -- the retry policy underneath (observer.retry) ------------------------------


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    waits: list[float] = []

    def always_fails() -> None:
        raise NotifyError("503")

    with pytest.raises(NotifyError):
        call_with_retries(always_fails, attempts=7, base_s=1.0, max_s=8.0, sleep=waits.append)
    assert len(waits) == 6
    for attempt, wait in enumerate(waits):
        ceiling = min(8.0, 2.0**attempt)
        assert ceiling / 2 <= wait <= ceiling  # "equal jitter": never near zero, never past max


def test_retry_after_replaces_the_backoff_and_a_refusal_is_raised_at_once() -> None:
    waits: list[float] = []
    errors = iter([NotifyError("429", retry_after_s=12.5), NotifyError("400", retryable=False)])

    def fails() -> None:
        raise next(errors)

    with pytest.raises(NotifyError, match="400"):
        call_with_retries(
            fails,
            attempts=5,
            base_s=1.0,
            max_s=2.0,
            retryable=lambda e: isinstance(e, NotifyError) and e.retryable,
            retry_after=lambda e: e.retry_after_s if isinstance(e, NotifyError) else None,
            sleep=waits.append,
        )
    assert waits == [12.5]


def test_a_stop_during_a_wait_raises_the_last_error_without_another_attempt() -> None:
    calls: list[int] = []
    stopped: list[bool] = []

    def fails() -> None:
        calls.append(1)
        raise NotifyError(f"attempt {len(calls)}")

    with pytest.raises(NotifyError, match="attempt 1"):
        call_with_retries(
            fails,
            attempts=5,
            base_s=1.0,
            max_s=2.0,
            should_stop=lambda: bool(stopped),
            sleep=lambda _: stopped.append(True),  # the shutdown arrives during the wait
        )
    assert len(calls) == 1


NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 0 ", 0.0),
        ("1.5", 1.5),
        (format_datetime(NOW + timedelta(seconds=30), usegmt=True), 30.0),
        ("Tue, 01 Dec 2026 11:00:00 GMT", 0.0),  # in the past: go now
        (None, None),
        ("", None),
        ("soon", None),
        ("-1", None),
        ("nan", None),
        ("inf", None),
    ],
)
def test_parse_retry_after(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == seconds


def test_the_notification_is_delivered_unchanged(receiver: Receiver, metrics: Metrics) -> None:
    delivery = make(receiver, metrics)
    message = dataclasses.replace(firing(), summary="Ünïcode ✓ survives")
    delivery.submit(["hook"], message)
    assert delivery.flush(5)
    assert receiver.requests[0].json()["summary"] == "Ünïcode ✓ survives"
    delivery.shutdown(1)


# -- durable lanes: the state file's outbox -------------------------------------


@pytest.fixture
def state(tmp_path: Path) -> Iterator[State]:
    opened = State(tmp_path / "state.sqlite")
    yield opened
    opened.close()


def durable(receiver: Receiver, metrics: Metrics, state: State, **options: Any) -> Delivery:
    delivery = make(receiver, metrics, **options)
    delivery.use_outbox(state.alerts)
    return delivery


def rules_received(receiver: Receiver) -> list[str]:
    return [r.json()["rule"] for r in receiver.requests]


def test_a_durable_lane_sends_oldest_first_and_empties_the_outbox(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = durable(receiver, metrics, state)
    for i in range(4):
        delivery.submit(["hook"], firing(rule=f"rule_{i}"))
    assert delivery.flush(5)
    assert rules_received(receiver) == [f"rule_{i}" for i in range(4)]
    assert state.alerts.waiting() == 0
    assert count(metrics, "sent") == 4
    assert delivery.shutdown(1)


def test_a_refused_message_leaves_the_outbox_and_the_next_one_goes(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = durable(receiver, metrics, state)
    receiver.script(Answer(400, b"bad payload"))
    delivery.submit(["hook"], firing(rule="refused"))
    delivery.submit(["hook"], firing(rule="fine"))
    assert delivery.flush(5)
    assert rules_received(receiver) == ["refused", "fine"]  # a 4xx is not retried
    assert (count(metrics, "failed"), count(metrics, "sent")) == (1, 1)
    assert state.alerts.waiting() == 0
    delivery.shutdown(1)


def test_a_message_whose_retries_ran_out_stops_its_lane_until_resume(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = durable(receiver, metrics, state)
    receiver.fail(4, status=503)
    with capture_logs() as logs:
        delivery.submit(["hook"], firing(rule="page"))
        receiver.wait_for(4)
        delivery.submit(["hook"], firing(rule="resolve"))
        assert delivery.flush(5) is False  # both wait: the resolve may not overtake the page
    assert rules_received(receiver) == ["page"] * 4
    assert state.alerts.waiting("hook") == 2
    (failed,) = [e for e in logs if e["event"] == "alert_notification_failed"]
    assert failed["kept"] is True
    delivery.resume()  # the next evaluation
    assert delivery.flush(5)
    assert rules_received(receiver) == ["page"] * 5 + ["resolve"]
    assert (count(metrics, "failed"), count(metrics, "sent"), count(metrics, "dropped")) == (
        1,
        2,
        0,
    )
    delivery.shutdown(1)


def test_a_shutdown_keeps_what_waits_for_the_next_process(
    receiver: Receiver, metrics: Metrics, state: State, tmp_path: Path
) -> None:
    delivery = durable(receiver, metrics, state, base_s=60, max_backoff_s=60)
    receiver.default = Answer(503, b"down")
    delivery.submit(["hook"], firing(rule="page"))
    receiver.wait_for(1)
    assert delivery.shutdown(0.2) is False  # the backoff is cut short; nothing is dropped
    assert count(metrics, "dropped") == 0
    assert state.alerts.waiting("hook") == 1
    receiver.default = Answer()
    reopened = State(state.path)
    after = durable(receiver, Metrics(), reopened)
    after.resume()  # a new process, at its start
    assert after.flush(5)
    assert rules_received(receiver) == ["page", "page"]
    assert after.shutdown(1)
    reopened.close()


def test_the_outbox_keeps_at_most_queue_size_per_notifier(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = durable(receiver, metrics, state, queue_size=2)
    receiver.fail(4, status=503)
    delivery.submit(["hook"], firing(rule="oldest"))
    receiver.wait_for(4)
    delivery.flush(5)
    with capture_logs() as logs:
        delivery.submit(["hook"], firing(rule="second"))
        delivery.submit(["hook"], firing(rule="newest"))
    assert count(metrics, "dropped") == 1
    (dropped,) = [e for e in logs if e["event"] == "alert_notification_dropped"]
    assert dropped["reason"] == "queue_full"
    delivery.resume()
    assert delivery.flush(5)
    assert rules_received(receiver)[4:] == ["second", "newest"]
    delivery.shutdown(1)


def test_use_outbox_comes_before_the_first_message(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics)
    delivery.submit(["hook"], firing())
    with pytest.raises(RuntimeError, match="before"):
        delivery.use_outbox(state.alerts)
    delivery.shutdown(1)
