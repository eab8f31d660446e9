"""The `/metrics` text, byte for byte, after a fixed set of updates (a golden file).

Whatever serves `/metrics` (prometheus-client's handler today) must keep this
text: names, help, types, label order, series present at 0, bucket bounds.
Only what cannot be fixed is masked: the `_created` timestamps and the version.
To take a deliberate change, run with `UPDATE_GOLDEN=1` (conftest clears `OBSERVER_*`)
and review the diff.
"""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path

import pytest

from observer.health import Health
from observer.model import Band
from observer.telemetry.http import HttpServer
from observer.telemetry.metrics import Metrics
from observer.telemetry.otel import Telemetry

GOLDEN = Path(__file__).parent / "golden" / "metrics.txt"


def updated() -> Metrics:
    """One of each kind of update the daemon makes, with fixed values."""
    m = Metrics(max_query_types=2)
    m.set_watermark(1_000.0, clock=lambda: 1_042.5)
    for kind in ("howto", "billing", "legal"):  # the third is capped to `other`
        m.count_provenance("rag-query", "all", "confirmed", "recorded")
        env, query_type = m.quality_labels("production", kind)
        m.answers.labels(environment=env, query_type=query_type).inc()
        m.answers_by_band.labels(environment=env, query_type=query_type, band=Band.HIGH.value).inc()
        m.confidence.labels(environment=env, query_type=query_type).observe(0.83)
        m.coverage.labels(environment=env, query_type=query_type).observe(0.5)
    m.traces.labels(outcome="scored").inc(3)
    m.skips.labels(reason="no_root").inc()
    m.scores_enqueued.labels(name="observer_confidence").inc(3)
    m.scores_pushed.inc(3)
    m.outbox.set(2)
    m.request_budget.set(25)
    m.clock_skew.set(-0.25)
    m.trace_to_score.observe(42.0)
    m.pass_duration.observe(0.3)
    m.judge_tokens.labels(kind="prompt").inc(120)
    m.judge_cost.inc(0.015)
    m.notifiers_known(["ops"])
    m.alert_notifications.labels(notifier="ops", result="sent").inc()
    m.set_alerts_active("low_confidence", {("production", "howto", "page"): 1})
    m.set_alerts_active("ghosts", {("production", "billing", "ticket"): 2})
    m.set_alerts_active("ghosts", {})  # no longer firing: its series is gone
    m.set_incidents_open({"production": 1, "staging": 1})
    m.set_incidents_open({"production": 1})  # staging's ended: its series is gone
    m.trace_alerts.labels(rule="critical_claim_unsupported", result="notified").inc()
    return m


def masked(text: str) -> str:
    text = re.sub(r"^(\w+_created(?:\{[^}]*\})?) \S+$", r"\1 <created>", text, flags=re.M)
    return re.sub(r'version="[^"]*"', 'version="<version>"', text)


def scrape(metrics: Metrics) -> str:
    health = Health(
        stale_after_s=None,
        langfuse_within_s=None,
        max_lag_s=600,
        lag_s=lambda: 0.0,
        outbox=lambda: 0,
        max_outbox=100,
    )
    server = HttpServer("127.0.0.1", 0, metrics.registry, health).start()
    try:
        with urllib.request.urlopen(server.url + "/metrics", timeout=5) as response:
            return str(response.read().decode())
    finally:
        server.stop()


def test_the_metrics_text_is_the_golden_one() -> None:
    text = masked(scrape(updated()))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_with_the_sdk_disabled_metrics_are_served_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    telemetry = Telemetry()
    assert not telemetry.enabled
    assert masked(scrape(updated())) == GOLDEN.read_text()
