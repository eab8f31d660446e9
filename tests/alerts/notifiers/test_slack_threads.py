"""The Slack notifier with a bot token, through the real `slack_sdk.WebClient`, against the
loopback Slack Web API: an incident is one thread, its end shown in the channel too.

The incoming-webhook mode (tests/alerts/notifiers/test_slack.py) cannot thread: a
webhook's answer is `ok`, not the message's `ts`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from observer.alerts.delivery import Delivery
from observer.alerts.notifiers import NotifyError
from observer.alerts.notifiers.slack import SlackNotifier
from observer.background import Deadline
from observer.state import State
from observer.state.rows import Incident, Outgoing, Symptom
from observer.telemetry.metrics import Metrics
from tests.alerts.notifiers.samples import firing, resolved
from tests.fakes.receiver import Answer
from tests.fakes.slack_api import SlackWebAPI

TOKEN = "xoxb-0000-1111-secretsecret"
CHANNEL = "C0ONCALL"


@pytest.fixture
def slack() -> Iterator[SlackWebAPI]:
    with SlackWebAPI(TOKEN, {CHANNEL: True, "C0OTHER": False}) as server:
        yield server


def notifier(slack: SlackWebAPI, token: str = TOKEN, channel: str = CHANNEL) -> SlackNotifier:
    return SlackNotifier("slack", token, channel=channel, url=slack.api_url)


def incident(open_: bool = True) -> Incident:
    symptom = Symptom("coverage_low", (("environment", "production"),), "k", "page", 0.4, 1.0, "s")
    return Incident(
        "observer-incident-abc", "production", (("release", "rc2"),), 0.0, 1.0, 1.0,
        (symptom,), resolved_at=None if open_ else 2.0,
    )  # fmt: skip


def test_an_incidents_first_message_is_posted_and_its_ts_returned(slack: SlackWebAPI) -> None:
    ts = notifier(slack).send(firing(incident=incident(), role="opened"))
    (posted,) = slack.posted
    assert posted.ts == ts and posted.thread_ts is None and posted.channel == CHANNEL
    # A later message replies in the thread; the incident's end is also shown in the channel.
    later = notifier(slack).send(firing(incident=incident(), role="joined", thread=ts))
    assert later is None
    end = resolved(firing(), incident=incident(open_=False), role="resolved", thread=ts)
    notifier(slack).send(end)
    reply, last = slack.posted[1:]
    assert (reply.thread_ts, reply.reply_broadcast) == (ts, False)
    assert (last.thread_ts, last.reply_broadcast) == (ts, True)


def test_a_message_outside_an_incident_returns_nothing_to_keep(slack: SlackWebAPI) -> None:
    assert notifier(slack).send(firing()) is None


@pytest.mark.parametrize(
    ("token", "channel", "code"),
    [
        ("xoxb-wrong", CHANNEL, "invalid_auth"),
        (TOKEN, "C0NOWHERE", "channel_not_found"),
        (TOKEN, "C0OTHER", "not_in_channel"),
    ],
)
def test_slacks_refusals_are_not_retried_and_never_show_the_token(
    slack: SlackWebAPI, token: str, channel: str, code: str
) -> None:
    with pytest.raises(NotifyError) as caught:
        notifier(slack, token, channel).send(firing())
    assert not caught.value.retryable
    assert code in str(caught.value)
    assert token not in str(caught.value)


def test_a_rate_limit_and_slacks_own_failure_are_retried(slack: SlackWebAPI) -> None:
    slack.script(
        Answer(429, b'{"ok": false, "error": "ratelimited"}', (("Retry-After", "7"),)),
        Answer(500, b'{"ok": false, "error": "internal_error"}'),
    )
    for after in (7.0, None):
        with pytest.raises(NotifyError) as caught:
            notifier(slack).send(firing())
        assert caught.value.retryable and caught.value.retry_after_s == after


def test_the_delivery_keeps_the_thread_across_a_restart(slack: SlackWebAPI, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The first message's ts is kept in the state file: after a restart, the next
    message of the incident still replies in its thread."""
    path = tmp_path / "state.sqlite"
    first = firing(incident=incident(), role="opened")
    later = dataclasses.replace(
        firing(incident=incident(), role="joined"), sent_at=datetime.now(UTC)
    )
    for message in (first, later):
        state = State(path)
        delivery = Delivery({"slack": notifier(slack)}, Metrics(), state.alerts, base_s=0.01)
        state.alerts.queue([Outgoing("slack", message)])
        delivery.wake(["slack"])
        assert delivery.flush(Deadline.within(5.0))
        delivery.shutdown(Deadline.within(1.0))
        state.close()
    opened, joined = slack.posted
    assert opened.thread_ts is None and joined.thread_ts == opened.ts
