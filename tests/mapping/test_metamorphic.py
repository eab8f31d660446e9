"""Metamorphic tests over every captured trace (docs/trace-convention.md#checked-by-content,
docs/signals.md#unknown-is-not-zero).

Each transformation of `metamorphic.py` is something real libraries do to the same answer.
Applied to every answer trace captured from the real instrumentation libraries
(tests/instrumentations/fixtures), the record observer scores must stay what it was: the
same question, answer, generation and posted score values; or, where the transformation
loses the retrieval scores, the same values less the score signals; or a skip with a
reason. Never a different posted value. A hypothesis property composes the
transformations at random.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from observer.mapping import MappingRules, Skip, read_trace
from observer.model import RagRecord
from observer.scores import score_events
from observer.signals import SignalParams, compute
from tests.budget import scaled
from tests.instrumentations.test_instrumentations import EXPECTED, trace
from tests.mapping.metamorphic import LOSSY, TRANSFORMS, Trace

PARAMS = SignalParams()
CASES = [
    (app, expected["trace_id"])
    for app in EXPECTED["apps"]
    for expected in EXPECTED["apps"][app]["traces"]
]
SCORE_SIGNALS = LOSSY["drop_scores"]


def posted(observations: Trace) -> tuple[RagRecord, dict[str, Any]] | Skip:
    result = read_trace(observations[0]["traceId"], observations, MappingRules()).result
    if isinstance(result, Skip):
        return result
    events = score_events(result, compute(result, PARAMS), PARAMS)
    return result, {e.name: e.value for e in events}


@cache
def original(app: str, trace_id: str) -> tuple[RagRecord, dict[str, Any]]:
    found = posted(trace(app, trace_id))
    assert not isinstance(found, Skip), found
    return found


def assert_same_or_less(app: str, trace_id: str, variant: Trace, lossy: frozenset[str]) -> None:
    record, values = original(app, trace_id)
    found = posted(variant)
    if isinstance(found, Skip):
        assert found.reason and found.detail, found  # a skip says why
        return
    got, got_values = found
    assert (got.question, got.answer, got.observation_id) == (
        record.question,
        record.answer,
        record.observation_id,
    )
    assert [s.text for s in got.sources] == [s.text for s in record.sources]
    for name, value in got_values.items():
        assert values.get(name) == value, (name, value, values.get(name))
    missing = set(values) - set(got_values)
    assert missing <= lossy, missing


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
@pytest.mark.parametrize(("app", "trace_id"), CASES, ids=[f"{a}-{t[:6]}" for a, t in CASES])
def test_a_transformation_keeps_the_record(app: str, trace_id: str, name: str) -> None:
    variant = TRANSFORMS[name](trace(app, trace_id))
    assert_same_or_less(app, trace_id, variant, LOSSY.get(name, frozenset()))


@pytest.mark.parametrize(("app", "trace_id"), CASES, ids=[f"{a}-{t[:6]}" for a, t in CASES])
def test_the_lossless_transformations_keep_the_trace_scored(app: str, trace_id: str) -> None:
    """Not a skip either: observer finds the same documents in each new place. Dropping the
    root's output is lossless only where the answer was not read from it alone."""
    read = read_trace(trace_id, trace(app, trace_id), MappingRules())
    assert read.provenance is not None
    from_root = (
        read.provenance.answer_check == "root" or "the root's output" in read.provenance.answer
    )
    lossy = set(LOSSY) | ({"drop_root_output"} if from_root else set())
    for name in sorted(set(TRANSFORMS) - lossy):
        found = posted(TRANSFORMS[name](trace(app, trace_id)))
        assert not isinstance(found, Skip), (name, found)


def test_dropping_the_scores_leaves_the_score_signals_unknown() -> None:
    for app, trace_id in CASES:
        found = posted(TRANSFORMS["drop_scores"](trace(app, trace_id)))
        assert not isinstance(found, Skip), (app, found)
        record, values = found
        assert not record.retrieval_scores()
        assert not SCORE_SIGNALS & set(values), app


@settings(scaled(1))
@given(
    case=st.sampled_from(CASES),
    names=st.lists(st.sampled_from(sorted(TRANSFORMS)), min_size=2, max_size=4, unique=True),
)
def test_transformations_composed_never_change_a_posted_value(
    case: tuple[str, str], names: list[str]
) -> None:
    app, trace_id = case
    variant = trace(app, trace_id)
    for name in names:
        variant = TRANSFORMS[name](variant)
    lossy = frozenset().union(*(LOSSY.get(name, frozenset()) for name in names))
    assert_same_or_less(app, trace_id, variant, lossy)
