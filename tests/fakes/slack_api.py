"""A loopback Slack Web API: `chat.postMessage` as Slack documents it, for the bot-token
Slack notifier (observer.alerts.notifiers.slack) through the real `slack_sdk.WebClient`.

What it models (docs.slack.dev/reference/methods/chat.postMessage):

- `POST /api/chat.postMessage` with `Authorization: Bearer <token>` and a JSON body
  (`channel`, `text`, `blocks`, `thread_ts`, `reply_broadcast`, ...). The answer is
  HTTP 200 with `{"ok": true, "channel", "ts", "message"}`; `ts` is the message's id,
  unique and increasing within a channel, and what `thread_ts` names to reply to it.
- Errors are HTTP 200 too, `{"ok": false, "error": <code>}`: `not_authed` (no token),
  `invalid_auth` (a wrong one), `channel_not_found`, `not_in_channel` (the bot is not a
  member), `no_text` (neither text nor blocks), `thread_not_found` (a `thread_ts`
  that is no message of the channel); rate limits are HTTP 429 with `Retry-After` and
  `{"ok": false, "error": "ratelimited"}` (docs.slack.dev/apis/web-api/rate-limits).
- A reply's `thread_ts` must name a top-level message: a reply to a reply is
  threaded under its parent, as Slack does (the message's own `thread_ts`).

`script(*answers)` queues raw answers (a 429, a 500) for the next requests.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from .loopback import LoopbackHandler, LoopbackService
from .receiver import Answer

__all__ = ["Posted", "SlackWebAPI"]


@dataclass(frozen=True)
class Posted:
    channel: str
    ts: str
    thread_ts: str | None
    reply_broadcast: bool
    text: str
    blocks: list[dict[str, Any]]


class SlackWebAPI(LoopbackService):
    service_name = "SlackWebAPI"
    thread_prefix = "slack-api"
    handler_class = LoopbackHandler

    def __init__(self, token: str, channels: dict[str, bool]) -> None:
        """`channels`: each channel ID and whether the bot is a member of it."""
        super().__init__()
        self.token = token
        self.channels = dict(channels)
        self._lock = threading.Condition()
        self._posted: list[Posted] = []
        self._script: deque[Answer] = deque()
        self._clock = 1_700_000_000

    @property
    def api_url(self) -> str:
        return self.url + "/api/"

    @property
    def posted(self) -> list[Posted]:
        with self._lock:
            return list(self._posted)

    def script(self, *answers: Answer) -> None:
        with self._lock:
            self._script.extend(answers)

    def _answer(
        self,
        handler: LoopbackHandler,
        status: int,
        body: dict[str, Any],
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        raw = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json; charset=utf-8")
        for name, value in headers:
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(raw)))
        handler.end_headers()
        handler.wfile.write(raw)

    def _handle(self, handler: LoopbackHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        with self._lock:
            scripted = self._script.popleft() if self._script else None
        if scripted is not None:
            handler.send_response(scripted.status)
            for name, value in scripted.headers:
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(scripted.body)))
            handler.end_headers()
            handler.wfile.write(scripted.body)
            return
        if handler.path.split("?")[0] != "/api/chat.postMessage":
            self._answer(handler, 404, {"ok": False, "error": "unknown_method"})
            return
        self._answer(handler, 200, self._post(handler.headers.get("Authorization"), body))

    def _post(self, authorization: str | None, body: bytes) -> dict[str, Any]:
        if not authorization:
            return {"ok": False, "error": "not_authed"}
        if authorization != f"Bearer {self.token}":
            return {"ok": False, "error": "invalid_auth"}
        args = json.loads(body or b"{}")
        channel = args.get("channel")
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        if not self.channels[channel]:
            return {"ok": False, "error": "not_in_channel"}
        if not args.get("text") and not args.get("blocks"):
            return {"ok": False, "error": "no_text"}
        with self._lock:
            thread = args.get("thread_ts")
            if thread is not None:
                parent = next(
                    (p for p in self._posted if p.ts == thread and p.channel == channel), None
                )
                if parent is None:
                    return {"ok": False, "error": "thread_not_found"}
                thread = parent.thread_ts or parent.ts
            self._clock += 1
            ts = f"{self._clock}.000100"
            self._posted.append(
                Posted(
                    channel,
                    ts,
                    thread,
                    bool(args.get("reply_broadcast")),
                    str(args.get("text", "")),
                    list(args.get("blocks", [])),
                )
            )
            self._lock.notify_all()
        message = {"type": "message", "text": args.get("text", ""), "ts": ts}
        if thread is not None:
            message["thread_ts"] = thread
        return {"ok": True, "channel": channel, "ts": ts, "message": message}
