"""/metrics, /healthz and /readyz: the probes' rules, and the daemon serving them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from observer.health import Health
from observer.telemetry.http import HttpServer
from observer.telemetry.metrics import Metrics
from tests.app.test_shutdown import daemon_env
from tests.fakes.langfuse_server import FakeLangfuse
from tests.servers import free_port


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def health(clock: Clock, lag: float = 0.0, outbox: int = 0) -> Health:
    return Health(
        stale_after_s=90,
        langfuse_within_s=300,
        max_lag_s=600,
        lag_s=lambda: lag,
        outbox=lambda: outbox,
        max_outbox=100,
        clock=clock,
    )


def test_live_while_the_loop_beats_stale_after() -> None:
    clock = Clock()
    probe = health(clock)
    assert probe.live()[0]
    clock.now += 91
    alive, body = probe.live()
    assert not alive and "has not beaten for 91 s" in body["reason"]
    probe.beat()
    assert probe.live()[0]


@pytest.mark.parametrize(
    ("answered_ago", "lag", "outbox", "reasons"),
    [
        (10, 0, 0, []),
        (None, 0, 0, ["Langfuse has not answered yet"]),
        (301, 0, 0, ["Langfuse has not answered for 301 s"]),
        (10, 601, 0, ["lag 601 s is above 600 s"]),
        (10, 0, 100, ["the outbox is full (100 scores)"]),
        (
            None,
            700,
            100,
            [
                "Langfuse has not answered yet",
                "lag 700 s is above 600 s",
                "the outbox is full (100 scores)",
            ],
        ),
    ],
    ids=["ready", "never-answered", "langfuse-silent", "lagging", "outbox-full", "all-three"],
)
def test_ready_names_every_reason(
    answered_ago: float | None, lag: float, outbox: int, reasons: list[str]
) -> None:
    clock = Clock()
    probe = health(clock, lag, outbox)
    if answered_ago is not None:
        probe.langfuse_answered()
        clock.now += answered_ago
    ready, body = probe.ready()
    assert ready == (not reasons)
    assert body.get("reasons", []) == reasons
    assert body["status"] == ("ready" if not reasons else "not ready")


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_server_answers_the_three_paths_and_404() -> None:
    metrics = Metrics()
    clock = Clock()
    server = HttpServer("127.0.0.1", 0, metrics.registry, health(clock)).start()
    try:
        status, kind, body = get(server.url + "/metrics")
        assert status == 200 and kind.startswith("text/plain")
        assert 'observer_traces_total{outcome="scored"} 0.0' in body  # present at 0
        assert get(server.url + "/healthz")[0] == 200
        status, kind, body = get(server.url + "/readyz")
        assert status == 503 and kind == "application/json"
        assert json.loads(body)["reasons"] == ["Langfuse has not answered yet"]
        assert get(server.url + "/other")[0] == 404
    finally:
        server.stop()


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    from tests.daemon_helpers import demo_observations

    with FakeLangfuse() as server:
        server.add_observations(demo_observations())
        yield server


def wait_for(url: str, status: int, timeout_s: float = 120) -> tuple[int, str, str]:
    """`url`'s answer once it is `status`: a bound against a hang (a daemon's start takes
    seconds of imports on a busy machine), not a speed check."""
    deadline = time.monotonic() + timeout_s
    last: tuple[int, str, str] = (0, "", "")
    while time.monotonic() < deadline:
        try:
            last = get(url)
        except OSError:
            time.sleep(0.1)
            continue
        if last[0] == status:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered {status}; last {last}")


def test_the_daemon_serves_probes_and_quality_metrics(fake: FakeLangfuse, tmp_path: Path) -> None:
    port = free_port()
    env = daemon_env(fake)
    env.update(OBSERVER_HTTP_PORT=str(port), OBSERVER_HTTP__READY_LANGFUSE_WITHIN_S="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "observer", "run", "--state", str(tmp_path / "s.sqlite")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(base + "/healthz", 200)
        _, _, body = wait_for(base + "/readyz", 200)
        ready: dict[str, Any] = json.loads(body)
        assert ready["status"] == "ready" and ready["outbox"] >= 0
        _, _, metrics = get(base + "/metrics")
        assert 'observer_answers_scored_total{environment="production",query_type="howto"}' in (
            metrics
        )
        assert "observer_answer_confidence_ratio_bucket" in metrics
        fake.stop()  # Langfuse goes away: not ready, but alive
        _, _, body = wait_for(base + "/readyz", 503)
        assert any("Langfuse has not answered" in r for r in json.loads(body)["reasons"])
        assert get(base + "/healthz")[0] == 200
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]


def test_a_port_in_use_is_a_configuration_error(fake: FakeLangfuse, tmp_path: Path) -> None:
    holder = HttpServer("127.0.0.1", 0, Metrics().registry, health(Clock())).start()
    try:
        env = daemon_env(fake)
        env["OBSERVER_HTTP_PORT"] = str(holder.address[1])
        done = subprocess.run(
            [sys.executable, "-m", "observer", "run", "--state", str(tmp_path / "s.sqlite")],
            env=env,
            capture_output=True,
            timeout=120,  # against a hang: the refusal comes after the daemon's imports
        )
    finally:
        holder.stop()
    assert done.returncode == 2
    assert b"OBSERVER_HTTP_PORT" in done.stderr
