"""The receiver's protobuf decode: the same OTLP/JSON form as protobuf's own JSON mapping.

`wire.otlp_json` walks a decoded export by its set fields instead of
`json_format.MessageToDict`'s reflection; these hold the two equal (ids in hex, as OTLP/JSON
writes them) on every captured app's spans and on exports built to reach every kind of
value: each AnyValue, nested arrays and key-value lists, empty messages, 64-bit integers,
non-finite doubles, enums the schema does not name, links and events.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from observer.otlp import wire
from tests.instrumentations.test_instrumentations import APPS, FIXTURES
from tests.otlp.harness import protobuf_export

ID_KEYS = ("traceId", "spanId", "parentSpanId")


def reference(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """protobuf's own JSON mapping, the span and link ids turned from base64 to hex."""
    body: dict[str, Any] = json_format.MessageToDict(request)
    for resource_spans in body.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for holder in [span, *span.get("links", [])]:
                    for key in ID_KEYS:
                        if key in holder:
                            holder[key] = base64.b64decode(holder[key]).hex()
    return body


@pytest.mark.parametrize("app", APPS)
def test_every_captured_apps_export_decodes_to_protobufs_own_json_form(app: str) -> None:
    otlp = json.loads((FIXTURES / f"{app}.otlp.json").read_text())
    request = ExportTraceServiceRequest()
    request.ParseFromString(protobuf_export(otlp))
    decoded = wire.decode(request.SerializeToString(), wire.PROTOBUF, None, 1 << 30)
    assert decoded.body == reference(request)


def any_values(depth: int = 2) -> st.SearchStrategy[AnyValue]:
    scalars = st.one_of(
        st.text().map(lambda v: AnyValue(string_value=v)),
        st.booleans().map(lambda v: AnyValue(bool_value=v)),
        st.integers(-(2**63), 2**63 - 1).map(lambda v: AnyValue(int_value=v)),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda v: AnyValue(double_value=v)),
        st.binary(max_size=8).map(lambda v: AnyValue(bytes_value=v)),
        st.just(AnyValue()),
    )
    if depth == 0:
        return scalars
    inner = any_values(depth - 1)
    arrays = st.lists(inner, max_size=3).map(_array)
    kvlists = st.lists(st.tuples(st.text(max_size=5), inner), max_size=3).map(_kvlist)
    return st.one_of(scalars, arrays, kvlists)


def _array(values: list[AnyValue]) -> AnyValue:
    value = AnyValue()
    value.array_value.values.extend(values)
    return value


def _kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
    value = AnyValue()
    value.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in pairs)
    return value


ids = st.binary(min_size=8, max_size=8)


@st.composite
def spans(draw: st.DrawFn) -> Span:
    span = Span(
        trace_id=draw(st.binary(min_size=16, max_size=16)),
        span_id=draw(ids),
        parent_span_id=draw(st.one_of(st.just(b""), ids)),
        name=draw(st.text(max_size=10)),
        kind=draw(st.integers(0, 7)),  # 6 and 7: kinds the schema does not name
        start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
        end_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
        flags=draw(st.integers(0, 2**32 - 1)),
    )
    for key, value in draw(st.lists(st.tuples(st.text(max_size=5), any_values()), max_size=4)):
        span.attributes.add(key=key, value=value)
    for name in draw(st.lists(st.text(max_size=5), max_size=2)):
        span.events.add(name=name, time_unix_nano=draw(st.integers(0, 2**64 - 1)))
    for _ in range(draw(st.integers(0, 2))):
        span.links.add(trace_id=draw(st.binary(min_size=16, max_size=16)), span_id=draw(ids))
    if draw(st.booleans()):
        span.status.code = draw(st.integers(0, 3))
        span.status.message = draw(st.text(max_size=5))
    return span


@given(st.lists(spans(), max_size=3), st.text(max_size=5), st.booleans())
def test_any_export_decodes_to_protobufs_own_json_form(
    made: list[Span], scope: str, empty_resource: bool
) -> None:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    if empty_resource:
        resource_spans.resource.SetInParent()  # set but empty: {} in the JSON form
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = scope
    scope_spans.spans.extend(made)
    assert wire.otlp_json(request) == reference(request)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (AnyValue(double_value=float("nan")), {"doubleValue": "NaN"}),
        (AnyValue(double_value=float("inf")), {"doubleValue": "Infinity"}),
        (AnyValue(double_value=float("-inf")), {"doubleValue": "-Infinity"}),
        (AnyValue(double_value=0.5), {"doubleValue": 0.5}),
        (AnyValue(int_value=-(2**63)), {"intValue": str(-(2**63))}),
        (AnyValue(bytes_value=b"\x00\xff"), {"bytesValue": "AP8="}),  # base64: not an id
        (AnyValue(), {}),
    ],
)
def test_values_protobufs_json_mapping_writes_as_strings_stay_strings(
    value: AnyValue, expected: dict[str, Any]
) -> None:
    assert wire.otlp_json(value) == expected == json_format.MessageToDict(value)


def test_ids_are_hex_and_a_kind_the_schema_does_not_name_stays_a_number() -> None:
    span = Span(trace_id=bytes(range(16)), span_id=b"\x01" * 8, kind=9)
    span.links.add(trace_id=b"\x02" * 16, span_id=b"\x03" * 8)
    assert wire.otlp_json(span) == {
        "traceId": bytes(range(16)).hex(),
        "spanId": "01" * 8,
        "kind": 9,
        "links": [{"traceId": "02" * 16, "spanId": "03" * 8}],
    }
