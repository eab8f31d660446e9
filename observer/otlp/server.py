"""The OTLP/HTTP endpoint: a WSGI app on cheroot (CherryPy's threaded HTTP/1.1 server).

Routes: ``POST /v1/traces`` (what an OpenTelemetry Collector or SDK exporter sends to an
OTLP/HTTP endpoint) and ``POST /api/public/otel/v1/traces`` (what the Langfuse SDK sends
to ``LANGFUSE_BASE_URL``: observer can stand where Langfuse would). The answers follow
the OTLP/HTTP specification (opentelemetry-specification ``specification/protocol/otlp.md``,
"OTLP/HTTP Response"): 200 with an empty ``ExportTraceServiceResponse`` in the request's
encoding; a body that cannot be decoded 400 (413 too large, 415 neither protobuf nor
JSON), never retried by the sender; when observer cannot take the spans now, 429 (the
assembly is full) or 503 (the outbox is full, or the daemon is stopping) with
``Retry-After``, which the sender honours before it retries ("OTLP/HTTP Throttling");
errors carry a ``google.rpc.Status`` with a message. 401 without the expected
credentials (``WWW-Authenticate: Basic``).

Credentials: the Langfuse project's keys as HTTP basic auth (``public:secret``, what the
Langfuse SDK's exporter sends), or ``Authorization: Bearer <token>`` with the token from
the variable ``otlp.secret_env`` names; compared in constant time. With none configured
(loopback only: observer.otlp.receiver refuses the rest) every request is taken.

cheroot serves from a bounded pool of threads (``otlp.threads``), keeps connections
alive (the OTLP client SHOULD) and closes idle ones after ``timeout`` seconds, and refuses
a body over ``otlp.max_request_bytes`` with 413 before reading it.
"""

from __future__ import annotations

import base64
import hmac
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import structlog
from cheroot import wsgi

from observer.otlp import wire

log = structlog.get_logger("observer.otlp")

TRACES_PATH = "/v1/traces"
LANGFUSE_TRACES_PATH = "/api/public/otel/v1/traces"
TRACE_PATHS = (TRACES_PATH, LANGFUSE_TRACES_PATH)

Result = Literal[
    "accepted",
    "throttled",
    "unavailable",
    "unauthorized",
    "bad_request",
    "too_large",
    "unsupported",
]


@dataclass(frozen=True, slots=True)
class ExportAnswer:
    """What the receiver made of a decoded export: taken, or come back after a while."""

    result: Literal["accepted", "throttled", "unavailable"]
    retry_after_s: float = 0.0
    reason: str = ""


class Credentials:
    """The `Authorization` values a sender may present (none configured: any request)."""

    def __init__(
        self, public_key: str | None = None, secret_key: str | None = None, token: str | None = None
    ) -> None:
        self._accepted: list[bytes] = []
        if public_key and secret_key:
            pair = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
            self._accepted.append(f"Basic {pair}".encode())
        if token:
            self._accepted.append(f"Bearer {token}".encode())

    @property
    def configured(self) -> bool:
        return bool(self._accepted)

    def allow(self, header: str | None) -> bool:
        if not self._accepted:
            return True
        given = _normalised(header or "")
        # Every candidate compared, so the time taken says nothing about which one is near.
        matches = [hmac.compare_digest(given, accepted) for accepted in self._accepted]
        return any(matches)


def _normalised(header: str) -> bytes:
    """The scheme's case does not matter (RFC 9110 §11.1); the credentials' does."""
    scheme, _, rest = header.strip().partition(" ")
    return f"{scheme.capitalize()} {rest.strip()}".encode()


Accept = Callable[[wire.Decoded], ExportAnswer]


class OtlpApp:
    """The WSGI application: decoding and answering; `accept` decides what is taken."""

    def __init__(
        self,
        accept: Accept,
        credentials: Credentials,
        *,
        max_request_bytes: int,
        on_result: Callable[[Result], None] = lambda _result: None,
    ) -> None:
        self.accept = accept
        self.credentials = credentials
        self.max_request_bytes = max_request_bytes
        self.on_result = on_result

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "")
        kind = _reply_kind(environ.get("CONTENT_TYPE"))
        if path not in TRACE_PATHS:
            return _plain(start_response, "404 Not Found", f"not found: POST {TRACES_PATH}")
        if method != "POST":
            return _plain(
                start_response, "405 Method Not Allowed", "POST only", [("Allow", "POST")]
            )
        if not self.credentials.allow(environ.get("HTTP_AUTHORIZATION")):
            self.on_result("unauthorized")
            log.warning("otlp_unauthorized", path=path, remote=environ.get("REMOTE_ADDR"))
            return _status(
                start_response,
                kind,
                401,
                "credentials refused: the project's Langfuse keys as basic auth, or the bearer "
                "token of otlp.secret_env",
                [("WWW-Authenticate", 'Basic realm="observer"')],
            )
        try:
            decoded = wire.decode(
                _body(environ, self.max_request_bytes),
                environ.get("CONTENT_TYPE"),
                environ.get("HTTP_CONTENT_ENCODING"),
                self.max_request_bytes,
            )
        except wire.BadBody as error:
            result: Result = "bad_request"
            status = 400
            if isinstance(error, wire.BodyTooLarge):
                result, status = "too_large", 413
            elif isinstance(error, wire.UnsupportedMedia):
                result, status = "unsupported", 415
            self.on_result(result)
            log.warning("otlp_refused", path=path, status=status, error=str(error))
            return _status(start_response, kind, status, str(error))
        verdict = self.accept(decoded)
        self.on_result(verdict.result)
        if verdict.result == "accepted":
            body = wire.reply(kind)
            start_response("200 OK", [("Content-Type", kind), ("Content-Length", str(len(body)))])
            return [body]
        status = 429 if verdict.result == "throttled" else 503
        wait = str(max(1, math.ceil(verdict.retry_after_s)))
        return _status(start_response, kind, status, verdict.reason, [("Retry-After", wait)])


def _reply_kind(content_type: str | None) -> str:
    try:
        return wire.media_type(content_type)
    except wire.UnsupportedMedia:
        return wire.PROTOBUF


def _body(environ: dict[str, Any], max_bytes: int) -> bytes:
    length_text = environ.get("CONTENT_LENGTH") or ""
    stream = environ["wsgi.input"]
    if length_text.isdigit():
        length = int(length_text)
        if length > max_bytes:
            raise wire.BodyTooLarge(f"body of {length} bytes; the receiver takes {max_bytes}")
        return bytes(stream.read(length))
    data = stream.read(max_bytes + 1)  # chunked: cheroot ends the stream with the body
    if len(data) > max_bytes:
        raise wire.BodyTooLarge(f"body past the {max_bytes} bytes the receiver takes")
    return bytes(data)


_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    429: "Too Many Requests",
    503: "Service Unavailable",
}


def _status(
    start_response: Callable[..., Any],
    kind: str,
    code: int,
    message: str,
    headers: list[tuple[str, str]] | None = None,
) -> list[bytes]:
    """An OTLP error answer: a `google.rpc.Status` in the request's encoding."""
    body = wire.status(kind, _rpc_code(code), message)
    start_response(
        f"{code} {_REASONS[code]}",
        [("Content-Type", kind), ("Content-Length", str(len(body))), *(headers or [])],
    )
    return [body]


def _rpc_code(http: int) -> int:
    """The gRPC code beside the HTTP one (google.rpc.Code)."""
    return {400: 3, 401: 16, 413: 3, 415: 3, 429: 8, 503: 14}.get(http, 2)


def _plain(
    start_response: Callable[..., Any],
    status: str,
    text: str,
    headers: list[tuple[str, str]] | None = None,
) -> list[bytes]:
    body = text.encode()
    start_response(
        status,
        [("Content-Type", "text/plain"), ("Content-Length", str(len(body))), *(headers or [])],
    )
    return [body]


class OtlpServer:
    """cheroot serving `app` on (host, port) from a daemon thread; `stop()` closes it."""

    def __init__(self, host: str, port: int, app: OtlpApp, *, threads: int) -> None:
        self._server = wsgi.Server(
            (host, port),
            app,
            numthreads=threads,
            max=threads,
            server_name="observer-otlp",
            timeout=30,  # an idle kept-alive connection is closed after it
            shutdown_timeout=2,
        )
        self._server.max_request_body_size = app.max_request_bytes
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.bind_addr[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}"

    def start(self) -> OtlpServer:
        """Bind now (OSError when the address is taken), then serve on a daemon thread."""
        self._server.prepare()
        self._thread = threading.Thread(
            target=self._server.serve, name="observer-otlp", daemon=True
        )
        self._thread.start()
        log.info("otlp_listening", url=self.url)
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.stop()
            self._thread.join(timeout=5)
            self._thread = None
