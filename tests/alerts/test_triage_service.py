"""Triage in the daemon's notifications, through a real Alertmanager notifier over HTTP: a
firing page carries it; the `layer` label stays the same from firing to resolved
(Alertmanager knows an alert by its labels)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from observer.alerts.delivery import Delivery
from observer.alerts.notifiers.alertmanager import AlertmanagerNotifier
from observer.alerts.service import AlertService
from observer.background import Deadline
from observer.state import State
from observer.telemetry.metrics import Metrics
from tests.alerts.test_triage import PROD, T, grounding_rule, planted, row
from tests.fakes.receiver import Receiver


def moment(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


def test_a_page_carries_its_triage_and_its_resolve_the_same_layer_label(
    tmp_path: Path, receiver: Receiver
) -> None:
    state = State(tmp_path / "state.sqlite")
    metrics = Metrics()
    delivery = Delivery(
        {"am": AlertmanagerNotifier("am", receiver.url)},
        metrics,
        state.alerts,
        base_s=0.01,
        max_backoff_s=0.02,
    )
    rule = grounding_rule(warn_threshold=None)  # page, then resolved: one label set
    service = AlertService(
        state,
        metrics,
        (rule,),
        (),
        notifier_kinds={"am": "alertmanager"},
        delivery=delivery,
        base_url="https://langfuse.example.com",
    )
    try:
        state.history.put_many(planted())
        state.set_watermark(moment(T))
        service.evaluate(moment(T))
        (request,) = receiver.wait_for(1)
        (fired,) = request.json()
        labels: dict[str, Any] = fired["labels"]
        assert labels["layer"] == "generation"
        annotations = fired["annotations"]
        assert annotations["segment"] == "query_type=pricing"
        assert "query_type=pricing" in annotations["summary"]
        onset = datetime.fromisoformat(annotations["onset"].replace("Z", "+00:00"))
        assert abs(onset.timestamp() - (T - 3000)) < 180
        assert "Layer: generation" in annotations["what_changed"]
        assert state.alerts.load()[rule.name][PROD].layer == "generation"

        # The fix ships: an hour of good answers resolves it, under the same labels.
        good = [
            row(900_000 + i, T + 3 * i, {"numeric_grounding": 1.0, "crag_grade": "HIGH"}, "x")
            for i in range(1, 1200)
        ]
        state.history.put_many(good)
        state.set_watermark(moment(T + 3600))
        service.evaluate(moment(T + 3600))
        _, second = receiver.wait_for(2)
        (ended,) = second.json()
        assert datetime.fromisoformat(ended["endsAt"].replace("Z", "+00:00")) <= moment(T + 3600)
        assert ended["labels"] == labels
        assert "what_changed" not in ended["annotations"]
        assert state.alerts.load()[rule.name][PROD].layer is None
    finally:
        delivery.shutdown(Deadline.within(5))
        state.close()
