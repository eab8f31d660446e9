"""An OTLP/HTTP trace export body -> the OTLP/JSON form the converter reads.

What the OTLP/HTTP specification allows (opentelemetry-proto's ``otlp.md``, "OTLP/HTTP"):
``application/x-protobuf`` (the binary ``ExportTraceServiceRequest``) or
``application/json`` (its JSON mapping, with trace and span ids as hex strings, not
protobuf's base64), either one ``gzip``-compressed (``Content-Encoding: gzip``).

Both go through ``opentelemetry-proto``'s ``ExportTraceServiceRequest`` and come out as one
form, ``google.protobuf.json_format.MessageToDict``'s (camelCase keys, int64 values as
decimal strings, enums by name, default values left out) with the ids in hex: the form
the Langfuse server reads after its own protobuf decode (``toObject(..., {longs:
String})``), and the form the converter (observer.otlp.spans) and the captured fixtures
use. A JSON body is parsed into the message too, so a body either encoding carries gives
the same observations, and a JSON body the protobuf schema refuses is refused.

Like the Langfuse endpoint (``validateOtelSpanIds``), a batch holding a span without a
usable trace id (16 bytes, not all zero) or span id (8 bytes), or with a parent id of the
wrong size, is refused whole: such spans cannot be stored, and a 400 tells the sender not
to retry. A body inflates to at most ``max_bytes``; past that it is refused as too large
(413), never inflated in full (a gzip bomb costs nothing).
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.descriptor import FieldDescriptor  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from google.rpc import status_pb2  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_ID_KEYS = ("traceId", "spanId", "parentSpanId")
_ID_SIZES = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


class BadBody(ValueError):
    """The body is not a trace export observer can read (400: not retried)."""


class BodyTooLarge(BadBody):
    """The body, inflated, is larger than the receiver takes (413)."""


class UnsupportedMedia(BadBody):
    """Neither protobuf nor JSON (415)."""


@dataclass(frozen=True, slots=True)
class Decoded:
    """An export's spans in OTLP/JSON form: ``{"resourceSpans": [...]}``, each span sized."""

    body: dict[str, Any]
    spans: int
    sizes: dict[tuple[str, str], int]
    """(trace id, span id) -> the span's size in protobuf bytes (what assembly counts)."""


def media_type(content_type: str | None) -> str:
    """``application/x-protobuf`` or ``application/json`` (parameters ignored), else
    UnsupportedMedia naming both."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind in (PROTOBUF, JSON):
        return kind
    raise UnsupportedMedia(
        f"Content-Type {content_type or '(none)'!r}: send {PROTOBUF} or {JSON} (OTLP/HTTP)"
    )


def inflate(body: bytes, encoding: str | None, max_bytes: int) -> bytes:
    """The body, gunzipped when ``Content-Encoding: gzip``; at most `max_bytes`."""
    coding = (encoding or "identity").strip().lower()
    if coding in ("", "identity"):
        if len(body) > max_bytes:
            raise BodyTooLarge(f"body of {len(body)} bytes; the receiver takes {max_bytes}")
        return body
    if coding != "gzip":
        raise UnsupportedMedia(f"Content-Encoding {encoding!r}: send gzip or none")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as error:
        raise BadBody(f"gzip body does not inflate: {error}") from None
    if len(out) > max_bytes:
        raise BodyTooLarge(f"body inflates past the {max_bytes} bytes the receiver takes")
    if not inflater.eof:
        raise BadBody("gzip body is cut short")
    return out


def decode(body: bytes, content_type: str | None, encoding: str | None, max_bytes: int) -> Decoded:
    """One ``POST /v1/traces`` body as OTLP/JSON; BadBody (or a subclass) says why not."""
    kind = media_type(content_type)
    data = inflate(body, encoding, max_bytes)
    request = ExportTraceServiceRequest()
    try:
        if kind == PROTOBUF:
            request.ParseFromString(data)
        else:
            json_format.ParseDict(_base64_ids(_json(data)), request, ignore_unknown_fields=True)
    except (DecodeError, json_format.ParseError) as error:
        raise BadBody(f"not an OTLP trace export ({kind}): {error}") from None
    sizes: dict[tuple[str, str], int] = {}
    for span in _spans(request):
        trace_id, span_id = _check_ids(span)
        sizes[(trace_id, span_id)] = span.ByteSize()
    return Decoded(otlp_json(request), len(sizes), sizes)


def reply(kind: str) -> bytes:
    """The success answer, an empty ``ExportTraceServiceResponse`` in the request's encoding."""
    response = ExportTraceServiceResponse()
    if kind == JSON:
        return str(json_format.MessageToJson(response, indent=None)).encode()
    return bytes(response.SerializeToString())


def status(kind: str, code: int, message: str) -> bytes:
    """An error answer's body: a ``google.rpc.Status`` (gRPC `code`, `message`) in `kind`."""
    message_ = status_pb2.Status(code=code, message=message)
    if kind == JSON:
        return str(json_format.MessageToJson(message_, indent=None)).encode()
    return bytes(message_.SerializeToString())


def _json(data: bytes) -> Any:
    try:
        parsed = json.loads(data)
    except ValueError as error:
        raise BadBody(f"not JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise BadBody("not an OTLP trace export: the JSON body is not an object")
    return parsed


def _spans(request: ExportTraceServiceRequest) -> Iterator[Any]:
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            yield from scope_spans.spans


def _check_ids(span: Any) -> tuple[str, str]:
    trace_id: bytes = span.trace_id
    span_id: bytes = span.span_id
    parent: bytes = span.parent_span_id
    if len(trace_id) != 16 or not any(trace_id):
        raise BadBody(f"span {span.name!r}: the trace id must be 16 bytes, not all zero")
    if len(span_id) != 8 or not any(span_id):
        raise BadBody(f"span {span.name!r}: the span id must be 8 bytes, not all zero")
    if parent and len(parent) != 8:
        raise BadBody(f"span {span.name!r}: the parent span id must be 8 bytes")
    return trace_id.hex(), span_id.hex()


def _each_span(body: Any) -> Iterator[dict[str, Any]]:
    for resource_spans in body.get("resourceSpans") or ():
        if not isinstance(resource_spans, dict):
            continue
        for scope_spans in resource_spans.get("scopeSpans") or ():
            if not isinstance(scope_spans, dict):
                continue
            for span in scope_spans.get("spans") or ():
                if isinstance(span, dict):
                    yield span


def otlp_json(message: Any) -> dict[str, Any]:
    """A message in ``json_format.MessageToDict``'s form, its span and link ids in hex.

    Walked through ``ListFields()`` (the fields set, as MessageToDict leaves defaults
    out), each value in protobuf's JSON mapping: 64-bit integers as decimal strings, enums
    by name, bytes in base64 but the ids in hex, doubles as numbers or "NaN" /
    "Infinity" / "-Infinity". OTLP's trace messages hold no map fields (attributes are
    lists of KeyValue), so none is walked here. The same dict at half MessageToDict's
    cost, whose walk by reflection was an eighth of the event path's CPU
    (tests/otlp/test_wire.py holds them equal).
    """
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        if field.is_repeated:
            out[field.json_name] = [_json_value(field, item) for item in value]
        else:
            out[field.json_name] = _json_value(field, value)
    return out


_INT64 = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
        FieldDescriptor.TYPE_SINT64,
    }
)
_FLOATS = frozenset({FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT})
_HEX_IDS = frozenset({"trace_id", "span_id", "parent_span_id"})  # of spans and links


def _json_value(field: Any, value: Any) -> Any:
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        return otlp_json(value)
    if kind in _INT64:
        return str(value)
    if kind == FieldDescriptor.TYPE_ENUM:
        named = field.enum_type.values_by_number.get(value)
        return named.name if named is not None else value
    if kind == FieldDescriptor.TYPE_BYTES:
        return value.hex() if field.name in _HEX_IDS else base64.b64encode(value).decode()
    if kind in _FLOATS and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _base64_ids(body: dict[str, Any]) -> dict[str, Any]:
    """OTLP/JSON's hex ids as the base64 protobuf's JSON parser reads into bytes."""
    for span in _each_span(body):
        for key in _ID_KEYS:
            span[key] = _hex_to_base64(span.get(key), key)
        for link in span.get("links") or ():
            if isinstance(link, dict):
                for key in ("traceId", "spanId"):
                    link[key] = _hex_to_base64(link.get(key), key)
    return body


def _hex_to_base64(value: Any, key: str) -> Any:
    if value is None or value == "":
        return value
    if not isinstance(value, str):
        raise BadBody(f"{key} must be a hex string, got {type(value).__name__}")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise BadBody(f"{key} {value[:40]!r} is not hex (OTLP/JSON ids are hex)") from None
    if key in _ID_SIZES and len(raw) != _ID_SIZES[key]:
        raise BadBody(f"{key} {value[:40]!r} must be {_ID_SIZES[key]} bytes")
    return base64.b64encode(raw).decode()
