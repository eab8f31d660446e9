"""A strange trace is a counted skip, never a crash (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from observer.mapping import MappingRules, Skip, map_trace
from observer.model import RagRecord
from observer.signals import SignalParams, compute
from tests.budget import scaled

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
as_json_text = json_values.map(lambda v: __import__("json").dumps(v, allow_nan=True))
times = (
    st.sampled_from(
        [
            "2026-11-20T08:30:00.000Z",
            "2026-11-20T08:30:01.500Z",
            "not a time",
            "",
            "2026-13-45T99:99:99Z",
        ]
    )
    | st.none()
    | st.integers()
)
observation = st.fixed_dictionaries(
    {
        # An object or a list now and then: a malformed id is a named skip, never a crash.
        "id": st.one_of(
            *[st.text(max_size=8)] * 4, st.none(), st.sampled_from([{}, [], {"a": 1}, ["a"]])
        ),
        "traceId": st.just("t1"),
        "type": st.sampled_from(["GENERATION", "RETRIEVER", "SPAN", "AGENT", None, 7]),
        "startTime": times,
        "isRootObservation": st.booleans() | st.none(),
        "environment": st.sampled_from(["production", "langfuse-llm-as-a-judge", None]),
        "name": st.text(max_size=12) | st.none(),
        "input": json_values | as_json_text,
        "output": json_values | as_json_text,
        "metadata": json_values,
    }
)


# Five times the profile's examples: a trace that reaches the catch-all is a rare draw among
# nested JSON of every type, and each example is cheap.
@settings(scaled(5))
@given(st.lists(observation, max_size=6))
def test_any_trace_maps_to_a_record_or_a_skip(observations: list[dict[str, Any]]) -> None:
    result = map_trace("t1", observations, MappingRules())
    assert isinstance(result, RagRecord | Skip)
    # The catch-all is a last resort: reaching it means a bug in the mapping.
    assert not (isinstance(result, Skip) and result.reason == "mapping_error"), result
    if isinstance(result, RagRecord):
        # And whatever the mapping lets through, the signals take.
        signals = compute(result, SignalParams())
        assert 0.0 <= signals.confidence <= 1.0
