"""A loopback HTTP receiver that records every request and answers as told (notifier tests).

It stands in for Alertmanager, PagerDuty's Events API, a Slack incoming
webhook or a generic webhook endpoint: any method, any path. Every request is
recorded on arrival (method, path, query, headers with lower-case names,
body, arrival time) before it is answered, so a test sees attempts that are
still waiting for their answer.

Answers: the default given to the constructor (200 ``ok``), unless scripted.
``script(*answers)`` queues answers for the next requests, in order;
``fail(n, status)``, ``rate_limit(retry_after)`` and ``slow(delay_s)`` are
shorthands. A slow answer sleeps in its own handler thread and is cut short by
``stop()``, which is a real outage (the port closes, connections are cut).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .loopback import LoopbackHandler, LoopbackService

__all__ = ["Answer", "Received", "Receiver"]


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    at: float
    """``time.monotonic()`` when the request arrived."""

    @property
    def text(self) -> str:
        return self.body.decode()

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b"ok"
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0


class Receiver(LoopbackService):
    service_name = "Receiver"
    thread_prefix = "receiver"
    handler_class = LoopbackHandler

    def __init__(self, default: Answer | None = None) -> None:
        super().__init__()
        self.default = default or Answer()
        self._lock = threading.Condition()
        self._requests: list[Received] = []
        self._script: deque[Answer] = deque()

    # -- telling it how to answer ---------------------------------------------

    def script(self, *answers: Answer) -> None:
        """Answer the next requests with these, in order; then the default again."""
        with self._lock:
            self._script.extend(answers)

    def fail(self, times: int, status: int = 500, body: bytes = b"internal error") -> None:
        self.script(*[Answer(status, body)] * times)

    def rate_limit(self, retry_after: str, times: int = 1) -> None:
        self.script(*[Answer(429, b"rate limited", (("Retry-After", retry_after),))] * times)

    def slow(self, delay_s: float, times: int = 1) -> None:
        self.script(*[Answer(self.default.status, self.default.body, delay_s=delay_s)] * times)

    # -- what it got ----------------------------------------------------------

    @property
    def requests(self) -> list[Received]:
        with self._lock:
            return list(self._requests)

    def wait_for(
        self,
        count: int,
        timeout_s: float = 5.0,
        where: Callable[[Received], bool] = lambda _request: True,
    ) -> list[Received]:
        """The first `count` requests (those `where` accepts), waiting up to `timeout_s` for
        them; AssertionError if not."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while len(found := [r for r in self._requests if where(r)]) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"expected {count} requests within {timeout_s}s, got {len(found)}"
                    )
                self._lock.wait(remaining)
            return found[:count]

    # -- serving --------------------------------------------------------------

    def _handle(self, handler: LoopbackHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        url = urlsplit(handler.path)
        received = Received(
            method=handler.command,
            path=url.path,
            query=url.query,
            headers={name.lower(): value for name, value in handler.headers.items()},
            body=body,
            at=time.monotonic(),
        )
        with self._lock:
            self._requests.append(received)
            answer = self._script.popleft() if self._script else self.default
            self._lock.notify_all()
        if answer.delay_s and handler.server.stopped.wait(answer.delay_s):
            return  # stop() during the delay: the connection is being cut
        handler.send_response(answer.status)
        for name, value in answer.headers:
            handler.send_header(name, value)
        if not any(name.lower() == "content-type" for name, _ in answer.headers):
            handler.send_header("Content-Type", "text/plain; charset=utf-8")
        handler.send_header("Content-Length", str(len(answer.body)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(answer.body)
