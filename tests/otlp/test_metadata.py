"""A span's metadata as the v2 read returns it (observer.otlp.spans): the part every span
of a resource and scope shares is read once (`origin`), and gives what the rule stated
plainly gives: ``{attributes, resourceAttributes, scope, ...observation metadata, ...trace
metadata}`` flattened to dotted paths, the first write of a path winning, each value
JSON-decoded when it parses."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from observer.otlp import values
from observer.otlp.inout import extract_io, filtered_attributes
from observer.otlp.spans import (
    _domain_metadata,
    _flatten,
    _normalize_tools,
    _read_metadata,
    _stringify_io,
    origin,
    span_observation,
)
from observer.otlp.values import attributes_of, parse_json_prioritised

# Keys that collide with the shared part, its paths, or the tool rule, and plain ones.
KEYS = ["scope", "resourceAttributes", "attributes", "scope.name", "tools", "team", "0", "a.b"]
TOOL = json.dumps([{"type": "function", "function": {"name": "lookup"}}])
VALUES = st.one_of(
    st.sampled_from(["x", "", "[1,2]", '{"k":"v"}', "12", "1.5", "true", "null", " [3]",
                     "NaN", "-Infinity", "9007199254740993", TOOL, "\ufeff[1]", "1.45.2"]),
    st.integers(-3, 3),
    st.booleans(),
)  # fmt: skip


def any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": value}


def pairs(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": any_value(v)} for k, v in values.items()]


def plainly(span: dict[str, Any], resource: dict[str, Any], scope: dict[str, Any]) -> Any:
    """The rule, stated as the server states it, once per span."""
    attributes = attributes_of(span["attributes"])
    value_in, _ = extract_io([], attributes, scope.get("name", ""))
    scope_object = {k: v for k, v in scope.items() if k != "attributes" and v}
    metadata = {
        **(
            {}
            if str(scope.get("name", "")).startswith("langfuse-sdk")
            else {"attributes": filtered_attributes(attributes)}
        ),
        "resourceAttributes": resource,
        "scope": {**scope_object, "attributes": attributes_of(scope.get("attributes"))},
        **_domain_metadata(attributes, "observation"),
        **_domain_metadata(attributes, "trace"),
    }
    value_in, metadata = _normalize_tools(value_in, metadata)
    return _read_metadata(_flatten(metadata)), value_in


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=4),  # observation metadata
    st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=3),  # trace metadata
    st.dictionaries(st.sampled_from(["service.name", "tools", "scope", "n"]), VALUES, max_size=3),
    st.sampled_from(["langfuse-sdk", "openinference.instrumentation", ""]),
    st.sampled_from([{}, {"ai.prompt.tools": TOOL}, {"input.value": "q", "x": 1}]),
)
def test_a_spans_metadata_is_what_the_rule_gives_whatever_keys_collide(
    observation: dict[str, Any],
    trace: dict[str, Any],
    resource_values: dict[str, Any],
    scope_name: str,
    other: dict[str, Any],
) -> None:
    attributes = {
        **{f"langfuse.observation.metadata.{k}": v for k, v in observation.items()},
        **{f"langfuse.trace.metadata.{k}": v for k, v in trace.items()},
        **other,
    }
    span = {"traceId": "t" * 32, "spanId": "s" * 16, "name": "n", "attributes": pairs(attributes)}
    resource = attributes_of(pairs(resource_values))
    scope = {"name": scope_name, "version": "1.0", "attributes": pairs({"public_key": "pk"})}
    where = origin(resource, scope)
    metadata, value_in = plainly(span, resource, scope)
    for _ in range(2):  # the second span of the same origin reads the same
        got = span_observation(span, where, None)
        assert list(got["metadata"].items()) == list(metadata.items())
        assert got["input"] == _stringify_io(value_in)  # tool definitions moved in
        got["metadata"].clear()  # one span's metadata is its own: the next is unchanged


@given(st.text(max_size=12) | st.sampled_from([" 1", "\t[]", "\n{}", "tru", "-", "nul", "1e5"]))
def test_text_that_cannot_be_json_is_returned_as_text_as_a_parse_would(text: str) -> None:
    """The quick refusal of what does not start like JSON changes no result."""
    try:
        expected: Any = json.loads(
            text,
            parse_constant=values._reject_constant,
            parse_int=values._parse_int,
            parse_float=values._parse_float,
        )
    except ValueError:
        expected = text
    assert parse_json_prioritised(text) == expected
