"""Delivery: the engine never waits, each notifier has its own lane, and nothing is lost silently.

Over real HTTP: the notifiers are the real webhook notifier posting to the
recording receiver on 127.0.0.1. Every lane sends from the state file's outbox,
where the tests write notifications as the engine does (`post`). The retry
policy underneath (`observer.retry`) is checked at the end through its own seams.
"""

from __future__ import annotations

import dataclasses
import json
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
from observer.background import Deadline
from observer.retry import call_with_retries, parse_retry_after
from observer.state import State
from observer.state.rows import Notification
from observer.telemetry.logging import configure_logging
from observer.telemetry.metrics import Metrics
from tests.alerts.notifiers.samples import firing
from tests.alerts.outbox_helpers import post, until
from tests.fakes.receiver import Answer, Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def state(tmp_path: Path) -> Iterator[State]:
    opened = State(tmp_path / "state.sqlite")
    yield opened
    opened.close()


def count(metrics: Metrics, result: str, notifier: str = "hook") -> float:
    return metrics.value("observer_alert_notifications_total", notifier=notifier, result=result)


def make(receiver: Receiver, metrics: Metrics, state: State, **options: Any) -> Delivery:
    options = {"base_s": 0.01, "max_backoff_s": 0.05, **options}
    notifier = WebhookNotifier("hook", receiver.url, timeout_s=5)
    return Delivery({"hook": notifier}, metrics, state.alerts, **options)


def within(seconds: float) -> Deadline:
    return Deadline.within(seconds)


def rules_received(receiver: Receiver) -> list[str]:
    return [r.json()["rule"] for r in receiver.requests]


def test_posting_returns_at_once_while_the_receiver_is_slow(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    receiver.slow(2.0, times=20)  # waiting for the answers would take 40 s
    started = time.monotonic()
    for _ in range(20):
        post(state, delivery, ["hook"], firing())
    assert time.monotonic() - started < 1.0
    receiver.wait_for(1)  # the lane sends on its own thread
    delivery.shutdown(within(0.1))


def test_messages_of_one_notifier_arrive_in_the_order_posted(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    rules = [f"rule_{i}" for i in range(6)]
    for rule in rules:
        post(state, delivery, ["hook"], firing(rule=rule))
    assert delivery.flush(within(5))
    assert rules_received(receiver) == rules
    assert count(metrics, "sent") == 6
    assert delivery.shutdown(within(1))


def test_a_full_outbox_drops_the_oldest_and_counts_and_logs_every_drop(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state, queue_size=2)
    receiver.fail(4, status=503)  # the receiver is down: messages pile up in the outbox
    post(state, delivery, ["hook"], firing(rule="stuck"))
    receiver.wait_for(4)
    assert delivery.flush(within(5)) is False  # its retries ran out: it waits, first in line
    with capture_logs() as logs:  # capture_logs bypasses the RepeatLimiter: every line
        for i in range(4):
            post(state, delivery, ["hook"], firing(rule=f"queued_{i}"))
    assert count(metrics, "dropped") == 3  # "stuck", queued_0, queued_1: 2 kept of 5
    dropped = [e for e in logs if e["event"] == "alert_notification_dropped"]
    assert [(e["notifier"], e["reason"]) for e in dropped] == [("hook", "queue_full")] * 3
    assert state.alerts.waiting("hook") == 2
    delivery.resume()  # the next evaluation
    assert delivery.flush(within(5))
    assert rules_received(receiver) == ["stuck"] * 4 + ["queued_2", "queued_3"]
    assert (count(metrics, "sent"), count(metrics, "failed"), count(metrics, "dropped")) == (
        2,
        1,
        3,
    )
    delivery.shutdown(within(1))


def test_a_flood_of_drops_is_logged_once_per_interval_with_its_count(
    receiver: Receiver,
    metrics: Metrics,
    state: State,
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("json", "warning")  # the RepeatLimiter in place, as in production
    delivery = make(receiver, metrics, state)
    for _ in range(5):
        post(state, delivery, ["nope"], firing())
    assert count(metrics, "dropped", notifier="nope") == 5  # every drop is counted
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    (dropped,) = [e for e in lines if e["event"] == "alert_notification_dropped"]
    assert (dropped["notifier"], dropped["reason"], dropped["dropped"]) == (
        "nope",
        "unknown_notifier",
        1,  # the first line; the next one, 10 s later at the earliest, says how many since
    )


def test_an_unknown_notifier_is_counted_and_logged_and_the_others_still_get_it(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    with capture_logs() as logs:
        post(state, delivery, ["nope", "hook"], firing())
        assert delivery.flush(within(5))
    assert count(metrics, "dropped", notifier="nope") == 1
    assert count(metrics, "sent") == 1
    (dropped,) = [e for e in logs if e["event"] == "alert_notification_dropped"]
    assert (dropped["notifier"], dropped["reason"]) == ("nope", "unknown_notifier")
    delivery.shutdown(within(1))


def test_flush_waits_for_the_answer_and_gives_up_at_its_deadline(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    delivery.resume()  # as at the start of a process
    assert delivery.flush(within(5))  # nothing posted: idle
    receiver.slow(3.0)
    post(state, delivery, ["hook"], firing())
    started = time.monotonic()
    assert not delivery.flush(within(0.1))
    assert time.monotonic() - started < 2.0
    assert delivery.flush(within(10))
    assert count(metrics, "sent") == 1
    delivery.shutdown(within(1))


def test_a_delivery_that_never_sent_anything_shuts_down_at_once(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    started = time.monotonic()
    assert delivery.shutdown(within(2))
    assert time.monotonic() - started < 1.9  # not the whole deadline


def test_shutdown_cuts_a_backoff_short_and_counts_the_message_failed(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    receiver.default = Answer(503, b"down for maintenance")
    delivery = make(receiver, metrics, state, base_s=60, max_backoff_s=60)
    post(state, delivery, ["hook"], firing())
    receiver.wait_for(1)
    started = time.monotonic()
    assert delivery.shutdown(within(0.2)) is False
    assert time.monotonic() - started < 5  # the backoff alone is 30 s at least
    until(lambda: count(metrics, "failed") == 1)  # the lane's thread ends the attempt
    assert len(receiver.requests) == 1  # no attempt after the stop
    assert state.alerts.waiting("hook") == 1  # kept for the next process


def test_shutdown_is_idempotent_and_later_messages_wait_in_the_outbox(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    post(state, delivery, ["hook"], firing())
    assert delivery.shutdown(within(5)) is True
    started = time.monotonic()
    assert delivery.shutdown(within(5)) is True
    assert time.monotonic() - started < 1.0  # the second call does not wait again
    post(state, delivery, ["hook"], firing(rule="after_shutdown"))
    assert count(metrics, "dropped") == 0
    assert state.alerts.waiting("hook") == 1  # not sent by this process, not lost
    assert len(receiver.requests) == 1


def test_shutdown_keeps_what_it_could_not_send_in_the_outbox(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    receiver.slow(30.0)  # in flight until the receiver stops at the end of the test
    for i in range(3):
        post(state, delivery, ["hook"], firing(rule=f"rule_{i}"))
    receiver.wait_for(1)
    assert delivery.shutdown(within(0.1)) is False
    assert delivery.ended is False  # the lane is still inside its request
    assert count(metrics, "dropped") == 0  # nothing is dropped at a shutdown
    assert state.alerts.waiting("hook") == 3  # the one in flight and the two behind it
    assert len(receiver.requests) == 1


def test_send_now_reports_success_refusal_and_unknown_names(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    receiver.fail(1, status=502)
    assert delivery.send_now("hook", firing()) is None  # retried once, then sent
    assert len(receiver.requests) == 2
    receiver.script(Answer(400, b"unknown rule"))
    error = delivery.send_now("hook", firing())
    assert error is not None and "HTTP 400: unknown rule" in error
    assert delivery.send_now("pager", firing()) == "no notifier named 'pager' (configured: hook)"
    assert (count(metrics, "sent"), count(metrics, "failed")) == (1, 1)
    assert state.alerts.waiting() == 0  # sent now: never through the outbox


def test_a_retry_after_beyond_the_limit_fails_at_once(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state, max_retry_after_s=10)
    receiver.rate_limit("3600")
    started = time.monotonic()
    assert delivery.send_now("hook", firing()) is not None
    assert time.monotonic() - started < 5  # waiting even the limit would take 10 s
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
    metrics: Metrics, state: State
) -> None:
    broken = Broken()
    delivery = Delivery({"broken": broken}, metrics, state.alerts, base_s=0.01, max_backoff_s=0.05)
    with capture_logs() as logs:
        post(state, delivery, ["broken"], firing(rule="boom"))
        post(state, delivery, ["broken"], firing(rule="fine"))
        assert delivery.flush(within(5))
    assert broken.calls == 2  # one attempt each: a bug does not go away on retry
    assert count(metrics, "failed", notifier="broken") == 1
    assert count(metrics, "sent", notifier="broken") == 1
    assert state.alerts.waiting("broken") == 0  # the bug's message is not kept either
    (failed,) = [e for e in logs if e["event"] == "alert_notification_failed"]
    assert failed["error"] == "RuntimeError raised by the notifier"
    assert failed["kept"] is False
    assert "s3cr3t" not in repr(logs)
    delivery.shutdown(within(1))


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


def test_the_notification_is_delivered_unchanged(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    message = dataclasses.replace(firing(), summary="Ünïcode ✓ survives")
    post(state, delivery, ["hook"], message)
    assert delivery.flush(within(5))
    assert receiver.requests[0].json()["summary"] == "Ünïcode ✓ survives"
    delivery.shutdown(within(1))


# -- durable lanes: the state file's outbox -------------------------------------


def test_a_lane_sends_oldest_first_and_empties_the_outbox(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    for i in range(4):
        post(state, delivery, ["hook"], firing(rule=f"rule_{i}"))
    assert delivery.flush(within(5))
    assert rules_received(receiver) == [f"rule_{i}" for i in range(4)]
    assert state.alerts.waiting() == 0
    assert count(metrics, "sent") == 4
    assert delivery.shutdown(within(1))


def test_a_refused_message_leaves_the_outbox_and_the_next_one_goes(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    receiver.script(Answer(400, b"bad payload"))
    post(state, delivery, ["hook"], firing(rule="refused"))
    post(state, delivery, ["hook"], firing(rule="fine"))
    assert delivery.flush(within(5))
    assert rules_received(receiver) == ["refused", "fine"]  # a 4xx is not retried
    assert (count(metrics, "failed"), count(metrics, "sent")) == (1, 1)
    assert state.alerts.waiting() == 0
    delivery.shutdown(within(1))


def test_a_message_whose_retries_ran_out_stops_its_lane_until_resume(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state)
    receiver.fail(4, status=503)
    with capture_logs() as logs:
        post(state, delivery, ["hook"], firing(rule="page"))
        receiver.wait_for(4)
        post(state, delivery, ["hook"], firing(rule="resolve"))
        # both wait: the resolve may not overtake the page
        assert delivery.flush(within(5)) is False
    assert rules_received(receiver) == ["page"] * 4
    assert state.alerts.waiting("hook") == 2
    (failed,) = [e for e in logs if e["event"] == "alert_notification_failed"]
    assert failed["kept"] is True
    delivery.resume()  # the next evaluation
    assert delivery.flush(within(5))
    assert rules_received(receiver) == ["page"] * 5 + ["resolve"]
    assert (count(metrics, "failed"), count(metrics, "sent"), count(metrics, "dropped")) == (
        1,
        2,
        0,
    )
    delivery.shutdown(within(1))


def test_a_shutdown_keeps_what_waits_for_the_next_process(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state, base_s=60, max_backoff_s=60)
    receiver.default = Answer(503, b"down")
    post(state, delivery, ["hook"], firing(rule="page"))
    receiver.wait_for(1)
    assert delivery.shutdown(within(0.2)) is False  # the backoff is cut short; nothing is dropped
    assert count(metrics, "dropped") == 0
    assert state.alerts.waiting("hook") == 1
    receiver.default = Answer()
    reopened = State(state.path)
    after = make(receiver, Metrics(), reopened)
    after.resume()  # a new process, at its start
    assert after.flush(within(5))
    assert rules_received(receiver) == ["page", "page"]
    assert after.shutdown(within(1))
    reopened.close()


def test_the_outbox_keeps_at_most_queue_size_per_notifier(
    receiver: Receiver, metrics: Metrics, state: State
) -> None:
    delivery = make(receiver, metrics, state, queue_size=2)
    receiver.fail(4, status=503)
    post(state, delivery, ["hook"], firing(rule="oldest"))
    receiver.wait_for(4)
    assert delivery.flush(within(5)) is False  # "oldest" waits for the next evaluation
    with capture_logs() as logs:
        post(state, delivery, ["hook"], firing(rule="second"))
        post(state, delivery, ["hook"], firing(rule="newest"))
    assert count(metrics, "dropped") == 1
    (dropped,) = [e for e in logs if e["event"] == "alert_notification_dropped"]
    assert dropped["reason"] == "queue_full"
    delivery.resume()
    assert delivery.flush(within(5))
    assert rules_received(receiver)[4:] == ["second", "newest"]
    delivery.shutdown(within(1))
