"""Slack: an incoming webhook, through `slack_sdk.webhook.WebhookClient`.

The webhook URL is the secret (whoever holds it can post to the channel): it
comes from the environment, never appears in an error message, and the SDK's
own logger, which prints it at debug level, is silenced. The SDK's retry
handlers are switched off so that observer's retry policy is the only one.

The message is Block Kit: a header with state, severity and rule, the summary
and description, fields (group, the measured value against the threshold,
samples, window), links to up to five example traces and the runbook; plus
a plain `text` for notifications and clients that show no blocks.

The test alert (`observer alerts test`) is one message headed `🧪 TEST`,
saying nothing is wrong; no resolved message follows (`test_end =
"nothing"`): a channel keeps no open alert to close.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

from slack_sdk.webhook import WebhookClient

from observer import USER_AGENT
from observer.alerts.notifiers import TestEnd, _http
from observer.alerts.notifiers._text import (
    condition,
    duration,
    group_text,
    iso,
    state_word,
    triage_lines,
)
from observer.state.rows import Notification

MAX_TRACE_LINKS = 5
_HEADER_CHARS = 150  # Slack's limit for a header block
_SECTION_CHARS = 3000  # ... and for a section's text

# The SDK logs the request URL (our secret) at debug level and errors at error level.
_sdk_log = logging.getLogger("observer.alerts.notifiers.slack.sdk")
_sdk_log.setLevel(logging.CRITICAL + 1)
_sdk_log.propagate = False


class SlackNotifier:
    kind = "slack"
    test_end: ClassVar[TestEnd] = "nothing"

    def __init__(self, name: str, secret: str, *, timeout_s: float = 10.0) -> None:
        """`secret` is the incoming webhook URL (`https://hooks.slack.com/services/...`)."""
        self.name = name
        self._what = f"slack notifier {name!r}"
        url = _http.check_url(self._what, secret)
        self._secrets = (secret, url, urlsplit(url).path)
        self._client = WebhookClient(
            url,
            timeout=max(1, math.ceil(timeout_s)),
            logger=_sdk_log,
            retry_handlers=[],
            user_agent_prefix=USER_AGENT,
        )

    def send(self, notification: Notification) -> None:
        try:
            response = self._client.send(
                text=text(notification), blocks=blocks(notification), unfurl_links=False
            )
        except Exception as error:  # urllib's and the SDK's errors: no answer was had
            raise _http.transport_error(self._what, error, self._secrets) from None
        _http.check_status(
            self._what, response.status_code, response.headers, response.body, self._secrets
        )


def text(notification: Notification) -> str:
    """The plain fallback: `FIRING [page] rule (group): summary: 0.42 &lt; 0.6` (shown `<`)."""
    n = notification
    line = f"{state_word(n)} [{n.severity}] {n.rule}"
    if n.group:
        line += f" ({group_text(n)})"
    line += f": {n.summary}"
    measured = condition(n)
    if measured and measured not in n.summary:
        line += f": {measured}"
    return _escape(line)  # Slack parses `text` as mrkdwn too: no `<!channel>` from a summary


def blocks(notification: Notification) -> list[dict[str, Any]]:
    """The Block Kit message (a list of block objects)."""
    n = notification
    if n.kind == "test":
        icon = "🧪"
    elif n.state == "resolved":
        icon = "✅"
    else:
        icon = "🔴" if n.severity == "page" else "🟠"
    header = f"{icon} {state_word(n)} · {n.severity} · {n.rule}"
    result: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": header[:_HEADER_CHARS]}},
        _section(f"*{_escape(n.summary)}*\n{_escape(n.description)}"),
    ]
    told = triage_lines(n)
    if told:
        result.append(_section("*What changed*\n" + "\n".join(_escape(t) for t in told)))
    fields = [f"*Group*\n{_escape(group_text(n))}"]
    measured = condition(n)
    if measured:
        label = f"{n.aggregate}({n.signal})" if n.aggregate and n.signal else (n.signal or "Value")
        against = " (threshold)" if n.op and n.threshold is not None else ""
        fields.append(f"*{_escape(label)}*\n{_escape(measured)}{against}")
    if n.samples is not None:
        fields.append(f"*Samples*\n{n.samples}")
    if n.window_s is not None:
        fields.append(f"*Window*\n{duration(n.window_s)}")
    result.append({"type": "section", "fields": [_mrkdwn(field) for field in fields]})

    links = [_link(url, f"Trace {i}") for i, url in enumerate(n.trace_urls[:MAX_TRACE_LINKS], 1)]
    if n.runbook_url:
        links.append(_link(n.runbook_url, "Runbook"))
    if links:
        result.append(_section(" · ".join(links)))

    since = f"since {_date(n.started_at)}"
    if n.state == "resolved" and n.ended_at is not None:
        since = f"from {_date(n.started_at)} to {_date(n.ended_at)}"
    context = f"observer · {n.kind} rule · {since}"
    result.append({"type": "context", "elements": [_mrkdwn(context)]})
    return result


def _mrkdwn(text: str) -> dict[str, str]:
    return {"type": "mrkdwn", "text": text[:_SECTION_CHARS]}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(text)}


def _escape(text: str) -> str:
    # Slack's three control characters in mrkdwn; everything else is literal.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link(url: str, label: str) -> str:
    # `<url|label>`: a `|` or `>` inside the URL would end it early.
    safe = url.replace("|", "%7C").replace(">", "%3E").replace("<", "%3C")
    return f"<{safe}|{label}>"


def _date(moment: datetime) -> str:
    # Slack shows this in each reader's own time zone; the ISO text is the fallback.
    stamp = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return f"<!date^{int(stamp.timestamp())}^{{date_short_pretty}} {{time}}|{iso(moment)}>"
