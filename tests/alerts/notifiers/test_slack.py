"""The Slack notifier over real HTTP against the recording receiver (a stand-in webhook)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from slack_sdk.models.blocks import Block

from observer.alerts.notifiers import NotifyError
from observer.alerts.notifiers.slack import SlackNotifier
from tests.alerts.notifiers.samples import RUNBOOK, TRACE_URLS, firing, resolved, triaged
from tests.fakes.receiver import Answer, Receiver

WEBHOOK_PATH = "/services/T000/B000/XXXXsecretXXXX"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


def sent(receiver: Receiver) -> dict[str, Any]:
    (request,) = receiver.requests
    assert (request.method, request.path) == ("POST", WEBHOOK_PATH)
    body: dict[str, Any] = request.json()
    return body


def texts(blocks: list[dict[str, Any]]) -> list[str]:
    """Every piece of text a reader sees, in order."""
    found: list[str] = []
    for block in blocks:
        if "text" in block:
            found.append(block["text"]["text"])
        found.extend(field["text"] for field in block.get("fields", []))
        found.extend(element["text"] for element in block.get("elements", []))
    return found


def test_a_firing_page_reads_as_such_with_the_numbers_and_links(receiver: Receiver) -> None:
    SlackNotifier("slack", receiver.url + WEBHOOK_PATH).send(firing(trace_urls=TRACE_URLS))
    body = sent(receiver)
    blocks = body["blocks"]

    header = blocks[0]
    assert header["type"] == "header"
    assert header["text"]["text"] == "🔴 FIRING · page · coverage_low"
    shown = "\n".join(texts(blocks))
    assert "*Citation coverage low in production/billing*" in shown
    assert "*Group*\nenvironment=production, query_type=billing" in shown
    assert "*p50(coverage)*\n0.42 &lt; 0.6 (threshold)" in shown  # Slack shows `<`
    assert "*Samples*\n120" in shown
    assert "*Window*\n15m" in shown
    # Five example traces at most, then the runbook.
    links = [f"<{url}|Trace {i}>" for i, url in enumerate(TRACE_URLS[:5], 1)]
    assert " · ".join([*links, f"<{RUNBOOK}|Runbook>"]) in shown
    assert TRACE_URLS[5] not in shown
    assert body["text"] == (
        "FIRING [page] coverage_low (environment=production, query_type=billing): "
        "Citation coverage low in production/billing: 0.42 &lt; 0.6"
    )
    # The Slack SDK's own Block Kit models accept every block (types, lengths).
    for block in Block.parse_all(blocks):
        block.validate_json()


def test_a_resolve_says_so_and_a_warning_is_not_red(receiver: Receiver) -> None:
    notifier = SlackNotifier("slack", receiver.url + WEBHOOK_PATH)
    notifier.send(resolved(firing(severity="warn")))
    body = sent(receiver)
    assert body["blocks"][0]["text"]["text"] == "✅ RESOLVED · warn · coverage_low"
    assert body["text"].startswith("RESOLVED [warn] coverage_low")
    context = texts(body["blocks"])[-1]
    assert context.startswith("observer · window rule · from <!date^")  # in the reader's zone
    assert " to <!date^" in context


def test_text_from_the_app_cannot_inject_links_or_mentions(receiver: Receiver) -> None:
    notifier = SlackNotifier("slack", receiver.url + WEBHOOK_PATH)
    notifier.send(firing(summary="<!channel> a & b <http://evil|click>", group=()))
    body = sent(receiver)
    shown = "\n".join(texts(body["blocks"]))
    assert "&lt;!channel&gt; a &amp; b &lt;http://evil|click&gt;" in shown
    assert "&lt;!channel&gt; a &amp; b &lt;http://evil|click&gt;" in body["text"]
    assert "*Group*\nall" in shown


@pytest.mark.parametrize(
    ("answer", "retryable"),
    [
        (Answer(404, b"no_service"), False),
        (Answer(410, b"channel_is_archived"), False),
        (Answer(500, b"rollup_error"), True),
    ],
)
def test_slack_errors_say_what_slack_said_but_never_the_webhook_url(
    receiver: Receiver, answer: Answer, retryable: bool
) -> None:
    receiver.script(answer)
    with pytest.raises(NotifyError) as caught:
        SlackNotifier("slack", receiver.url + WEBHOOK_PATH).send(firing())
    assert caught.value.retryable is retryable
    assert answer.body.decode() in str(caught.value)
    assert "XXXXsecretXXXX" not in str(caught.value)


def test_a_rate_limit_carries_slacks_retry_after(receiver: Receiver) -> None:
    receiver.rate_limit("30")
    with pytest.raises(NotifyError) as caught:
        SlackNotifier("slack", receiver.url + WEBHOOK_PATH).send(firing())
    assert caught.value.retryable and caught.value.retry_after_s == 30


def test_an_unreachable_webhook_is_retryable_and_does_not_leak_the_url() -> None:
    down = Receiver().start()
    url = down.url + WEBHOOK_PATH
    down.stop()
    with pytest.raises(NotifyError) as caught:
        SlackNotifier("slack", url, timeout_s=2).send(firing())
    assert caught.value.retryable
    assert "unreachable" in str(caught.value)
    assert "XXXXsecretXXXX" not in str(caught.value)


def test_a_triaged_page_says_what_changed_where_since_when_and_whose(receiver: Receiver) -> None:
    SlackNotifier("slack", receiver.url + WEBHOOK_PATH).send(triaged())
    shown = "\n".join(texts(sent(receiver)["blocks"]))
    assert "*What changed*" in shown
    assert (
        "Where: release=2026.12.03-rc2 and query_type=pricing: 150 samples, 89% bad against "
        "10% in the rest (p50 0.556 against 0.984), 74% of the bad samples "
        "(bad: numeric_grounding &lt; 0.95)." in shown
    )
    assert "Since: 2026-12-03T09:10:00.000Z (when the change began)." in shown
    assert "Layer: generation (97% of the bad samples): retrieval was HIGH" in shown
