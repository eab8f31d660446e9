"""Every metric observer exports is documented, and documented ones exist."""

from __future__ import annotations

import dataclasses
import re

import pytest
from prometheus_client import generate_latest

from observer.fleet.metrics import FleetMetrics
from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import ROOT


def member() -> Metrics:
    """A fleet member's metrics: every family a daemon can export."""
    metrics = Metrics()
    assert metrics.part(FleetMetrics).reader is not None  # registered when a daemon joins a fleet
    return metrics


def exported() -> set[str]:
    names = set()
    for family in member().registry.collect():
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def test_the_operating_doc_lists_every_metric_and_no_other() -> None:
    text = (ROOT / "docs" / "operating.md").read_text()
    documented = set(re.findall(r"^\| `(observer_\w+)` \|", text, re.M))
    assert documented == exported()


def test_no_question_answer_or_trace_id_label() -> None:
    for family in member().registry.collect():
        for sample in family.samples:
            assert not {"question", "answer", "trace_id", "observation_id"} & set(sample.labels)


def test_a_single_daemon_exports_no_fleet_metric() -> None:
    assert not {name for name in exported_by(Metrics()) if name.startswith("observer_fleet_")}


def exported_by(metrics: Metrics) -> set[str]:
    return {family.name for family in metrics.registry.collect()}


def test_release_series_follow_the_most_recent_releases() -> None:
    """A new release always gets its own series; the least recently seen one's go."""
    from observer.model import RagRecord, Source
    from observer.signals import SignalParams, compute
    from observer.telemetry.metrics import MAX_RELEASES

    metrics = Metrics()
    record = RagRecord(
        trace_id="t",
        question="How much?",
        answer="It costs 5 euros [1].",
        sources=(Source(text="The plan costs 9 euros."),),
    )
    signals = compute(record, SignalParams())
    for i in range(MAX_RELEASES + 2):
        metrics.observe_answer(dataclasses.replace(record, release=f"r{i}", model="m"), signals)
    text = generate_latest(metrics.registry).decode()
    assert 'release="r0"' not in text and 'release="r1"' not in text
    newest = f'release="r{MAX_RELEASES + 1}"'
    assert (
        f'observer_answers_by_release_total{{environment="default",model="m",{newest}}} 1.0' in text
    )
    assert (
        'observer_answers_flagged_by_release_total{environment="default",flag="unsupported_numbers",'
        f'model="m",release="r{MAX_RELEASES + 1}"}} 1.0'
    ) in text


def enqueued_total(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value(
        "observer_scores_enqueued_total", {"name": "confidence"}
    )


def test_a_series_asked_for_again_is_the_same_and_a_removed_one_comes_back_at_zero() -> None:
    """labels() reads a series it holds without prometheus_client's checks: the same
    series, the same errors for wrong labels, a removed series made again from zero."""
    metrics = Metrics()
    enqueued = metrics.scores_enqueued
    enqueued.labels(name="confidence").inc()
    enqueued.labels("confidence").inc(2)
    assert enqueued_total(metrics) == 3
    for wrong in ({"nme": "confidence"}, {"name": "confidence", "other": "x"}):
        with pytest.raises(ValueError, match="Incorrect label names"):
            enqueued.labels(**wrong)
    with pytest.raises(ValueError, match="Incorrect label count"):
        enqueued.labels("confidence", "x")
    with pytest.raises(ValueError, match="No label names"):
        metrics.scores_pushed.labels("x")
    enqueued.remove("confidence")
    enqueued.labels(name="confidence").inc()
    assert enqueued_total(metrics) == 1
