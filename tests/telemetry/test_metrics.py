"""Every metric observer exports is documented, and documented ones exist."""

from __future__ import annotations

import re

from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import ROOT


def exported() -> set[str]:
    names = set()
    for family in Metrics().registry.collect():
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def test_the_operating_doc_lists_every_metric_and_no_other() -> None:
    text = (ROOT / "docs" / "operating.md").read_text()
    documented = set(re.findall(r"^\| `(observer_\w+)` \|", text, re.M))
    assert documented == exported()


def test_no_question_answer_or_trace_id_label() -> None:
    for family in Metrics().registry.collect():
        for sample in family.samples:
            assert not {"question", "answer", "trace_id", "observation_id"} & set(sample.labels)
