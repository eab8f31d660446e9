"""A local stub of the Gemini API's ``generateContent`` answering scripted turns.

Stdlib only, on the shared ``LoopbackService`` (127.0.0.1, a port chosen by the OS). Point
the real client at it with ``genai.Client(api_key="test-key",
http_options=types.HttpOptions(base_url=stub.url))``. It exists to capture what
instrumentations record of Gemini-shaped traffic (``functionCall`` and ``functionResponse``
parts); it answers only what is scripted.

What it models of the documented API (ai.google.dev, "Generating content" and "Function
calling"; the REST reference of ``models.generateContent``; "Troubleshooting": error codes),
the inconvenient parts first:

- ``POST /{version}/models/{model}:generateContent``; the key comes in an ``x-goog-api-key``
  header or a ``key`` query parameter (403 ``PERMISSION_DENIED`` without);
- the body needs a non-empty ``contents`` list whose roles are ``user`` or ``model`` (a 400
  ``INVALID_ARGUMENT`` otherwise; the system prompt is ``systemInstruction``);
- a content turn holding ``functionResponse`` parts must come right after the ``model`` turn
  of the matching ``functionCall`` parts, as many responses as calls (a 400 otherwise);
- errors are ``{"error": {"code", "message", "status"}}``; a reply has ``candidates`` (one,
  its ``content`` ``{"role": "model", "parts": [...]}``, ``finishReason`` ``STOP``),
  ``usageMetadata`` and ``modelVersion``.

A scripted turn is a ``str`` (one ``text`` part) or a ``FunctionCall(name, args)`` (one
``functionCall`` part). A request with nothing scripted is a 500 (``INTERNAL``).
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from .loopback import LoopbackHandler, LoopbackService

__all__ = ["GENERATE_PATH", "FunctionCall", "GeminiStub"]

GENERATE_PATH: Final = re.compile(r"^/v1(?:beta|alpha)?/models/(?P<model>[^/:]+):generateContent$")


@dataclass(frozen=True)
class FunctionCall:
    """A scripted model turn that calls a function."""

    name: str
    args: dict[str, Any]


class _Handler(LoopbackHandler):
    server_version = "GeminiStub/1.0"


class GeminiStub(LoopbackService):
    """In-process ``generateContent`` stub; ``url`` is the client's ``base_url``."""

    service_name = "GeminiStub"
    thread_prefix = "gemini-stub"
    handler_class = _Handler

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._script: deque[str | FunctionCall] = deque()
        self._requests: list[dict[str, Any]] = []

    def script(self, *turns: str | FunctionCall) -> None:
        """Queue model turns, one consumed per valid request."""
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
        url = urlsplit(handler.path)
        match = GENERATE_PATH.match(url.path)
        if handler.command != "POST" or match is None:
            status, body = _error(404, "NOT_FOUND", f"Not found: {url.path}")
        else:
            key = handler.headers.get("x-goog-api-key") or parse_qs(url.query).get("key", [""])[0]
            status, body = self._generate(match.group("model"), key, raw)
        payload = json.dumps(body).encode()
        handler.send_response(status, HTTPStatus(status).phrase)
        handler.send_header("Content-Type", "application/json; charset=UTF-8")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)
        handler.wfile.flush()

    def _generate(self, model: str, key: str, raw: bytes) -> tuple[int, Any]:
        if not key.strip():
            return _error(
                403,
                "PERMISSION_DENIED",
                "Method doesn't allow unregistered callers (callers "
                "without established identity). Please use API Key or other form of API "
                "consumer identity to call this API.",
            )
        try:
            request = json.loads(raw)
        except ValueError:
            return _error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        if not isinstance(request, dict):
            return _error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        with self._lock:
            self._requests.append(request)
        invalid = _invalid(request)
        if invalid is not None:
            return _error(400, "INVALID_ARGUMENT", invalid)
        with self._lock:
            turn = self._script.popleft() if self._script else None
        if turn is None:
            return _error(500, "INTERNAL", "GeminiStub: no scripted turn left")
        return 200, _response(model, request, turn)


def _error(code: int, status: str, message: str) -> tuple[int, Any]:
    return code, {"error": {"code": code, "message": message, "status": status}}


def _parts(content: Any) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _invalid(request: dict[str, Any]) -> str | None:
    """The documented 400s of a malformed generateContent request, or None."""
    contents = request.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    for content in contents:
        role = content.get("role", "user") if isinstance(content, dict) else None
        if role not in ("user", "model"):
            return "Please use a valid role: user, model."
    for i, content in enumerate(contents):
        responses = [p for p in _parts(content) if "functionResponse" in p]
        if not responses:
            continue
        previous = contents[i - 1] if i > 0 else {}
        calls = [p for p in _parts(previous) if "functionCall" in p]
        if not calls or previous.get("role") != "model":
            return (
                "Please ensure that function response turn comes immediately after a "
                "function call turn."
            )
        if len(calls) != len(responses):
            return (
                "Please ensure that the number of function response parts is equal to the "
                "number of function call parts of the function call turn."
            )
    return None


def _response(model: str, request: dict[str, Any], turn: str | FunctionCall) -> dict[str, Any]:
    if isinstance(turn, FunctionCall):
        part: dict[str, Any] = {"functionCall": {"name": turn.name, "args": turn.args}}
        out_chars = len(json.dumps(turn.args))
    else:
        part, out_chars = {"text": turn}, len(turn)
    prompt = max(1, len(json.dumps(request.get("contents"))) // 4)
    completion = max(1, out_chars // 4)
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [part]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": prompt,
            "candidatesTokenCount": completion,
            "totalTokenCount": prompt + completion,
        },
        "modelVersion": model,
    }
