"""Alerts once per fleet, in-process members on a real redis-server: a window rule over
the rows both members scored fires once, on the evaluator; when the lease (and with it
the evaluation) moves to the other member, the firing alert is neither paged again nor
forgotten; a trace rule notifies a trace once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from observer.background import Deadline
from observer.config import FleetSettings, load_settings
from tests.alerts.test_daemon_alerts import RULE
from tests.daemon_helpers import configure, packed_traces
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.receiver import Receiver
from tests.fleet.helpers import drain, members
from tests.servers import RedisServer


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


def _bodies(receiver: Receiver, kind: str) -> list[dict[str, Any]]:
    return [r.json() for r in receiver.requests if r.json()["kind"] == kind]


def test_a_window_alert_fires_once_for_the_fleet_across_a_change_of_evaluator(
    monkeypatch: pytest.MonkeyPatch,
    redis_proc: RedisServer,
    rclient: redis.Redis,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    with FakeLangfuse.service_like(seed=3, ingestion_jitter_s=0.0) as fake:
        fake.add_observations(packed_traces(datetime.now(UTC) - timedelta(minutes=10), 5.0))
        config = tmp_path / "observer.toml"
        config.write_text(RULE.format(kind="webhook", url=receiver.url))
        monkeypatch.setenv("OBSERVER_CONFIG", str(config))
        monkeypatch.setenv("FLEET_REDIS", redis_proc.url)
        configure(monkeypatch, fake, OBSERVER_SOURCE__LOOKBACK_S="3600")
        settings = load_settings().model_copy(
            update={"fleet": FleetSettings(secret_env="FLEET_REDIS", name="al")}
        )
        with members(settings, tmp_path, ["m1", "m2"]) as (m1, m2):
            for m in (m1, m2):  # each member's evaluator, as built for it, driven here
                m.parts.evaluator.open()
            m1.keep()
            m2.keep()
            assert m1.evaluation.evaluating and not m2.evaluation.evaluating
            m1.read_once()
            drain([m1, m2])
            for m in (m1, m2):
                assert m.parts.metrics.value("observer_fleet_entries_total", event="acknowledged")
            m1.read_once()  # everything acknowledged: the watermark moves up
            for m in (m1, m2):
                m.alerts.sync(m.stream.watermark())
            assert m1.parts.state.history.count() == m2.parts.state.history.count() > 50
            m2.parts.evaluator.notify(datetime.now(UTC))
            m2.parts.evaluator.tick()  # not the evaluator: nothing evaluated
            assert m2.parts.evaluator.last is None
            m1.parts.evaluator.tick()
            assert m1.parts.evaluator.last is not None
            # Trace rules page too, as the rows arrive: wait for the window rule's page.
            receiver.wait_for(1, timeout_s=10, where=lambda r: r.json()["kind"] == "window")
            window = _bodies(receiver, "window")
            assert [(b["rule"], b["state"]) for b in window] == [("ungrounded_rate_high", "firing")]
            # The lease (and the evaluation) moves to m2: it takes the firing alert over.
            rclient.delete(m1.keys.lease)
            m2.keep()
            assert m2.evaluation.evaluating
            m2.read_once()
            m2.alerts.sync(m2.stream.watermark())
            m2.parts.evaluator.tick()
            assert m2.parts.evaluator.last is not None
            firing = m2.parts.state.alerts.load()["ungrounded_rate_high"]
            assert [s.status for s in firing.values()] == ["firing"]
            assert _bodies(receiver, "window") == window  # not paged again
            # A trace rule: each trace notified once, whichever member scored it.
            traces = Counter(u for b in _bodies(receiver, "trace") for u in b["trace_urls"])
            assert traces and max(traces.values()) == 1
            for m in (m1, m2):
                m.parts.evaluator.shutdown(Deadline.within(1.0))
                m.parts.alerts.shutdown(Deadline.within(2.0))
