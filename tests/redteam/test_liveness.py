"""A daemon whose every pass fails says so (issue 43, finding 6).

The lag read 0 until a first pass completed, so a daemon whose every pass
crashed was "ready" and `pipeline_lag_high` could not fire. Now the lag counts
from the first window's start, a failed pass records its lag sample and is
counted, and `/readyz` says "no pass has completed for N s".
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from observer import app
from observer.app.daemon import Daemon
from observer.health import Health
from tests.daemon_helpers import configure
from tests.fakes.langfuse_server import OBSERVATIONS_PATH, FakeLangfuse


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse.kind() as server:
        yield server


def test_failing_passes_show_a_growing_lag_a_count_and_a_lag_sample(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.fail_next(500, count=1000, path_prefix=OBSERVATIONS_PATH)
    settings = configure(
        monkeypatch, fake, OBSERVER_SOURCE__LOOKBACK_S="3600", OBSERVER_SOURCE__MAX_ATTEMPTS="1"
    )
    parts = app.build(settings, mode="solo", state_path=tmp_path / "s.sqlite")
    try:
        now = datetime.now(UTC)
        Daemon(parts, clock=lambda: now).tick()
        Daemon(parts, clock=lambda: now).tick()
        assert parts.state.watermark() is None  # no pass completed
        assert parts.metrics.value("observer_watermark_lag_seconds") >= 3600
        assert parts.metrics.value("observer_passes_failed_total", kind="unreachable") == 2
        assert parts.metrics.value("observer_last_pass_timestamp_seconds") == 0
        lags = [
            row.values["lag_s"]
            for row in parts.state.history.rows(now.timestamp() - 1, now.timestamp() + 1)
            if "lag_s" in row.values
        ]
        assert lags and min(lags) >= 3600  # what pipeline_lag_high reads
    finally:
        parts.close()


def test_readiness_says_how_long_no_pass_has_completed() -> None:
    clock = [100.0]
    health = Health(
        stale_after_s=60,
        langfuse_within_s=300,
        max_lag_s=600,
        lag_s=lambda: 0.0,
        outbox=lambda: 0,
        max_outbox=10,
        clock=lambda: clock[0],
        pass_within_s=90,
    )
    health.langfuse_answered()  # pages come back: only the passes fail
    clock[0] += 60
    assert health.ready()[0]
    clock[0] += 60
    ready, body = health.ready()
    assert not ready and "no pass has completed for 120 s" in body["reasons"]
    health.pass_completed()
    health.langfuse_answered()
    assert health.ready()[0]
