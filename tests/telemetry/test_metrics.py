"""Every metric observer exports is documented, and documented ones exist."""

from __future__ import annotations

import re

from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import ROOT


def member() -> Metrics:
    """A fleet member's metrics: every family a daemon can export."""
    metrics = Metrics()
    assert metrics.fleet.reader is not None  # registered when a daemon joins a fleet
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
