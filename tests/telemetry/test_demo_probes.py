"""`observer demo --serve`: the probes of a finished run that reads no Langfuse.

/readyz stays ready however long it serves (no "Langfuse has not answered"),
/healthz watches the serving loop, which beats while it serves. In process
with the probes' clock moved on by hours (the real HTTP server on loopback,
beats a few milliseconds apart), and through the command as a user runs it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from observer import app
from observer.config import load_settings
from tests.servers import free_port
from tests.telemetry.test_http import get, wait_for
from tests.waiting import wait_until


class Clock:
    """The probes' monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def probe(url: str) -> tuple[int, dict[str, Any]]:
    status, _, body = get(url)
    found: dict[str, Any] = json.loads(body)
    return status, found


def test_the_served_demo_stays_ready_and_beats_hours_later(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OBSERVER_HTTP_PORT", "0")
    settings = load_settings(None)
    outcome, parts = app.demo(settings, tmp_path / "scores.jsonl", tmp_path / "demo.sqlite")
    assert outcome.exit_code == app.EXIT_OK
    clock = Clock()
    parts.health.clock = clock
    seen: dict[str, Any] = {}

    def check(url: str) -> None:
        try:
            seen["ready_at_start"] = probe(url + "/readyz")
            clock.advance(3 * 3600)  # three hours of serving
            seen["ready_later"] = probe(url + "/readyz")
            deadline = time.monotonic() + 60  # against a hang, not a speed check
            while True:  # the next beat, a few milliseconds away
                status, live = probe(url + "/healthz")
                if live["heartbeat_age_s"] < 1 or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            seen["live_later"] = (status, live)
        finally:
            parts.stopping.set()

    def started(url: str) -> None:
        threading.Thread(target=check, args=(url,), daemon=True).start()

    try:
        app.serve_until_stopped(parts, started, beat_s=0.005)
    finally:
        parts.state.close()

    for key in ("ready_at_start", "ready_later"):
        status, ready = seen[key]
        assert status == 200, ready
        assert ready["status"] == "ready" and "reasons" not in ready
        assert ready["langfuse"].startswith("not used: the demo read its bundled traces")
        assert ready["outbox"] == 0
    status, live = seen["live_later"]
    assert status == 200 and live["status"] == "ok"
    assert live["heartbeat_age_s"] < 1  # beaten while serving, not 3 hours old
    assert live["heartbeat_of"] == "the demo's serving loop"


def test_the_served_demo_goes_stale_when_its_loop_stops_beating(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OBSERVER_HTTP_PORT", "0")
    _, parts = app.demo(load_settings(None), tmp_path / "scores.jsonl", tmp_path / "demo.sqlite")
    clock = Clock()
    parts.health.clock = clock
    stale_after_s = parts.health.stale_after_s
    assert stale_after_s is not None and stale_after_s >= 60
    seen: dict[str, Any] = {}

    def check(url: str) -> None:
        try:
            # Past three poll intervals (at least 60 s), with no beat to come (beat_s: an hour).
            clock.advance(stale_after_s + 1)
            seen["live"] = probe(url + "/healthz")
        finally:
            parts.stopping.set()

    try:
        app.serve_until_stopped(
            parts,
            lambda url: threading.Thread(target=check, args=(url,), daemon=True).start(),
            beat_s=3600,
        )
    finally:
        parts.state.close()
    status, live = seen["live"]
    assert status == 503 and live["status"] == "stale"
    assert live["reason"] == f"the demo's serving loop has not beaten for {stale_after_s + 1:.0f} s"


def test_demo_serve_as_a_user_runs_it(tmp_path: Path) -> None:
    """Langfuse's bound cut to 1 s (the 300 s of the issue, shortened): still ready after it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBSERVER_", "LANGFUSE_"))}
    env.update(OBSERVER_HTTP_PORT=str(port), OBSERVER_HTTP__READY_LANGFUSE_WITHIN_S="1")
    out, state = tmp_path / "scores.jsonl", tmp_path / "demo.sqlite"
    command = ["demo", "--serve", "--out", str(out), "--state", str(state)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "observer", *command],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(base + "/readyz", 200)
        # Asked all along until past the 1 s Langfuse bound (a busy machine only asks longer).
        first_ready = time.monotonic()
        answers: list[tuple[int, dict[str, Any]]] = []

        def ready_past_the_bound() -> bool:
            answers.append(probe(base + "/readyz"))
            return time.monotonic() - first_ready > 1.2

        wait_until(ready_past_the_bound, "1.2 s of /readyz answers")
        for status, ready in answers:
            assert status == 200, ready
            assert "reasons" not in ready
        status, live = probe(base + "/healthz")
        assert status == 200 and live["heartbeat_of"] == "the demo's serving loop"
        assert live["heartbeat_age_s"] <= 5.5
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert f"serving http://127.0.0.1:{port}/metrics" in stdout.decode()
