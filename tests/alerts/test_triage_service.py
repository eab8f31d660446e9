"""Triage in the daemon's notifications, through a real Alertmanager notifier over HTTP: a
firing page carries it; the `layer` label stays the same from firing to resolved
(Alertmanager knows an alert by its labels)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from observer.alerts.delivery import Delivery
from observer.alerts.families.release import release_findings
from observer.alerts.notifiers.alertmanager import AlertmanagerNotifier
from observer.alerts.regression import compare, default_regression_rules
from observer.alerts.rules import Route
from observer.alerts.service import AlertService, Options, RuleSet
from observer.background import Deadline
from observer.config import AlertsSettings
from observer.state import State
from observer.state.rows import Row
from observer.telemetry.metrics import Metrics
from tests.alerts.test_triage import PROD, T, grounding_rule, planted, release_scenario, row
from tests.fakes.receiver import Receiver


def a_good_hour() -> list[Row]:
    """The fix shipped: an hour of answers after T whose numbers are all in their chunks."""
    values = {"numeric_grounding": 1.0, "crag_grade": "HIGH"}
    return [row(900_000 + i, T + 3 * i, values, "x") for i in range(1, 1200)]


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
        RuleSet((rule,), ()),
        delivery=delivery,
        notifiers={"am": "alertmanager"},
        options=Options(base_url="https://langfuse.example.com"),
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
        state.history.put_many(a_good_hour())
        state.set_watermark(moment(T + 3600))
        service.evaluate(moment(T + 3600))
        _, second = receiver.wait_for(2)
        (ended,) = second.json()
        assert datetime.fromisoformat(ended["endsAt"].replace("Z", "+00:00")) <= moment(T + 3600)
        assert ended["labels"] == labels
        # The resolve names the layer the page named, and tells no triage.
        assert ended["annotations"]["what_changed"].startswith("Layer: generation: ")
        assert state.alerts.load()[rule.name][PROD].layer is None
    finally:
        delivery.shutdown(Deadline.within(5))
        state.close()


def test_a_route_sends_the_layer_it_names_to_its_own_notifiers(tmp_path: Path) -> None:
    state = State(tmp_path / "state.sqlite")
    metrics = Metrics()
    with Receiver() as oncall, Receiver() as eval_team, Receiver() as search_team:
        notifiers = {
            "oncall": AlertmanagerNotifier("oncall", oncall.url),
            "models": AlertmanagerNotifier("models", eval_team.url),
            "search": AlertmanagerNotifier("search", search_team.url),
        }
        delivery = Delivery(notifiers, metrics, state.alerts, base_s=0.01, max_backoff_s=0.02)
        rule = dataclasses.replace(grounding_rule(warn_threshold=None), notify=("oncall",))
        routes = (Route("retrieval", ("search",)), Route("generation", ("models",)))
        service = AlertService(
            state,
            metrics,
            RuleSet((rule,), (), routes=routes),
            delivery=delivery,
            notifiers={name: "alertmanager" for name in notifiers},
            options=Options(base_url="https://langfuse.example.com"),
        )
        try:
            state.history.put_many(planted())
            state.set_watermark(moment(T))
            service.evaluate(moment(T))
            (request,) = eval_team.wait_for(1)
            assert request.json()[0]["labels"]["layer"] == "generation"
            state.history.put_many(a_good_hour())
            state.set_watermark(moment(T + 3600))
            service.evaluate(moment(T + 3600))
            _, resolve = eval_team.wait_for(2)  # the resolve follows the page
            assert resolve.json()[0]["labels"]["layer"] == "generation"
            assert oncall.requests == [] and search_team.requests == []
        finally:
            delivery.shutdown(Deadline.within(5))
            state.close()


@pytest.mark.parametrize(
    ("route", "error"),
    [
        ({"layer": "generation", "notify": ["nobody"]}, "alerts.routes[0].notify: no notifier"),
        ({"layer": "vibes", "notify": ["hook"]}, "layer"),
        (
            {"layer": "retrieval", "notify": ["hook"], "rules": ["nope"]},
            "alerts.routes[0].rules: no window rule named 'nope'",
        ),
    ],
)
def test_a_route_that_cannot_work_is_refused_at_start(route: dict[str, Any], error: str) -> None:
    hook = {"name": "hook", "kind": "webhook", "url": "http://127.0.0.1:9/x"}
    with pytest.raises(ValueError, match=re.escape(error)):
        AlertsSettings(notifiers=[hook], routes=[route])  # type: ignore[list-item]


def test_sqlite_computes_the_release_comparison_the_rows_give(tmp_path: Path) -> None:
    """The daemon asks SQLite for the statistics; `compare` works them out of rows: the same
    findings, values and example traces, through the writer's connection and a reader's."""
    state = State(tmp_path / "state.sqlite")
    rows = release_scenario()
    state.history.put_many(rows)
    (rule,) = default_regression_rules()
    expected = compare(rule, rows, T)
    assert expected  # the scenario has a regression to find
    reader = state.history.reader()
    try:
        for history in (state.history, reader):
            found = release_findings(rule, history, T)
            assert [f.group for f in found] == [f.group for f in expected]
            for mine, theirs in zip(found, expected, strict=True):
                assert mine.value == pytest.approx(theirs.value)
                assert mine.before_value == pytest.approx(theirs.before_value)
                assert (mine.samples, mine.before_samples) == (
                    theirs.samples,
                    theirs.before_samples,
                )
                assert mine.z == pytest.approx(theirs.z)
                assert [e.trace_id for e in mine.examples] == [e.trace_id for e in theirs.examples]
    finally:
        reader.close()
        state.close()
