"""A local stub of Anthropic's Messages API (``POST /v1/messages``) answering scripted turns.

Stdlib only, on the shared ``LoopbackService`` (127.0.0.1, a port chosen by the OS). Point
the real client at it with ``anthropic.Anthropic(base_url=stub.url, api_key="sk-ant-test",
max_retries=0)``. It exists to capture what instrumentations record of Anthropic-shaped
traffic (``tool_use`` and ``tool_result`` content blocks); it answers only what is scripted.

What it models of the documented API (docs.anthropic.com, "Messages" and "Errors"; "Tool
use": handling tool results), the inconvenient parts first:

- every request needs its key, in an ``x-api-key`` header or (what the Python SDK 2 sends)
  ``Authorization: Bearer`` (401 ``authentication_error`` without), and an
  ``anthropic-version`` header (400 ``invalid_request_error`` without);
- the body needs ``model`` (string), ``max_tokens`` (integer >= 1) and a non-empty
  ``messages`` list whose roles are ``user`` or ``assistant`` only (the system prompt is the
  top-level ``system`` parameter: a ``system`` role in ``messages`` is a 400);
- every ``tool_use`` block of an assistant turn must be answered by a ``tool_result`` block
  with its id in the user turn right after it (a 400 naming the ids otherwise);
- errors are ``{"type": "error", "error": {"type", "message"}}`` with a ``request-id``
  header; a reply is a ``message`` object (``id`` ``msg_...``, ``role`` ``assistant``,
  ``content`` blocks, ``stop_reason`` ``end_turn`` or ``tool_use``, ``stop_sequence``,
  ``usage`` with ``input_tokens`` / ``output_tokens``); tool-use ids start ``toolu_``.

A scripted turn is a ``str`` (one ``text`` block, ``stop_reason`` ``end_turn``) or a
``ToolUse(name, input)`` (one ``tool_use`` block, ``stop_reason`` ``tool_use``). A request
with nothing scripted is a 500 (``api_error``): a capture must script every turn.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import urlsplit

from .loopback import LoopbackHandler, LoopbackService

__all__ = ["MESSAGES_PATH", "AnthropicStub", "ToolUse"]

MESSAGES_PATH: Final = "/v1/messages"


@dataclass(frozen=True)
class ToolUse:
    """A scripted assistant turn that calls a tool."""

    name: str
    input: dict[str, Any]


class _Handler(LoopbackHandler):
    server_version = "AnthropicStub/1.0"


class AnthropicStub(LoopbackService):
    """In-process Messages API stub; ``url`` is the client's ``base_url``."""

    service_name = "AnthropicStub"
    thread_prefix = "anthropic-stub"
    handler_class = _Handler

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._script: deque[str | ToolUse] = deque()
        self._requests: list[dict[str, Any]] = []
        self._counter = 0

    def script(self, *turns: str | ToolUse) -> None:
        """Queue assistant turns, one consumed per valid request."""
        with self._lock:
            self._script.extend(turns)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every authenticated request body (parsed JSON), in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def pending_script(self) -> int:
        with self._lock:
            return len(self._script)

    def _handle(self, handler: LoopbackHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length > 0 else b""
        path = urlsplit(handler.path).path
        if handler.command != "POST" or path != MESSAGES_PATH:
            status, body = _error(404, "not_found_error", "Not found")
        else:
            status, body = self._messages(handler, raw)
        payload = json.dumps(body).encode()
        handler.send_response(status, HTTPStatus(status).phrase)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
        handler.end_headers()
        handler.wfile.write(payload)
        handler.wfile.flush()

    def _messages(self, handler: LoopbackHandler, raw: bytes) -> tuple[int, Any]:
        scheme, _, token = (handler.headers.get("Authorization") or "").partition(" ")
        bearer = scheme.lower() == "bearer" and token.strip()
        if not (handler.headers.get("x-api-key") or "").strip() and not bearer:
            return _error(401, "authentication_error", "invalid x-api-key")
        if not (handler.headers.get("anthropic-version") or "").strip():
            return _error(400, "invalid_request_error", "anthropic-version: header is required")
        try:
            request = json.loads(raw)
        except ValueError:
            return _error(400, "invalid_request_error", "There was an issue with the request body")
        if not isinstance(request, dict):
            return _error(400, "invalid_request_error", "The request body must be an object")
        with self._lock:
            self._requests.append(request)
        invalid = _invalid(request)
        if invalid is not None:
            return _error(400, "invalid_request_error", invalid)
        with self._lock:
            turn = self._script.popleft() if self._script else None
            self._counter += 1
            number = self._counter
        if turn is None:
            return _error(500, "api_error", "AnthropicStub: no scripted turn left")
        return 200, _message(request, turn, number)


def _error(status: int, kind: str, message: str) -> tuple[int, Any]:
    return status, {"type": "error", "error": {"type": kind, "message": message}}


def _invalid(request: dict[str, Any]) -> str | None:
    """The documented 400s of a malformed Messages request, or None."""
    if not isinstance(request.get("model"), str) or not request["model"]:
        return "model: Field required"
    max_tokens = request.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Field required (an integer >= 1)"
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            return (
                f'messages.{i}.role: Unexpected role "{role}". The Messages API accepts a '
                'top-level `system` parameter, not "system" as an input message role.'
            )
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        asked = [b["id"] for b in _blocks(message) if b.get("type") == "tool_use"]
        following = messages[i + 1] if i + 1 < len(messages) else None
        if not asked or following is None:
            continue
        answered = {
            b.get("tool_use_id") for b in _blocks(following) if b.get("type") == "tool_result"
        }
        missing = [tool_id for tool_id in asked if tool_id not in answered]
        if missing:
            return (
                f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
    return None


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _text_of(request: dict[str, Any]) -> int:
    return len(json.dumps(request.get("messages"))) + len(json.dumps(request.get("system") or ""))


def _message(request: dict[str, Any], turn: str | ToolUse, number: int) -> dict[str, Any]:
    if isinstance(turn, ToolUse):
        content: list[dict[str, Any]] = [
            {
                "type": "tool_use",
                "id": f"toolu_stub{number:06d}",
                "name": turn.name,
                "input": turn.input,
            }
        ]
        stop_reason, out_chars = "tool_use", len(json.dumps(turn.input))
    else:
        content = [{"type": "text", "text": turn}]
        stop_reason, out_chars = "end_turn", len(turn)
    return {
        "id": f"msg_stub{number:06d}",
        "type": "message",
        "role": "assistant",
        "model": request["model"],
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": max(1, _text_of(request) // 4),
            "output_tokens": max(1, out_chars // 4),
        },
    }
