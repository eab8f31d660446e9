"""The server lifecycle the in-process test fakes share (``FakeLangfuse``, ``OpenAIStub``).

Stdlib only: a ``ThreadingHTTPServer`` on ``127.0.0.1`` (port chosen by the OS on the first
``start()``, reused on every later ``start()``) served from a daemon thread. ``stop()`` is a
real outage: accepting stops, the port is closed and open keep-alive connections are cut.

A fake subclasses ``LoopbackService``, names itself (``service_name``, ``thread_prefix``),
sets ``handler_class`` to a ``LoopbackHandler`` subclass (for its ``server_version``) and
implements ``_handle(handler)``, which answers one request of any method.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Self

__all__ = ["HOST", "LoopbackHTTPServer", "LoopbackHandler", "LoopbackService"]

HOST = "127.0.0.1"


def _cut(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)


class LoopbackHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its open connections and can cut them all."""

    daemon_threads = True  # a forgotten fake never blocks interpreter exit
    block_on_close = False  # (it would not join daemon threads anyway: see join_handlers)
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        service: LoopbackService,
        handler_class: type[LoopbackHandler],
    ) -> None:
        self.service = service
        self.stopped = threading.Event()  # wakes handlers sleeping in a delay
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._connections_lock = threading.Lock()
        self._closed = False
        self._cut_handlers: list[threading.Thread] = []
        super().__init__(address, handler_class)

    def track(self, connection: socket.socket) -> None:
        with self._connections_lock:
            if not self._closed:
                self._connections[connection] = threading.current_thread()
                return
        _cut(connection)  # accepted just before the outage began

    def untrack(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.pop(connection, None)

    def cut_connections(self) -> None:
        """Cut every open (keep-alive or in-flight) connection, like a crashed server."""
        with self._connections_lock:
            self._closed = True
            connections = list(self._connections.items())
            self._connections.clear()
        for connection, thread in connections:
            _cut(connection)
            self._cut_handlers.append(thread)

    def join_handlers(self, timeout: float) -> None:
        """Wait until the handlers of cut connections have exited (``timeout`` in all)."""
        deadline = time.monotonic() + timeout
        for thread in self._cut_handlers:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that timed out or stop() cutting a connection raise here; stay quiet."""


class LoopbackHandler(BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1; every method goes to the service's ``_handle``; no access log."""

    server: LoopbackHTTPServer
    protocol_version = "HTTP/1.1"  # keep-alive, as clients' connection pools expect
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    timeout = 30.0

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.untrack(self.connection)

    def _dispatch(self) -> None:
        self.server.service._handle(self)

    do_GET = _dispatch
    do_POST = _dispatch
    do_PUT = _dispatch
    do_PATCH = _dispatch
    do_DELETE = _dispatch
    do_HEAD = _dispatch

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log."""


class LoopbackService:
    """start()/stop() (or a context manager) of one ``LoopbackHTTPServer`` on 127.0.0.1."""

    service_name: ClassVar[str]
    """Named in errors, e.g. ``"FakeLangfuse has not been started"``."""
    thread_prefix: ClassVar[str]
    """The serving thread is ``f"{thread_prefix}-{port}"``."""
    handler_class: ClassVar[type[LoopbackHandler]] = LoopbackHandler
    join_handlers_on_stop: ClassVar[bool] = False
    """stop() also waits (up to 5 s) for the handlers of the connections it cut."""

    def __init__(self) -> None:
        self._lifecycle_lock = threading.Lock()
        self._server: LoopbackHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    def _handle(self, handler: LoopbackHandler) -> None:
        """Answer one request (any method) on ``handler``."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``; a RuntimeError before the first start()."""
        if self._port == 0:
            raise RuntimeError(f"{self.service_name} has not been started")
        return f"http://{HOST}:{self._port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> Self:
        """Listen (again) on 127.0.0.1; after a stop() the same port is reused."""
        with self._lifecycle_lock:
            if self._server is not None:
                return self
            server = self._bind()
            self._port = int(server.server_address[1])
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.01},
                name=f"{self.thread_prefix}-{self._port}",
                daemon=True,
            )
            self._server = server
            self._thread = thread
            thread.start()
            return self

    def _bind(self) -> LoopbackHTTPServer:
        """Bind 127.0.0.1; a fixed port (restart) is retried for up to 2 s while busy."""
        deadline = time.monotonic() + 2.0
        while True:
            try:
                return LoopbackHTTPServer((HOST, self._port), self, self.handler_class)
            except OSError as exc:
                if self._port == 0 or exc.errno != errno.EADDRINUSE:
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def stop(self) -> None:
        """A real outage: stop accepting, close the port and cut open connections."""
        with self._lifecycle_lock:
            server, thread = self._server, self._thread
            self._server = None
            self._thread = None
            if server is None:
                return
            server.stopped.set()  # wakes handlers sleeping in a delay
            server.shutdown()  # no more accept()
            server.cut_connections()
            server.server_close()  # the port is closed from here on
            if self.join_handlers_on_stop:
                server.join_handlers(timeout=5)
            if thread is not None:
                thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
