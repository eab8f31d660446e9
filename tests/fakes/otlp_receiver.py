"""A loopback OTLP/HTTP receiver that decodes what it gets (telemetry tests).

It stands in for an OpenTelemetry Collector (``POST /v1/traces``, ``POST /v1/metrics``)
and for Langfuse's OTLP ingestion (``POST /api/public/otel/v1/traces``). Bodies are
decoded with ``opentelemetry-proto`` (``ExportTraceServiceRequest``,
``ExportMetricsServiceRequest``): protobuf, or JSON when the content type says so;
gzip and deflate bodies are inflated first. Every request is recorded (path, headers
with lower-case names, size), every span (name, attributes, resource attributes,
scope, ids, kind, status) and every metric data point (sums, gauges, histograms).

``auth`` (an ``Authorization`` header value) makes it answer 401 to anything else;
``fail(n, status)`` answers the next n requests with an error. ``stop()`` is a real
outage (the port closes).
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from .loopback import HOST, LoopbackHandler, LoopbackService

__all__ = [
    "LANGFUSE_TRACES_PATH",
    "METRICS_PATH",
    "TRACES_PATH",
    "OtlpGrpcReceiver",
    "OtlpReceiver",
    "ReceivedPoint",
    "ReceivedRequest",
    "ReceivedSpan",
]

TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"
LANGFUSE_TRACES_PATH = "/api/public/otel/v1/traces"
_TRACE_PATHS = (TRACES_PATH, LANGFUSE_TRACES_PATH)


def any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        out[pair.key] = any_value(pair.value)
    return out


@dataclass(frozen=True)
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    content_type: str
    size: int
    status: int
    at: float
    """``time.monotonic()`` when the request arrived."""


@dataclass(frozen=True)
class ReceivedSpan:
    path: str
    name: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    status_code: int
    """0 unset, 1 ok, 2 error (``opentelemetry.proto.trace.v1.Status.StatusCode``)."""
    status_message: str
    headers: dict[str, str] = field(repr=False)


@dataclass(frozen=True)
class ReceivedPoint:
    """One data point of one metric."""

    metric: str
    kind: str
    """``sum``, ``gauge``, ``histogram`` (or ``exponential_histogram``, ``summary``)."""
    attributes: dict[str, Any]
    resource: dict[str, Any]
    unit: str
    value: float | None = None
    is_monotonic: bool | None = None
    temporality: int | None = None
    """1 delta, 2 cumulative."""
    count: int | None = None
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    explicit_bounds: tuple[float, ...] = ()
    start_time_unix_nano: int = 0
    time_unix_nano: int = 0


class _Recording:
    """What a receiver got, decoded; shared by the HTTP and the gRPC receiver."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._requests: list[ReceivedRequest] = []
        self._spans: list[ReceivedSpan] = []
        self._points: list[ReceivedPoint] = []
        self._failures: deque[int] = deque()

    @property
    def requests(self) -> list[ReceivedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    @property
    def points(self) -> list[ReceivedPoint]:
        with self._lock:
            return list(self._points)

    def spans_named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    def points_of(self, metric: str) -> list[ReceivedPoint]:
        return [p for p in self.points if p.metric == metric]

    def latest(self, metric: str, **labels: str) -> ReceivedPoint | None:
        """The most recent point of `metric` whose attributes hold `labels`."""
        found = [
            p
            for p in self.points_of(metric)
            if all(p.attributes.get(k) == v for k, v in labels.items())
        ]
        return found[-1] if found else None

    def wait_until(self, ready: Callable[[Any], bool], timeout_s: float = 5.0) -> None:
        """Wait until `ready(self)` holds; AssertionError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._lock:  # re-entrant: `ready` may read the properties
            while not ready(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"the receiver did not get it within {timeout_s}s")
                self._lock.wait(min(remaining, 0.05))

    def reset(self) -> None:
        with self._lock:
            self._requests.clear()
            self._spans.clear()
            self._points.clear()
            self._failures.clear()

    def _record_spans(
        self, path: str, headers: dict[str, str], request: ExportTraceServiceRequest
    ) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ReceivedSpan(
                            path=path,
                            name=span.name,
                            attributes=attributes(span.attributes),
                            resource=resource,
                            scope=scope_spans.scope.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            status_code=span.status.code,
                            status_message=span.status.message,
                            headers=headers,
                        )
                    )
        with self._lock:
            self._spans.extend(spans)
            self._lock.notify_all()

    def _record_points(self, request: ExportMetricsServiceRequest) -> None:
        points = []
        for resource_metrics in request.resource_metrics:
            resource = attributes(resource_metrics.resource.attributes)
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data") or ""
                    common: dict[str, Any] = {
                        "metric": metric.name,
                        "kind": kind,
                        "resource": resource,
                        "unit": metric.unit,
                    }
                    if kind in ("sum", "gauge"):
                        data = getattr(metric, kind)
                        for p in data.data_points:
                            value = p.as_double if p.HasField("as_double") else float(p.as_int)
                            points.append(
                                ReceivedPoint(
                                    **common,
                                    attributes=attributes(p.attributes),
                                    value=value,
                                    is_monotonic=metric.sum.is_monotonic if kind == "sum" else None,
                                    temporality=metric.sum.aggregation_temporality
                                    if kind == "sum"
                                    else None,
                                    start_time_unix_nano=p.start_time_unix_nano,
                                    time_unix_nano=p.time_unix_nano,
                                )
                            )
                    elif kind == "histogram":
                        for h in metric.histogram.data_points:
                            points.append(
                                ReceivedPoint(
                                    **common,
                                    attributes=attributes(h.attributes),
                                    temporality=metric.histogram.aggregation_temporality,
                                    count=h.count,
                                    sum=h.sum,
                                    bucket_counts=tuple(h.bucket_counts),
                                    explicit_bounds=tuple(h.explicit_bounds),
                                    start_time_unix_nano=h.start_time_unix_nano,
                                    time_unix_nano=h.time_unix_nano,
                                )
                            )
                    else:
                        points.append(ReceivedPoint(**common, attributes={}))
        with self._lock:
            self._points.extend(points)
            self._lock.notify_all()


class OtlpReceiver(_Recording, LoopbackService):
    """OTLP over HTTP (protobuf or JSON) on 127.0.0.1; ``url`` is the base endpoint."""

    service_name = "OtlpReceiver"
    thread_prefix = "otlp-receiver"
    handler_class = LoopbackHandler

    def __init__(self, auth: str | None = None) -> None:
        _Recording.__init__(self)
        LoopbackService.__init__(self)
        self.auth = auth

    def fail(self, times: int, status: int = 503) -> None:
        """Answer the next `times` requests with `status`."""
        with self._lock:
            self._failures.extend([status] * times)

    # -- serving --------------------------------------------------------------

    def _handle(self, handler: LoopbackHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        path = urlsplit(handler.path).path
        headers = {name.lower(): value for name, value in handler.headers.items()}
        content_type = headers.get("content-type", "").split(";")[0].strip()
        status, reply = self._answer(handler.command, path, headers, content_type, body)
        with self._lock:
            self._requests.append(
                ReceivedRequest(path, headers, content_type, len(body), status, time.monotonic())
            )
            self._lock.notify_all()
        handler.send_response(status)
        handler.send_header("Content-Type", content_type or "application/x-protobuf")
        handler.send_header("Content-Length", str(len(reply)))
        handler.end_headers()
        handler.wfile.write(reply)

    def _answer(
        self, method: str, path: str, headers: dict[str, str], content_type: str, body: bytes
    ) -> tuple[int, bytes]:
        if method != "POST" or path not in (*_TRACE_PATHS, METRICS_PATH):
            return 404, b""
        if self.auth is not None and headers.get("authorization") != self.auth:
            return 401, b""
        with self._lock:
            failure = self._failures.popleft() if self._failures else None
        if failure is not None:
            return failure, b""
        encoding = headers.get("content-encoding", "")
        as_json = content_type == "application/json"
        try:
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            if path in _TRACE_PATHS:
                traces = ExportTraceServiceRequest()
                _parse(traces, body, as_json)
                self._record_spans(path, headers, traces)
                reply = ExportTraceServiceResponse()
            else:
                metrics = ExportMetricsServiceRequest()
                _parse(metrics, body, as_json)
                self._record_points(metrics)
                reply = ExportMetricsServiceResponse()  # type: ignore[assignment]
        except (DecodeError, json_format.ParseError, OSError, zlib.error):
            return 400, b""
        if as_json:
            return 200, json_format.MessageToJson(reply).encode()
        return 200, reply.SerializeToString()


class OtlpGrpcReceiver(_Recording):
    """OTLP over gRPC (the trace and metrics services) on 127.0.0.1; ``endpoint`` for clients.

    ``grpcio`` comes with ``opentelemetry-exporter-otlp``; the path of a span is the
    gRPC method (``/opentelemetry.proto.collector.trace.v1.TraceService/Export``).
    """

    def __init__(self) -> None:
        super().__init__()
        self._server: Any = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> OtlpGrpcReceiver:
        from concurrent.futures import ThreadPoolExecutor

        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(
                self, request: ExportTraceServiceRequest, context: Any
            ) -> ExportTraceServiceResponse:
                metadata = {k.lower(): v for k, v in context.invocation_metadata()}
                receiver._record_spans(_GRPC_TRACES, metadata, request)
                return ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(
                self, request: ExportMetricsServiceRequest, context: Any
            ) -> ExportMetricsServiceResponse:
                receiver._record_points(request)
                return ExportMetricsServiceResponse()

        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
        self.port = server.add_insecure_port(f"{HOST}:0")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None

    def __enter__(self) -> OtlpGrpcReceiver:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


_GRPC_TRACES = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _parse(message: Any, body: bytes, as_json: bool) -> None:
    if as_json:
        json_format.Parse(body, message)
    else:
        message.ParseFromString(body)
