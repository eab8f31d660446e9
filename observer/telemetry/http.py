"""One HTTP port for operators: `/metrics`, `/healthz`, `/readyz`.

- `/metrics`: the Prometheus text of the injected registry (prometheus_client's
  own handler does the exposition, content negotiation and gzip).
- `/healthz`: 200 while the poll loop's heartbeat is fresh; 503 when it is
  stale (a wedged loop: restart me).
- `/readyz`: 200 once Langfuse answered recently, a pass completed recently,
  the lag is under its bound and the outbox is not full; 503 with a JSON body
  naming every reason otherwise (do not count on my numbers yet): a daemon
  whose every pass fails says "no pass has completed for N s".

What the probes answer is `observer.health.Health`'s; this module only serves it.

Served from a daemon thread; `stop()` closes the port. No body text holds a
question, an answer or a secret. Bounded: a connection idle for `IDLE_TIMEOUT_S`
is closed, and past `MAX_CONNECTIONS` open at once a new one is closed at once
(a scraper that never sends its request, or a flood of them, holds no thread).
"""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

from observer.health import Health

log = structlog.get_logger("observer.http")

IDLE_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32


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
