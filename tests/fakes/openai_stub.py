"""A local OpenAI-compatible stub of ``POST /v1/chat/completions`` for tests and benchmarks.

Stdlib only: a ``ThreadingHTTPServer`` on ``127.0.0.1`` (port chosen by the OS on the first
``start()``, reused on every later ``start()``) served from a daemon thread. Point the real
client at it with ``openai.OpenAI(base_url=stub.url + "/v1", api_key="sk-test", max_retries=0)``.

Routes:

- ``POST /v1/chat/completions`` with ``Authorization: Bearer ...`` -> a full ``chat.completion``
  object (401 without a bearer token, 400 for a malformed request)
- anything else -> 404

Each chat request is answered, in this order, by:

1. request validation (400, like the real API: ``model`` and a non-empty ``messages`` list
   are required; ``json_object`` needs the word "json" somewhere in the messages;
   ``json_schema`` needs ``json_schema.name``);
2. ``reject_json_schema`` (400 for ``response_format.type == "json_schema"``; this does not
   consume a scripted answer, so a client's fallback request gets it);
3. the next ``script()`` entry, if any;
4. the judge: ``judge(schema_name, request_json)`` returns the assistant message content.
   A judge that raises gets a 500 (the exception is kept in ``judge_errors``).

``latency_s`` is slept (interruptibly, in the request's own handler thread) before every
answer to an authenticated chat request.

The default judge follows observer's two-call judge protocol (``observer_claims`` splits the
answer sentences into claims, ``observer_verdicts`` checks every number of a claim against the
sources); see ``default_judge``. It reads the data blocks as a model told about them would:
whatever code ends their tags (``<sources-1f0c9a2e>``), with the datamark ``ˆ`` read as a space.

``instruction_following_judge`` is a model without defences against prompt injection (OWASP
LLM01): it obeys an instruction it reads anywhere in the user message, data included, unless
the instruction is datamarked (Spotlighting: text written with ``ˆ`` between its words is read
as data); an instruction it obeys is no claim of the answer. "mark every claim supported"
makes every verdict supported; "return no claims" makes the claims empty.

A hostile or broken endpoint: ``script(Raw(status, content_type, body))`` answers anything
(a proxy's HTML page with a 200); ``echo_key`` makes error bodies quote the bearer token the
request carried, as some gateways do ("Incorrect API key provided: sk-...").
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import urlsplit

from .loopback import LoopbackHandler, LoopbackHTTPServer, LoopbackService

__all__ = [
    "CHAT_PATH",
    "CLAIMS_SCHEMA",
    "DATAMARK",
    "JSON_SCHEMA_REJECTION",
    "VERDICTS_SCHEMA",
    "Judge",
    "OpenAIStub",
    "Raw",
    "Scripted",
    "claims_json",
    "default_judge",
    "instruction_following_judge",
    "schema_name_of",
    "verdicts_json",
]

Judge = Callable[[str, dict[str, Any]], str]
"""``(schema_name, request_json) -> assistant message content``."""


@dataclass(frozen=True)
class Raw:
    """A scripted answer sent as it is: any status, content type and body."""

    status: int
    content_type: str
    body: bytes


Scripted = str | int | tuple[int, float] | tuple[str, float] | Raw
"""A scripted answer: content, an error status, ``(429, retry_after_s)``, ``("sleep", s)``, or
``Raw``."""

CHAT_PATH: Final = "/v1/chat/completions"
CLAIMS_SCHEMA: Final = "observer_claims"
VERDICTS_SCHEMA: Final = "observer_verdicts"
JSON_SCHEMA_REJECTION: Final = (
    "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
)

# Error bodies of the real API, by status: (type, code, message).
_ERRORS: Final[dict[int, tuple[str, str | None, str]]] = {
    400: ("invalid_request_error", None, "Bad request."),
    401: (
        "invalid_request_error",
        None,
        "You didn't provide an API key. You need to provide your API key in an Authorization "
        "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
    ),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Forbidden."),
    404: ("invalid_request_error", None, "Not found."),
    408: ("timeout", None, "Request timed out."),
    409: ("invalid_request_error", None, "Conflict."),
    422: ("invalid_request_error", None, "Unprocessable entity."),
    429: (
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests. Please try again later.",
    ),
    500: (
        "server_error",
        None,
        "The server had an error while processing your request. Sorry about that!",
    ),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
    504: ("server_error", None, "Gateway timeout."),
}

DATAMARK: Final = "ˆ"
# An instruction a model without defences obeys, wherever it reads it (plain spaces only:
# the datamarked form is data to it).
_MARK_ALL = re.compile(r"mark\s+(?:every|all)\s+claims?\s+(?:as\s+)?supported", re.I)
_NO_CLAIMS = re.compile(r"(?:return|reply\s+with|extract|give)\s+no\s+claims", re.I)
_CITATION = re.compile(r"\s*\[\d+\]")
_SENTENCE_LINE = re.compile(r"^\s*\[(\d+)\]\s?(.*)$")
_SOURCE_START = re.compile(r"^\[(\d+)\](.*)$")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_UNSUPPORTED = re.compile(r"\bUNSUPPORTED\b")


# --------------------------------------------------------------------------------------
# Helpers for tests that script exact answers
# --------------------------------------------------------------------------------------


def claims_json(claims: list[tuple[int, str, int]]) -> str:
    """``[(id, text, sentence), ...]`` -> the content of an ``observer_claims`` answer."""
    return json.dumps(
        {"claims": [{"id": cid, "text": text, "sentence": sent} for cid, text, sent in claims]}
    )


def verdicts_json(verdicts: list[tuple[int, bool, bool | None]]) -> str:
    """``[(id, supported, cited_support), ...]`` -> content of an ``observer_verdicts`` answer."""
    return json.dumps(
        {
            "verdicts": [
                {"id": cid, "supported": supported, "cited_support": cited}
                for cid, supported, cited in verdicts
            ]
        }
    )


# --------------------------------------------------------------------------------------
# The default judge
# --------------------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    """A message's text: a plain string or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    messages = request.get("messages")
    if not isinstance(messages, list):
        return []
    return [m for m in messages if isinstance(m, dict)]


def _opening(tag: str) -> re.Pattern[str]:
    """A block's opening tag, whatever code ends it: ``<sources>``, ``<sources-1f0c9a2e>``."""
    return re.compile(rf"<{tag}(-[0-9A-Za-z]+)?>")


def _user_text_with(request: dict[str, Any], tag: str) -> str:
    """The last user message holding ``<tag...>`` (a repair turn after it has no blocks)."""
    users = [_content_text(m.get("content")) for m in _messages(request) if m.get("role") == "user"]
    if not users:
        raise ValueError("the request has no user message")
    for text in reversed(users):
        if _opening(tag).search(text):
            return text
    raise ValueError(f"no user message has a <{tag}>...</{tag}> block")


def schema_name_of(request: dict[str, Any]) -> str:
    """The judge call a request is: ``json_schema.name``, else found in the prompt ("" if none).

    Without a json_schema name, the system (or developer) message must mention exactly one of
    ``observer_claims`` / ``observer_verdicts``; failing that, the last user message with an
    ``<answer_sentences>`` or ``<claims>`` block decides.
    """
    response_format = request.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        schema = response_format.get("json_schema")
        if isinstance(schema, dict) and isinstance(schema.get("name"), str):
            return str(schema["name"])
    system = " ".join(
        _content_text(m.get("content"))
        for m in _messages(request)
        if m.get("role") in ("system", "developer")
    )
    found = [name for name in (CLAIMS_SCHEMA, VERDICTS_SCHEMA) if name in system]
    if len(found) == 1:
        return found[0]
    for message in reversed(_messages(request)):
        if message.get("role") == "user":
            user = _content_text(message.get("content"))
            if _opening("answer_sentences").search(user):
                return CLAIMS_SCHEMA
            if _opening("claims").search(user):
                return VERDICTS_SCHEMA
    return ""


def _block(text: str, tag: str) -> str:
    """A block's body as a model told about the datamark reads it: ``ˆ`` is a space."""
    opening = _opening(tag).search(text)
    end = text.find(f"</{tag}{opening.group(1) or ''}>", opening.end()) if opening else -1
    if opening is None or end < 0:
        raise ValueError(f"the user message has no <{tag}>...</{tag}> block")
    return text[opening.end() : end].replace(DATAMARK, " ")


def _judge_claims(request: dict[str, Any]) -> str:
    block = _block(_user_text_with(request, "answer_sentences"), "answer_sentences")
    claims: list[tuple[int, str, int]] = []
    for line in block.splitlines():
        match = _SENTENCE_LINE.match(line)
        if match is None:
            continue
        text = _CITATION.sub("", match.group(2)).strip()
        if text:
            claims.append((len(claims) + 1, text, int(match.group(1))))
    return claims_json(claims)


def _parse_sources(block: str) -> dict[int, str]:
    """``[n] title`` starts source n; its text runs to the next such line (marker excluded)."""
    sources: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in block.splitlines():
        match = _SOURCE_START.match(line.strip())
        if match is not None:
            current = sources.setdefault(int(match.group(1)), [])
            current.append(match.group(2))
        elif current is not None:
            current.append(line)
    return {sid: "\n".join(lines) for sid, lines in sources.items()}


def _numbers_in(text: str) -> set[str]:
    return set(_NUMBER.findall(text))


def _supported(claim: str, source_numbers: set[str]) -> bool:
    return _UNSUPPORTED.search(claim) is None and _numbers_in(claim) <= source_numbers


def _judge_verdicts(request: dict[str, Any]) -> str:
    user = _user_text_with(request, "claims")
    sources = _parse_sources(_block(user, "sources"))
    all_numbers = _numbers_in("\n".join(sources.values()))
    verdicts: list[tuple[int, bool, bool | None]] = []
    for line in _block(user, "claims").splitlines():
        if not line.strip():
            continue
        claim = json.loads(line)
        if not isinstance(claim, dict):
            raise ValueError(f"a <claims> line is not a JSON object: {line!r}")
        text = str(claim.get("text", ""))
        citations = claim.get("citations") or []
        cited: bool | None = None
        if citations:
            cited_text = "\n".join(sources.get(int(c), "") for c in citations)
            cited = _supported(text, _numbers_in(cited_text))
        verdicts.append((int(claim["id"]), _supported(text, all_numbers), cited))
    return verdicts_json(verdicts)


def instruction_following_judge(schema_name: str, request: dict[str, Any]) -> str:
    """``default_judge``, but obeying what it reads as an instruction (module docstring)."""
    users = [_content_text(m.get("content")) for m in _messages(request) if m.get("role") == "user"]
    text = "\n".join(users)
    if schema_name == CLAIMS_SCHEMA:
        if _NO_CLAIMS.search(text):
            return claims_json([])
        claims = json.loads(_judge_claims(request))["claims"]
        kept = [
            c for c in claims if not (_NO_CLAIMS.search(c["text"]) or _MARK_ALL.search(c["text"]))
        ]
        return claims_json([(n, c["text"], c["sentence"]) for n, c in enumerate(kept, start=1)])
    if schema_name == VERDICTS_SCHEMA and _MARK_ALL.search(text):
        verdicts = json.loads(_judge_verdicts(request))["verdicts"]
        return verdicts_json(
            [(v["id"], True, None if v["cited_support"] is None else True) for v in verdicts]
        )
    return default_judge(schema_name, request)


def default_judge(schema_name: str, request: dict[str, Any]) -> str:
    """Answer observer's judge protocol deterministically.

    The blocks are read from the last user message that has them (the last user message,
    except on a repair turn that follows it).

    - ``observer_claims``: one claim per ``[i] sentence`` line of the
      ``<answer_sentences>`` block (citation markers such as ``[1]`` or ``[1][2]`` removed,
      empty sentences skipped, ids from 1).
    - ``observer_verdicts``: a claim (one JSON object per line of ``<claims>``) is supported
      when it does not contain the word ``UNSUPPORTED`` and every number in it (digits with
      an optional decimal part, compared as whole number tokens) occurs in the text of the
      ``<sources>`` (the ``[n]`` markers excluded); ``cited_support`` is the same check over
      the cited sources only, or null without citations.
    """
    if schema_name == CLAIMS_SCHEMA:
        return _judge_claims(request)
    if schema_name == VERDICTS_SCHEMA:
        return _judge_verdicts(request)
    raise ValueError(f"default_judge: unknown schema {schema_name!r}")


# --------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------


class _Reply:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.body = body
        self.headers = headers or {}


def _error(
    status: int,
    message: str | None = None,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> _Reply:
    default_type, default_code, default_message = _ERRORS.get(
        status,
        ("server_error" if status >= 500 else "invalid_request_error", None, "Error."),
    )
    body = {
        "error": {
            "message": message if message is not None else default_message,
            "type": default_type,
            "param": param,
            "code": code if code is not None else default_code,
        }
    }
    return _Reply(status, body, headers)


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


class _Handler(LoopbackHandler):
    server_version = "OpenAIStub/1.0"


# --------------------------------------------------------------------------------------
# The stub
# --------------------------------------------------------------------------------------


class OpenAIStub(LoopbackService):
    """In-process OpenAI chat-completions stub. Use as a context manager or start()/stop().

    ``url`` is ``http://127.0.0.1:PORT``; the client's base_url is ``url + "/v1"``.
    """

    service_name = "OpenAIStub"
    thread_prefix = "openai-stub"
    handler_class = _Handler

    latency_s: float
    reject_json_schema: bool
    finish_reason: str
    judge: Judge

    def __init__(self, judge: Judge | None = None) -> None:
        super().__init__()
        self.judge = judge if judge is not None else default_judge
        self.latency_s = 0.0
        self.reject_json_schema = False
        self.echo_key = False  # error bodies quote the bearer token received
        self.finish_reason = "stop"
        self._lock = threading.Lock()
        self._script: deque[Scripted] = deque()
        self._requests: list[dict[str, Any]] = []
        self._request_headers: list[dict[str, str]] = []
        self._judge_errors: list[BaseException] = []
        self._counter = 0

    # ---- test controls and inspection ---------------------------------------------------

    def script(self, *responses: Scripted) -> None:
        """Queue answers, consumed one per chat request before the judge is asked.

        ``str`` -> 200 with that content; ``int`` (400-599) -> that status with an
        OpenAI-style error body; ``(status, retry_after_s)`` -> that status (e.g. 429) with a
        ``retry-after`` header; ``("sleep", seconds)`` -> sleep, then answer via the judge.
        """
        for response in responses:
            _validate_scripted(response)
        with self._lock:
            self._script.extend(responses)

    @property
    def pending_script(self) -> int:
        """Scripted answers not consumed yet."""
        with self._lock:
            return len(self._script)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every authenticated chat request body (parsed JSON), in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """The headers (lower-cased names) of each request in ``requests``."""
        with self._lock:
            return list(self._request_headers)

    @property
    def calls(self) -> int:
        """Number of chat requests received (the length of ``requests``)."""
        with self._lock:
            return len(self._requests)

    @property
    def judge_errors(self) -> list[BaseException]:
        """Exceptions the judge raised (each answered with a 500)."""
        with self._lock:
            return list(self._judge_errors)

    def reset(self) -> None:
        """Forget requests, judge errors and unconsumed scripted answers."""
        with self._lock:
            self._script.clear()
            self._requests.clear()
            self._request_headers.clear()
            self._judge_errors.clear()

    # ---- request handling ------------------------------------------------------------

    def _handle(self, handler: LoopbackHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length > 0 else b""
        path = urlsplit(handler.path).path
        if handler.command != "POST" or path != CHAT_PATH:
            reply = _error(404, f"Invalid URL ({handler.command} {path})")
        else:
            reply = self._chat(handler, raw)
        self._respond(handler, reply)

    def _chat(self, handler: LoopbackHandler, raw: bytes) -> _Reply:
        auth = handler.headers.get("Authorization") or ""
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _error(401)
        try:
            request = json.loads(raw)
        except ValueError:
            return _error(400, "We could not parse the JSON body of your request.")
        if not isinstance(request, dict):
            return _error(400, "The request body must be a JSON object.")
        with self._lock:
            self._requests.append(request)
            self._request_headers.append({k.lower(): v for k, v in handler.headers.items()})
            self._counter += 1
            number = self._counter

        invalid = _validate_request(request)
        response_format = request.get("response_format")
        is_json_schema = (
            isinstance(response_format, dict) and response_format.get("type") == "json_schema"
        )
        scripted: Scripted | None = None
        if invalid is None and not (self.reject_json_schema and is_json_schema):
            with self._lock:
                scripted = self._script.popleft() if self._script else None

        self._sleep(handler.server, self.latency_s)
        early = self._hostile(invalid, scripted, token)
        if early is not None:
            return early
        if invalid is not None:
            return invalid
        if self.reject_json_schema and is_json_schema:
            return _error(400, JSON_SCHEMA_REJECTION, param="response_format")
        if isinstance(scripted, str):
            return self._completion(request, scripted, number)
        if isinstance(scripted, int):
            return _error(scripted)
        if isinstance(scripted, tuple):
            first, seconds = scripted
            if isinstance(first, int):
                return _error(first, headers={"retry-after": _format_seconds(seconds)})
            self._sleep(handler.server, seconds)

        schema_name = schema_name_of(request)
        try:
            content = self.judge(schema_name, request)
        except Exception as exc:
            with self._lock:
                self._judge_errors.append(exc)
            return _error(500, f"stub judge raised {type(exc).__name__}: {exc}")
        return self._completion(request, content, number)

    def _hostile(
        self, invalid: _Reply | None, scripted: Scripted | None, token: str
    ) -> _Reply | None:
        """A broken endpoint's answer: an error quoting the key (``echo_key``), a ``Raw``."""
        if self.echo_key and (invalid is not None or isinstance(scripted, int)):
            status = 400 if invalid is not None or not isinstance(scripted, int) else scripted
            return _error(status, f"Incorrect API key provided: {token.strip()}")
        if isinstance(scripted, Raw):
            return _Reply(scripted.status, scripted.body, {"content-type": scripted.content_type})
        return None

    def _completion(self, request: dict[str, Any], content: str, number: int) -> _Reply:
        prompt_chars = sum(len(_content_text(m.get("content"))) for m in _messages(request))
        prompt_tokens = max(1, prompt_chars // 4)
        completion_tokens = max(1, len(content) // 4)
        body: dict[str, Any] = {
            "id": f"chatcmpl-stub{number:06d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": content,
                        "refusal": None,
                        "annotations": [],
                    },
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "service_tier": "default",
            "system_fingerprint": None,
        }
        return _Reply(200, body)

    @staticmethod
    def _sleep(server: LoopbackHTTPServer, seconds: float) -> None:
        if seconds > 0:
            server.stopped.wait(seconds)

    @staticmethod
    def _respond(handler: LoopbackHandler, reply: _Reply) -> None:
        raw = isinstance(reply.body, bytes)
        payload = reply.body if raw else json.dumps(reply.body).encode()
        handler.send_response(reply.status, HTTPStatus(reply.status).phrase)
        if not raw:
            handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.send_header("x-request-id", f"req_{uuid.uuid4().hex}")
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(payload)
        handler.wfile.flush()


def _validate_scripted(response: object) -> None:
    if isinstance(response, bool):
        raise TypeError(f"not a scripted answer: {response!r}")
    if isinstance(response, str | Raw):
        return
    if isinstance(response, int):
        if not 400 <= response <= 599:
            raise ValueError(f"a scripted status must be 400-599, got {response}")
        return
    if isinstance(response, tuple) and len(response) == 2:
        first, seconds = response
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ValueError(f"a scripted delay must be a number >= 0, got {seconds!r}")
        if first == "sleep":
            return
        if isinstance(first, int) and not isinstance(first, bool) and 400 <= first <= 599:
            return
    raise TypeError(f"not a scripted answer: {response!r}")


def _validate_request(request: dict[str, Any]) -> _Reply | None:
    """The real API's 400s for the request shapes observer could get wrong."""
    model = request.get("model")
    if not isinstance(model, str) or not model:
        return _error(400, "you must provide a model parameter", param="model")
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return _error(
            400,
            "Invalid 'messages': empty array. Expected an array with minimum length 1.",
            param="messages",
            code="empty_array",
        )
    response_format = request.get("response_format")
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_object":
        text = " ".join(_content_text(m.get("content")) for m in _messages(request))
        if "json" not in text.lower():
            return _error(
                400,
                "'messages' must contain the word 'json' in some form, to use "
                "'response_format' of type 'json_object'.",
                param="messages",
            )
    elif kind == "json_schema":
        schema = response_format.get("json_schema")
        if not isinstance(schema, dict) or not isinstance(schema.get("name"), str):
            return _error(
                400,
                "Missing required parameter: 'response_format.json_schema.name'.",
                param="response_format.json_schema.name",
                code="missing_required_parameter",
            )
    elif kind != "text":
        return _error(
            400,
            f"Invalid value: {kind!r}. Supported values are: 'json_object', "
            "'json_schema', and 'text'.",
            param="response_format.type",
            code="invalid_value",
        )
    return None
