"""Slack: an incoming webhook (`slack_sdk.webhook.WebhookClient`), or with a bot token and
a channel, the Web API's `chat.postMessage` (`slack_sdk.WebClient`), which threads.

- **Incoming webhook** (`secret_env` holds its URL, no `channel`): every message is a
  message of its own in the webhook's channel. A webhook's answer is `ok`, never the
  posted message's `ts`, so a later message has nothing to reply to: an incident's
  messages each name the incident instead.
- **Bot token** (`secret_env` holds an `xoxb-` token with the `chat:write` scope, and
  `channel` a channel ID the app is a member of): the first message of an incident
  is posted to the channel and its `ts` returned (the delivery keeps it per incident,
  in the state file); every later message of the incident replies to it
  (`thread_ts`), and the incident's resolve is also shown in the channel
  (`reply_broadcast`): one thread per incident, its end said where it began.

The secret (the webhook URL, or the token) comes from the environment, never appears
in an error message, and the SDK's own logger, which prints the URL at debug level,
is silenced. The SDK's retry handlers are switched off so that observer's retry
policy is the only one. The Web API answers an error as `ok: false` with a code:
`ratelimited` (429, with `Retry-After`) and Slack's own failures (`internal_error`,
`fatal_error`, `service_unavailable`, `request_timeout`, 5xx) are tried again; the
others (`channel_not_found`, `not_in_channel`, `invalid_auth`, ...) would fail
again and are not.

The message is Block Kit: a header with state, severity and rule, the summary
and description, what changed (the triage, the layer), the incident (its cause and
symptoms, when it has several), fields (group, the measured value against its line,
samples, window), links to up to five example traces and the runbook; plus a plain
`text` for notifications and clients that show no blocks.

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

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from observer import USER_AGENT
from observer.alerts.notifiers import NotifyError, TestEnd, _http
from observer.alerts.notifiers._text import (
    condition,
    duration,
    group_text,
    incident_lines,
    iso,
    state_word,
    what_changed,
)
from observer.redaction import redact
from observer.retry import parse_retry_after
from observer.state.rows import Notification

MAX_TRACE_LINKS = 5
_HEADER_CHARS = 150  # Slack's limit for a header block
_SECTION_CHARS = 3000  # ... and for a section's text
DEFAULT_API_URL = "https://slack.com/api/"
# Web API error codes that are Slack's own trouble: another try may succeed.
RETRYABLE_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)

# The SDK logs the request URL (our secret) at debug level and errors at error level.
_sdk_log = logging.getLogger("observer.alerts.notifiers.slack.sdk")
_sdk_log.setLevel(logging.CRITICAL + 1)
_sdk_log.propagate = False


class SlackNotifier:
    kind = "slack"
    test_end: ClassVar[TestEnd] = "nothing"

    def __init__(
        self,
        name: str,
        secret: str,
        *,
        timeout_s: float = 10.0,
        channel: str | None = None,
        url: str | None = None,
    ) -> None:
        """`secret` is the incoming webhook URL (`https://hooks.slack.com/services/...`), or
        with `channel` a bot token; `url` the Web API's base URL (Slack's by default)."""
        self.name = name
        self._what = f"slack notifier {name!r}"
        self.channel = channel or None
        timeout = max(1, math.ceil(timeout_s))
        self._webhook: WebhookClient | None = None
        self._web: WebClient | None = None
        if self.channel is None:
            hook = _http.check_url(self._what, secret)
            self._secrets: tuple[str, ...] = (secret, hook, urlsplit(hook).path)
            self._webhook = WebhookClient(
                hook,
                timeout=timeout,
                logger=_sdk_log,
                retry_handlers=[],
                user_agent_prefix=USER_AGENT,
            )
        else:
            if not secret.strip():
                raise ValueError(f"{self._what}: the bot token is empty")
            base = _http.check_url(self._what, url or DEFAULT_API_URL) + "/"
            self._secrets = (secret,)
            self._web = WebClient(
                token=secret,
                base_url=base,
                timeout=timeout,
                logger=_sdk_log,
                retry_handlers=[],
                user_agent_prefix=USER_AGENT,
            )

    def send(self, notification: Notification) -> str | None:
        """Post the message; with a bot token, the `ts` of an incident's first message (the
        thread later messages reply to), else None."""
        if self._web is not None:
            return self._post(notification)
        assert self._webhook is not None
        try:
            response = self._webhook.send(
                text=text(notification), blocks=blocks(notification), unfurl_links=False
            )
        except Exception as error:  # urllib's and the SDK's errors: no answer was had
            raise _http.transport_error(self._what, error, self._secrets) from None
        _http.check_status(
            self._what, response.status_code, response.headers, response.body, self._secrets
        )
        return None

    def _post(self, n: Notification) -> str | None:
        assert self._web is not None and self.channel is not None
        thread = n.thread
        try:
            response = self._web.chat_postMessage(
                channel=self.channel,
                text=text(n),
                blocks=blocks(n),
                thread_ts=thread,
                reply_broadcast=True if thread is not None and n.role == "resolved" else None,
                unfurl_links=False,
            )
        except SlackApiError as error:
            raise self._refused(error) from None
        except Exception as error:  # no answer was had
            raise _http.transport_error(self._what, error, self._secrets) from None
        posted = response.get("ts")
        if n.incident is None or thread is not None or not isinstance(posted, str):
            return None
        return posted

    def _refused(self, error: SlackApiError) -> NotifyError:
        """Slack's `ok: false` (or an HTTP error) as the NotifyError it calls for."""
        answer = error.response
        status = int(getattr(answer, "status_code", 0) or 0)
        data = getattr(answer, "data", None)
        code = str(data.get("error", "")) if isinstance(data, dict) else ""
        headers = getattr(answer, "headers", None) or {}
        retry = {str(k).lower(): str(v) for k, v in dict(headers).items()}.get("retry-after")
        message = f"{self._what}: Slack answered HTTP {status}" + (f": {code}" if code else "")
        message = redact(message, self._secrets)
        if code in RETRYABLE_ERRORS or status == 429 or status >= 500:
            return NotifyError(message, retry_after_s=parse_retry_after(retry))
        return NotifyError(message, retryable=False)


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
    told = what_changed(n)
    if told:
        result.append(_section("*What changed*\n" + "\n".join(_escape(t) for t in told)))
    incident = incident_lines(n)
    if incident:
        result.append(_section("*Incident*\n" + "\n".join(_escape(t) for t in incident)))
    fields = [f"*Group*\n{_escape(group_text(n))}"]
    measured = condition(n)
    if measured:
        label = f"{n.aggregate}({n.signal})" if n.aggregate and n.signal else (n.signal or "Value")
        firing = n.op and n.threshold is not None and n.state == "firing"
        against = " (threshold)" if firing else ""
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

    # The firing time is "fired", not "since": a message calls one moment "since" (the
    # change's onset, in the triage and the summary).
    when = f"fired {_date(n.started_at)}"
    if n.state == "resolved" and n.ended_at is not None:
        when = f"from {_date(n.started_at)} to {_date(n.ended_at)}"
    context = f"observer · {n.kind} rule · {when}"
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
