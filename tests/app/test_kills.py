"""SIGKILL at random points, while Langfuse refuses a share of score posts: nothing lost,
nothing doubled. The final score set equals a clean run's."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app.test_shutdown import daemon_env
from tests.daemon_helpers import ROOT, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse

KILLS = 20
SCORES_PATH = "/api/public/scores"


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        server.add_observations(demo_observations())
        yield server


def final_scores(fake: FakeLangfuse) -> dict[str, tuple[Any, ...]]:
    return {
        s["id"]: (s["traceId"], s["name"], s["value"], s.get("comment"), s["timestamp"])
        for s in fake.scores
    }


def run(env: dict[str, str], state: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "observer", "run", *extra, "--state", str(state)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def clean_run(tmp_path: Path) -> dict[str, tuple[Any, ...]]:
    with FakeLangfuse() as clean:
        clean.add_observations(demo_observations())
        proc = run(daemon_env(clean), tmp_path / "clean.sqlite", "--once")
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]
        return final_scores(clean)


def test_killed_again_and_again_then_one_full_run_equals_a_clean_run(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    rng = random.Random(20261201)
    env = daemon_env(fake)
    env["OBSERVER_SINK__BATCH_SIZE"] = "20"  # many posts: kills land between them
    state = tmp_path / "killed.sqlite"
    fake.latency_s = 0.01
    for round_ in range(KILLS):
        # About one score post in five fails while it runs.
        fake.clear_failures()
        fake.fail_next(500, count=rng.randint(1, 4), path_prefix=SCORES_PATH)
        daemon = round_ % 4 == 3  # every fourth: the daemon itself, not --once
        proc = run(env, state, *(() if daemon else ("--once",)))
        time.sleep(rng.uniform(0.3, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    fake.clear_failures()
    fake.latency_s = 0.0
    last = run(env, state, "--once")
    _, err = last.communicate(timeout=120)
    assert last.returncode == 0, err.decode()[-2000:]

    got = final_scores(fake)
    expected = clean_run(tmp_path)
    assert got == expected
    assert fake.duplicates() == []
    traces = {o["traceId"] for o in demo_observations()}
    assert {v[0] for v in got.values()} == {v[0] for v in expected.values()} <= traces
