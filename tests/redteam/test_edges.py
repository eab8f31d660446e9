"""observer's own edges are bounded (issue 43, finding 11).

The HTTP port kept every idle connection, with no timeout (a thread each);
`query_type` label values had no length bound (192 MB of `/metrics` from 20
traces).
"""

from __future__ import annotations

import re
import socket
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest

from observer.health import Health
from observer.model import RagRecord, Source
from observer.signals import SignalParams, compute
from observer.telemetry.http import HttpServer
from observer.telemetry.metrics import Metrics
from tests.waiting import wait_until

LABEL_VALUE = re.compile(r'="([^"]*)"')
MAX_LABEL_CHARS = 64  # docs/operating.md, "Metrics": a label value read from a trace


def health() -> Health:
    return Health(
        stale_after_s=None,
        langfuse_within_s=None,
        max_lag_s=600,
        lag_s=lambda: 0.0,
        outbox=lambda: 0,
        max_outbox=10,
    )


@pytest.fixture
def server() -> Iterator[HttpServer]:
    served = HttpServer(
        "127.0.0.1", 0, Metrics().registry, health(), idle_timeout_s=0.3, max_connections=4
    ).start()
    try:
        yield served
    finally:
        served.stop()


def connect(server: HttpServer) -> socket.socket:
    return socket.create_connection(server.address, timeout=10)


def closed_by_the_server(connection: socket.socket) -> bool:
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


def test_an_idle_connection_is_closed(server: HttpServer) -> None:
    idle = connect(server)
    try:
        assert closed_by_the_server(idle)  # within the socket's 10 s; the server's 0.3 s
    finally:
        idle.close()
    with urllib.request.urlopen(server.url + "/healthz", timeout=10) as answer:
        assert answer.status == 200


def test_connections_past_the_cap_are_closed_and_hold_no_thread(server: HttpServer) -> None:
    threads = threading.active_count()
    idle = [connect(server) for _ in range(20)]
    try:
        wait_until(
            lambda: sum(closed_by_the_server(c) for c in idle[-8:]) == 8,
            "the connections past the cap closed",
            timeout_s=10,
        )
        assert threading.active_count() <= threads + 4
    finally:
        for connection in idle:
            connection.close()


def test_a_label_value_from_a_trace_is_cut_to_its_documented_length() -> None:
    metrics = Metrics()
    for n in range(20):
        record = RagRecord(
            trace_id=f"t{n}",
            question="Why?",
            answer="A fact [1].",
            sources=(Source(text="A fact."),),
            query_type=f"{n}" + "q" * 20_000,
            environment="e" * 20_000,
            release="r" * 20_000,
            model="m" * 20_000,
        )
        metrics.observe_answer(record, compute(record, SignalParams()))
    text = generate_latest(metrics.registry)
    assert len(text) < 2_000_000, f"{len(text):,} bytes of /metrics from 20 traces"
    assert max(len(value) for value in LABEL_VALUE.findall(text.decode())) <= MAX_LABEL_CHARS
