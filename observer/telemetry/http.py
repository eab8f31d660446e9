"""One HTTP port for operators: `/metrics`, `/healthz`, `/readyz`.

- `/metrics`: the Prometheus text of the injected registry (prometheus_client's
  own handler does the exposition, content negotiation and gzip).
- `/healthz`: 200 while the poll loop's heartbeat is fresh; 503 when it is
  stale (a wedged loop: restart me).
- `/readyz`: 200 once Langfuse answered recently, a pass completed recently,
  the lag is under its bound and the outbox is not full; 503 with a JSON body
  naming every reason otherwise (do not count on my numbers yet): a daemon
  whose every pass fails says "no pass has completed for N s".

`observer demo --serve` serves a finished run that reads no Langfuse: there
`heartbeat_of` names the serving loop, which beats while it serves, and
`langfuse_not_used` says why readiness does not ask for Langfuse (the body's
`langfuse` key); lag and outbox are judged as always.

Served from a daemon thread; `stop()` closes the port. No body text holds a
question, an answer or a secret. Bounded: a connection idle for `IDLE_TIMEOUT_S`
is closed, and past `MAX_CONNECTIONS` open at once a new one is closed at once
(a scraper that never sends its request, or a flood of them, holds no thread).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

log = structlog.get_logger("observer.http")

IDLE_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32


class Health:
    """What the probes answer, from heartbeats the daemon records. Thread-safe enough:
    each field is one float written by one thread."""

    def __init__(
        self,
        *,
        stale_after_s: float | None,
        langfuse_within_s: float | None,
        max_lag_s: float,
        lag_s: Callable[[], float],
        outbox: Callable[[], int],
        max_outbox: int,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_of: str = "the poll loop",
        langfuse_not_used: str | None = None,
        pass_within_s: float | None = None,
    ) -> None:
        """`stale_after_s` None: never stale; `langfuse_within_s` None or
        `langfuse_not_used` set: readiness does not ask for Langfuse; `pass_within_s`
        None: nor for a completed pass."""
        self.pass_within_s = pass_within_s
        self.stale_after_s = stale_after_s
        self.langfuse_within_s = langfuse_within_s
        self.max_lag_s = max_lag_s
        self.lag_s = lag_s
        self.outbox = outbox
        self.max_outbox = max_outbox
        self.clock = clock
        self.heartbeat_of = heartbeat_of
        self.langfuse_not_used = langfuse_not_used
        self._beat = clock()
        self._started = self._beat
        self._langfuse: float | None = None
        self._pass: float | None = None
        self.not_ready_because: str | None = None  # set by the daemon (e.g. disk full)

    def beat(self) -> None:
        """The loop `heartbeat_of` names is alive (the poll loop: per pass and per page)."""
        self._beat = self.clock()

    def langfuse_answered(self) -> None:
        self._langfuse = self.clock()

    def pass_completed(self) -> None:
        self._pass = self.clock()

    def live(self) -> tuple[bool, dict[str, Any]]:
        age = self.clock() - self._beat
        fresh = self.stale_after_s is None or age <= self.stale_after_s
        body: dict[str, Any] = {
            "status": "ok" if fresh else "stale",
            "heartbeat_age_s": round(age, 1),
            "heartbeat_of": self.heartbeat_of,
        }
        if not fresh:
            body["reason"] = f"{self.heartbeat_of} has not beaten for {age:.0f} s"
        return fresh, body

    def ready(self) -> tuple[bool, dict[str, Any]]:
        reasons: list[str] = []
        now = self.clock()
        body: dict[str, Any] = {}
        if self.langfuse_not_used is not None:
            body["langfuse"] = self.langfuse_not_used
        elif self.langfuse_within_s is not None:
            if self._langfuse is None:
                reasons.append("Langfuse has not answered yet")
            else:
                ago = now - self._langfuse
                body["langfuse_answered_s_ago"] = round(ago, 1)
                if ago > self.langfuse_within_s:
                    reasons.append(f"Langfuse has not answered for {ago:.0f} s")
        if self.pass_within_s is not None and self.langfuse_not_used is None:
            ago = now - (self._pass if self._pass is not None else self._started)
            body["pass_completed_s_ago"] = None if self._pass is None else round(ago, 1)
            if ago > self.pass_within_s:
                reasons.append(f"no pass has completed for {ago:.0f} s")
        lag = self.lag_s()
        body["lag_s"] = round(lag, 1)
        if lag > self.max_lag_s:
            reasons.append(f"lag {lag:.0f} s is above {self.max_lag_s:g} s")
        size = self.outbox()
        body["outbox"] = size
        if size >= self.max_outbox:
            reasons.append(f"the outbox is full ({size} scores)")
        if self.not_ready_because:
            reasons.append(self.not_ready_because)
        body["status"] = "ready" if not reasons else "not ready"
        if reasons:
            body["reasons"] = reasons
        return not reasons, body


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them; the rest closed."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler: type[MetricsHandler], max_connections: int
    ) -> None:
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("http_connection_refused", reason="too many open connections")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _handler(
    registry: CollectorRegistry, health: Health, idle_timeout_s: float
) -> type[MetricsHandler]:
    class Handler(MetricsHandler):
        timeout = idle_timeout_s  # a connection silent this long is closed

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/metrics":
                super().do_GET()
            elif path == "/healthz":
                self._json(*health.live())
            elif path == "/readyz":
                self._json(*health.ready())
            else:
                self._json(False, {"error": "not found: /metrics, /healthz, /readyz"}, 404)

        def _json(self, ok: bool, body: dict[str, Any], failed: int = 503) -> None:
            data = json.dumps(body).encode()
            self.send_response(200 if ok else failed)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    Handler.registry = registry
    return Handler


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        health: Health,
        *,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._server = _BoundedServer(
            (host, port), _handler(registry, health, idle_timeout_s), max_connections
        )
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> HttpServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="observer-http", daemon=True
        )
        self._thread.start()
        log.info("http_started", url=self.url)
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()
