"""OpenTelemetry: observer's own spans and metrics over OTLP; the judge's calls in Langfuse.

`setup_telemetry(metrics)` reads the standard variables: `OTEL_EXPORTER_OTLP_ENDPOINT`
and the per-signal `..._TRACES_/..._METRICS_` endpoint, headers, timeout (seconds,
as the Python SDK reads it), compression and protocol; `OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SDK_DISABLED`, `OTEL_METRIC_EXPORT_INTERVAL`,
`OTEL_TRACES_EXPORTER`/`OTEL_METRICS_EXPORTER=none`. A signal is exported only when
an endpoint for it is set. With none set it builds nothing and returns a no-op
`Telemetry`; the modules' `trace.get_tracer("observer")` spans stay non-recording.

Otherwise:
- spans: a TracerProvider (resource `service.name=observer`, `service.version`;
  `OTEL_SERVICE_NAME`/`OTEL_RESOURCE_ATTRIBUTES` override) with a BatchSpanProcessor
  and the SDK's OTLP span exporter (http/protobuf; gRPC when asked for and
  installed), reached by every module through the global tracer provider;
- metrics: the Prometheus registry of `Metrics` -- the one declaration `/metrics`
  serves -- converted on every export interval into the SDK's metric data
  (counters: cumulative monotonic sums named as in Prometheus, `_total` included;
  gauges; histograms with their buckets; labels as attributes) and handed to
  the SDK's OTLP metric exporter.

With `judge_to_langfuse`, a second, private TracerProvider posts the judge's LLM
calls to Langfuse's OTLP endpoint: one `observer.judge` trace per judged trace,
in environment `observer-judge`, each call a generation (model, tokens, cost,
input and output). observer's own mapping skips them (root names starting with
`observer.`, scope `observer`), so observer never scores its own traces. This
exporter has its own transport, so the collector's `OTEL_EXPORTER_OTLP_HEADERS`
never reach Langfuse, and Langfuse's keys never reach the collector or a log.

Nothing here raises to its caller. An export that fails is logged once per
outage (`telemetry_export_failed`, then `telemetry_export_recovered`; the
exporters' own per-attempt warnings are held back), and `shutdown(timeout_s)`
returns within its budget whatever the collector does.
"""

from __future__ import annotations

import atexit
import base64
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx
import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.re import parse_env_headers
from opentelemetry.util.types import AttributeValue
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric as PromFamily

from observer import __version__

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

    from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.telemetry")

SERVICE_NAME = "observer"
TRACER_NAME = "observer"
JUDGE_ENVIRONMENT = "observer-judge"
JUDGE_TRACE_NAME = "observer.judge"
JUDGE_CALL_SPAN = "observer.judge_call"
LANGFUSE_OTLP_PATH = "/api/public/otel/v1/traces"
# The direct write path of Langfuse v4 for OTLP exporters (the SDK 5 sends exactly this).
LANGFUSE_INGESTION_VERSION_HEADER = "x-langfuse-ingestion-version"
LANGFUSE_INGESTION_VERSION = "4"
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_INTERVAL_MS = 60_000.0

Signal = Literal["traces", "metrics"]

_tracer = trace.get_tracer(TRACER_NAME)


# -- configuration from the standard variables ---------------------------------------


@dataclass(frozen=True)
class LangfuseOtlp:
    """Where the judge's generations go: the Langfuse project observer reads from."""

    base_url: str
    public_key: str
    secret_key: str = field(repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def traces_url(self) -> str:
        return self.base_url.rstrip("/") + LANGFUSE_OTLP_PATH


@dataclass(frozen=True)
class ExportTarget:
    """Where one signal goes, as the standard variables say."""

    signal: Signal
    protocol: str  # "http/protobuf" or "grpc"
    endpoint: str
    headers: dict[str, str] = field(repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    compression: str = "none"


def _var(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    return value.strip() if value and value.strip() else None


def _number(raw: str | None, default: float, name: str) -> float:
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        log.warning("telemetry_setting_ignored", variable=name, reason="not a number")
        return default
    return value if value > 0 else default


def sdk_disabled(environ: Mapping[str, str]) -> bool:
    return (_var(environ, "OTEL_SDK_DISABLED") or "").lower() == "true"


def export_target(environ: Mapping[str, str], signal: Signal) -> ExportTarget | None:
    """Where `signal` goes; None when no endpoint is set for it or its exporter is `none`."""
    upper = signal.upper()
    if (_var(environ, f"OTEL_{upper}_EXPORTER") or "otlp").lower() == "none":
        return None
    specific = _var(environ, f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT")
    base = _var(environ, "OTEL_EXPORTER_OTLP_ENDPOINT")
    if specific is None and base is None:
        return None
    protocol = (
        _var(environ, f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL")
        or _var(environ, "OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).lower()
    if specific is not None:
        endpoint = specific
    elif protocol == "grpc":
        endpoint = cast(str, base)
    else:
        endpoint = f"{cast(str, base).rstrip('/')}/v1/{signal}"
    raw_headers = (
        _var(environ, f"OTEL_EXPORTER_OTLP_{upper}_HEADERS")
        or _var(environ, "OTEL_EXPORTER_OTLP_HEADERS")
        or ""
    )
    timeout_name = f"OTEL_EXPORTER_OTLP_{upper}_TIMEOUT"
    timeout = _var(environ, timeout_name) or _var(environ, "OTEL_EXPORTER_OTLP_TIMEOUT")
    compression = (
        _var(environ, f"OTEL_EXPORTER_OTLP_{upper}_COMPRESSION")
        or _var(environ, "OTEL_EXPORTER_OTLP_COMPRESSION")
        or "none"
    ).lower()
    return ExportTarget(
        signal,
        protocol,
        endpoint,
        dict(parse_env_headers(raw_headers, liberal=True)),
        _number(timeout, DEFAULT_TIMEOUT_S, timeout_name),
        compression if compression in ("gzip", "deflate") else "none",
    )


def resource_attributes(environ: Mapping[str, str]) -> dict[str, AttributeValue]:
    """`service.name=observer` and the version; `OTEL_RESOURCE_ATTRIBUTES`, then
    `OTEL_SERVICE_NAME`, override them, as the SDK's environment detector reads them."""
    attributes: dict[str, AttributeValue] = {
        "service.name": SERVICE_NAME,
        "service.version": __version__,
    }
    for item in (_var(environ, "OTEL_RESOURCE_ATTRIBUTES") or "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            attributes[key.strip()] = unquote(value.strip())
    name = _var(environ, "OTEL_SERVICE_NAME")
    if name:
        attributes["service.name"] = name
    return attributes


def _safe_url(url: str) -> str:
    """A URL for a log line: no user info, no query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) if parts.scheme else url


# -- one global tracer provider, switched between setups ---------------------------------


class _SwitchTracer(trace.Tracer):
    """A tracer of the switch: spans go to the current provider, or nowhere."""

    def __init__(self, switch: _Switch, name: str, version: str | None, schema_url: str | None):
        self._switch = switch
        self._args = (name, version, schema_url)
        self._cached: tuple[TracerProvider, trace.Tracer] | None = None

    def _target(self) -> trace.Tracer:
        provider = self._switch.provider
        if provider is None:
            return _NOOP_TRACER
        cached = self._cached
        if cached is None or cached[0] is not provider:
            cached = (provider, provider.get_tracer(*self._args))
            self._cached = cached
        return cached[1]

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._target().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._target().start_as_current_span(*args, **kwargs)


class _Switch(trace.TracerProvider):
    """Installed as the global provider once; each setup points it at its own provider.

    The API lets the global provider be set only once per process; this keeps a
    second setup (a test, a second command in one process) exporting, and a
    shut-down one silent.
    """

    def __init__(self) -> None:
        self.provider: TracerProvider | None = None

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> trace.Tracer:
        return _SwitchTracer(
            self, instrumenting_module_name, instrumenting_library_version, schema_url
        )


_NOOP_TRACER = trace.NoOpTracer()
_SWITCH = _Switch()
_switch_lock = threading.Lock()


def _route_global_spans(provider: TracerProvider | None) -> None:
    """Point the global tracer provider at `provider` (None: spans are no-ops again)."""
    with _switch_lock:
        if provider is not None and trace.get_tracer_provider() is not _SWITCH:
            trace.set_tracer_provider(_SWITCH)
            if trace.get_tracer_provider() is not _SWITCH:
                log.warning(
                    "telemetry_global_provider_taken",
                    detail="another tracer provider was set first; observer's spans go there",
                )
        _SWITCH.provider = provider


# -- failures logged once per outage -------------------------------------------------------


class _Outage:
    """One warning when exports start failing, one info when they work again."""

    def __init__(self, what: str, endpoint: str) -> None:
        self.what = what
        self.endpoint = _safe_url(endpoint)
        self._lock = threading.Lock()
        self.down = False

    def failed(self, reason: str) -> None:
        with self._lock:
            if self.down:
                return
            self.down = True
        log.warning(
            "telemetry_export_failed", what=self.what, endpoint=self.endpoint, reason=reason
        )

    def succeeded(self) -> None:
        with self._lock:
            if not self.down:
                return
            self.down = False
        log.info("telemetry_export_recovered", what=self.what, endpoint=self.endpoint)

    def result(self, ok: bool, reason: str | None = None) -> None:
        if ok:
            self.succeeded()
        else:
            self.failed(reason or "the exporter reported a failure")


class _HeldBack(logging.Filter):
    """The exporters' own warnings (one per retry, per batch) held back.

    The first of an outage becomes the reason of its one `telemetry_export_failed`,
    at once, routed by the signal it names.
    """

    def __init__(self) -> None:
        super().__init__()
        self._routes: list[tuple[tuple[str, ...], _Outage]] = []
        self.loggers: set[str] = set()

    def route(self, exporter: object, words: tuple[str, ...], outage: _Outage) -> None:
        self._routes.append((words, outage))
        self.loggers.update(
            cls.__module__
            for cls in type(exporter).__mro__
            if cls.__module__.startswith("opentelemetry.exporter")
        )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        message = record.getMessage()
        for words, outage in self._routes:
            if any(word in message for word in words):
                outage.failed(message[:300])
                break
        return False

    def install(self) -> Callable[[], None]:
        """Hold back from now on; the returned function stops it."""
        loggers = [logging.getLogger(name) for name in sorted(self.loggers)]
        for logger in loggers:
            logger.addFilter(self)

        def remove() -> None:
            for logger in loggers:
                logger.removeFilter(self)

        return remove


class _WatchedSpanExporter(SpanExporter):
    """An exporter whose failures are reported once per outage; shutdown is idempotent."""

    def __init__(self, inner: SpanExporter, outage: _Outage) -> None:
        self._inner = inner
        self._outage = outage
        self._closed = False
        self._close_lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception as error:  # an exporter bug must not kill the batch worker
            self._outage.failed(f"{type(error).__name__}: {error}"[:300])
            return SpanExportResult.FAILURE
        self._outage.result(result is SpanExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._inner.shutdown()
        except Exception:
            log.exception("telemetry_exporter_shutdown_failed", what=self._outage.what)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


# -- the judge's generations to Langfuse ---------------------------------------------------


class LangfuseSpanExporter(SpanExporter):
    """Spans to Langfuse's OTLP endpoint: HTTP protobuf (the SDK's encoder), Basic auth.

    Its own transport, so no `OTEL_EXPORTER_OTLP_*` variable (meant for the
    collector) applies here. Sends `x-langfuse-ingestion-version: 4`, as the SDK's own
    exporter does (`langfuse/_client/span_processor.py`): Langfuse writes such spans
    straight to its events table, readable at once (without it, up to 15 minutes
    later). One retry after a network error, a 5xx or a 429.
    """

    def __init__(
        self,
        target: LangfuseOtlp,
        outage: _Outage | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.outage = outage or _Outage("judge_generations", target.traces_url)
        token = base64.b64encode(f"{target.public_key}:{target.secret_key}".encode()).decode()
        self.url = target.traces_url
        self._client = client or httpx.Client(timeout=target.timeout_s)
        self._headers = {
            "Authorization": f"Basic {token}",
            "Content-Type": "application/x-protobuf",
            "User-Agent": f"observer/{__version__}",
            # Langfuse's direct write path, as the SDK 5 span processor sends it: without it
            # the spans go the dual-write way, visible only minutes later.
            LANGFUSE_INGESTION_VERSION_HEADER: LANGFUSE_INGESTION_VERSION,
        }
        self._closing = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closing.is_set():
            return SpanExportResult.FAILURE
        body = encode_spans(spans).SerializeToString()
        for attempt in range(2):
            try:
                response = self._client.post(self.url, content=body, headers=self._headers)
            except httpx.HTTPError as error:
                reason = f"{type(error).__name__}: {error}"[:300]
            else:
                if response.is_success:
                    self.outage.succeeded()
                    return SpanExportResult.SUCCESS
                reason = f"Langfuse answered {response.status_code}"
                if response.status_code < 500 and response.status_code != 429:
                    break
            if attempt == 0 and self._closing.wait(1.0):
                break
        self.outage.failed(reason)
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._closing.set()
        self._client.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


# -- the Prometheus registry as OTLP metrics ---------------------------------------------


def _unit(name: str) -> str:
    if name.endswith("_seconds"):
        return "s"
    if name.endswith("_ratio"):
        return "1"
    return ""


def _key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _created(family: PromFamily) -> dict[tuple[tuple[str, str], ...], int]:
    suffix = family.name + "_created"
    return {_key(s.labels): int(s.value * 1e9) for s in family.samples if s.name == suffix}


def _histogram_points(family: PromFamily, now_ns: int, start_ns: int) -> list[HistogramDataPoint]:
    created = _created(family)
    buckets: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    counts: dict[tuple[tuple[str, str], ...], float] = {}
    sums: dict[tuple[tuple[str, str], ...], float] = {}
    for sample in family.samples:
        if sample.name == family.name + "_bucket":
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            bound = float(sample.labels["le"])
            buckets.setdefault(_key(labels), []).append((bound, sample.value))
        elif sample.name == family.name + "_count":
            counts[_key(sample.labels)] = sample.value
        elif sample.name == family.name + "_sum":
            sums[_key(sample.labels)] = sample.value
    points = []
    for key, cumulative in buckets.items():
        cumulative.sort()
        count = int(counts.get(key, cumulative[-1][1]))
        bounds = [bound for bound, _ in cumulative if bound != float("inf")]
        per_bucket: list[int] = []
        below = 0
        for _bound, running in cumulative[: len(bounds)]:
            per_bucket.append(int(running) - below)
            below = int(running)
        per_bucket.append(count - below)  # (last bound, +Inf)
        points.append(
            HistogramDataPoint(
                attributes=dict(key),
                start_time_unix_nano=created.get(key, start_ns),
                time_unix_nano=now_ns,
                count=count,
                sum=sums.get(key, 0.0),
                bucket_counts=per_bucket,
                explicit_bounds=bounds,
                # Prometheus keeps no min or max: left out of the OTLP point.
                min=cast(float, None),
                max=cast(float, None),
            )
        )
    return points


def _metric(family: PromFamily, now_ns: int, start_ns: int) -> Metric | None:
    cumulative = AggregationTemporality.CUMULATIVE
    if family.type == "counter":
        created = _created(family)
        name = family.name + "_total"
        points = [
            NumberDataPoint(
                attributes=dict(s.labels),
                start_time_unix_nano=created.get(_key(s.labels), start_ns),
                time_unix_nano=now_ns,
                value=float(s.value),
            )
            for s in family.samples
            if s.name == name
        ]
        data: Sum | Gauge | Histogram = Sum(points, cumulative, is_monotonic=True)
    elif family.type in ("gauge", "unknown"):
        name = family.name
        data = Gauge(
            [
                NumberDataPoint(dict(s.labels), start_ns, now_ns, float(s.value))
                for s in family.samples
                if s.name == name
            ]
        )
    elif family.type == "histogram":
        name = family.name
        data = Histogram(_histogram_points(family, now_ns, start_ns), cumulative)
    else:  # summaries, info, state sets: observer declares none
        return None
    return Metric(name, family.documentation, family.unit or _unit(family.name), data)


def registry_metrics(
    registry: CollectorRegistry, resource: Resource, now_ns: int, start_ns: int
) -> MetricsData:
    """Everything the registry holds, as the SDK's metric data (what `/metrics` shows)."""
    metrics = [
        converted
        for family in registry.collect()
        if (converted := _metric(family, now_ns, start_ns)) is not None
    ]
    scope = InstrumentationScope(TRACER_NAME, __version__)
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, metrics, "")], "")])


class RegistryExport:
    """Exports the Prometheus registry over OTLP every `interval_s`: one declaration.

    The loop is `while not stop.wait(interval): export()`; the exporter is never
    called concurrently; `close()` makes a last export and shuts the exporter down.
    """

    name = "metrics"

    def __init__(
        self,
        registry: CollectorRegistry,
        exporter: MetricExporter,
        resource: Resource,
        *,
        interval_s: float,
        outage: _Outage,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._registry = registry
        self._exporter = exporter
        self._resource = resource
        self.interval_s = interval_s
        self._outage = outage
        self._clock_ns = clock_ns
        self._start_ns = clock_ns()
        self._stop = threading.Event()
        self._export_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._exporter_closed = False
        self._close_lock = threading.Lock()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="observer-otel-metrics", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.export()

    def export(self) -> bool:
        """One export of the registry now; True when the collector took it. Never raises."""
        with self._export_lock:
            if self._exporter_closed:
                return False
            try:
                data = registry_metrics(
                    self._registry, self._resource, self._clock_ns(), self._start_ns
                )
                ok = self._exporter.export(data) is MetricExportResult.SUCCESS
            except Exception as error:
                self._outage.failed(f"{type(error).__name__}: {error}"[:300])
                return False
        self._outage.result(ok)
        return ok

    def flush(self) -> bool:
        return self.export()

    def close(self, timeout_s: float) -> bool:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        ok = self.export()
        self._shutdown_exporter()
        return ok

    def abort(self) -> None:
        self._stop.set()
        self._shutdown_exporter()

    def _shutdown_exporter(self) -> None:
        with self._close_lock:
            if self._exporter_closed:
                return
            self._exporter_closed = True
        try:
            self._exporter.shutdown()
        except Exception:
            log.exception("telemetry_exporter_shutdown_failed", what="metrics")


# -- Telemetry: what setup built, flushed and shut down within a budget ----------------------


class _Part(Protocol):
    name: str

    def flush(self) -> bool: ...

    def close(self, timeout_s: float) -> bool: ...

    def abort(self) -> None: ...


class _SpanPart:
    def __init__(
        self,
        name: str,
        provider: TracerProvider,
        processor: BatchSpanProcessor,
        exporter: _WatchedSpanExporter,
        outage: _Outage,
    ) -> None:
        self.name = name
        self.provider = provider
        self._processor = processor
        self._exporter = exporter
        self._outage = outage

    def flush(self) -> bool:
        return self._processor.force_flush() and not self._outage.down

    def close(self, timeout_s: float) -> bool:
        # The batch worker's last export, then the exporter.
        self._processor.shutdown()  # type: ignore[no-untyped-call]
        self.provider.shutdown()
        return not self._outage.down

    def abort(self) -> None:
        self._exporter.shutdown()  # ends the exporter's retries at once


class Telemetry:
    """What `setup_telemetry` built. `force_flush` and `shutdown` never raise and
    return within their budget (True: everything went out); `shutdown` is idempotent.

    `judge_tracer` (None unless judge_to_langfuse): give it to
    `JudgeClient(langfuse_tracer=...)` to see the judge's calls as Langfuse generations.
    """

    def __init__(
        self,
        parts: Sequence[_Part] = (),
        *,
        judge_tracer: trace.Tracer | None = None,
        before_close: Callable[[], None] = lambda: None,
        after_close: Callable[[], None] = lambda: None,
    ) -> None:
        self._parts = list(parts)
        self.judge_tracer = judge_tracer
        self._before_close = before_close
        self._after_close = after_close
        self._lock = threading.Lock()
        self._closed = False
        self._closed_ok = True
        if self._parts:
            atexit.register(self._at_exit)

    @property
    def enabled(self) -> bool:
        """Something is exported (spans, metrics or judge generations)."""
        return bool(self._parts)

    @property
    def parts(self) -> list[str]:
        return [part.name for part in self._parts]

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export the spans ended so far and the metrics as they are now."""
        if not self._parts or self._closed:
            return not self._parts
        return self._run("flush", timeout_s)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Flush spans and a last metrics export, then stop; spans started later are no-ops."""
        with self._lock:
            if self._closed:
                return self._closed_ok
            self._closed = True
        if not self._parts:
            return True
        atexit.unregister(self._at_exit)
        self._hook(self._before_close)  # spans started from now on are no-ops
        # The exporters' warnings stay held back until the last of them is done, late or not.
        self._closed_ok = self._run("close", timeout_s, lambda: self._hook(self._after_close))
        return self._closed_ok

    @staticmethod
    def _hook(hook: Callable[[], None]) -> None:
        try:
            hook()
        except Exception:
            log.exception("telemetry_close_failed")

    def _at_exit(self) -> None:
        self.shutdown(2.0)

    def _run(
        self,
        action: Literal["flush", "close"],
        timeout_s: float,
        when_done: Callable[[], None] = lambda: None,
    ) -> bool:
        """Every part's flush or close in a thread of its own; returns at the deadline."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        results: dict[str, bool] = {}
        left = [len(self._parts)]
        left_lock = threading.Lock()

        def work(part: _Part) -> None:
            try:
                if action == "flush":
                    results[part.name] = part.flush()
                else:
                    results[part.name] = part.close(max(0.0, deadline - time.monotonic()))
            except Exception:
                log.exception("telemetry_flush_failed", part=part.name)
                results[part.name] = False
            with left_lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                when_done()

        threads = [
            (part, threading.Thread(target=work, args=(part,), name=f"observer-otel-{action}"))
            for part in self._parts
        ]
        for _part, thread in threads:
            thread.daemon = True
            thread.start()
        late = []
        for part, thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                late.append(part.name)
                if action == "close":
                    part.abort()
        if late:
            log.warning(
                "telemetry_flush_incomplete", action=action, parts=late, timeout_s=timeout_s
            )
        return not late and all(results.values())


# -- setup ---------------------------------------------------------------------------------


def _span_exporter(target: ExportTarget) -> SpanExporter | None:
    if target.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )
        except ImportError:
            _grpc_missing(target)
            return None
        return GrpcSpanExporter(
            endpoint=target.endpoint, headers=target.headers, timeout=target.timeout_s
        )
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    _note_json(target)
    return OTLPSpanExporter(
        endpoint=target.endpoint,
        headers=target.headers,
        timeout=target.timeout_s,
        compression=Compression(target.compression),
    )


def _metric_exporter(target: ExportTarget) -> MetricExporter | None:
    if target.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcMetricExporter,
            )
        except ImportError:
            _grpc_missing(target)
            return None
        return GrpcMetricExporter(
            endpoint=target.endpoint, headers=target.headers, timeout=target.timeout_s
        )
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    _note_json(target)
    return OTLPMetricExporter(
        endpoint=target.endpoint,
        headers=target.headers,
        timeout=target.timeout_s,
        compression=Compression(target.compression),
    )


def _grpc_missing(target: ExportTarget) -> None:
    log.error(
        "telemetry_protocol_unavailable",
        signal=target.signal,
        protocol="grpc",
        detail="install opentelemetry-exporter-otlp-proto-grpc, or set "
        "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf; this signal is not exported",
    )


def _note_json(target: ExportTarget) -> None:
    if target.protocol not in ("http/protobuf", "grpc"):
        log.warning(
            "telemetry_protocol_unsupported",
            signal=target.signal,
            protocol=target.protocol,
            detail="sent as http/protobuf, which OTLP/HTTP receivers accept on the same path",
        )


def setup_telemetry(
    metrics: Metrics,
    *,
    environ: Mapping[str, str] = os.environ,
    judge_to_langfuse: LangfuseOtlp | None = None,
) -> Telemetry:
    """Build what the variables ask for; a no-op `Telemetry` when they ask for nothing.

    `environ` decides whether and where to export; tuning variables the SDK reads
    itself (`OTEL_BSP_*`, `OTEL_TRACES_SAMPLER`, certificates) come from the process
    environment. `judge_to_langfuse` is observer's own setting: `OTEL_SDK_DISABLED`
    does not turn it off. Never raises: a part that cannot be built is logged and
    left out.
    """
    disabled = sdk_disabled(environ)
    traces = None if disabled else export_target(environ, "traces")
    metric_target = None if disabled else export_target(environ, "metrics")
    if traces is None and metric_target is None and judge_to_langfuse is None:
        return Telemetry()
    resource = Resource.create(resource_attributes(environ))
    parts: list[_Part] = []
    held = _HeldBack()
    global_provider: TracerProvider | None = None
    judge_tracer: trace.Tracer | None = None
    if traces is not None:
        try:
            global_provider = _traces_part(traces, resource, parts, held)
        except Exception:
            log.exception("telemetry_setup_failed", signal="traces")
    if metric_target is not None:
        try:
            _metrics_part(metric_target, metrics, resource, environ, parts, held)
        except Exception:
            log.exception("telemetry_setup_failed", signal="metrics")
    if judge_to_langfuse is not None:
        try:
            judge_tracer = _judge_part(judge_to_langfuse, parts)
        except Exception:
            log.exception("telemetry_setup_failed", signal="judge_generations")
    if not parts:
        return Telemetry()
    stop_holding_back = held.install()
    if global_provider is not None:
        _route_global_spans(global_provider)
    names = {part.name for part in parts}
    log.info(
        "telemetry_started",
        traces=_safe_url(traces.endpoint) if traces and "spans" in names else None,
        metrics=_safe_url(metric_target.endpoint) if metric_target and "metrics" in names else None,
        judge_to_langfuse=_safe_url(judge_to_langfuse.traces_url)
        if judge_to_langfuse is not None and judge_tracer is not None
        else None,
    )

    def before_close() -> None:
        if global_provider is not None and _SWITCH.provider is global_provider:
            _route_global_spans(None)

    return Telemetry(
        parts, judge_tracer=judge_tracer, before_close=before_close, after_close=stop_holding_back
    )


def _traces_part(
    target: ExportTarget, resource: Resource, parts: list[_Part], held: _HeldBack
) -> TracerProvider | None:
    exporter = _span_exporter(target)
    if exporter is None:
        return None
    outage = _Outage("spans", target.endpoint)
    held.route(exporter, ("spans", "traces"), outage)
    watched = _WatchedSpanExporter(exporter, outage)
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    processor = BatchSpanProcessor(watched)
    provider.add_span_processor(processor)
    parts.append(_SpanPart("spans", provider, processor, watched, outage))
    return provider


def _metrics_part(
    target: ExportTarget,
    metrics: Metrics,
    resource: Resource,
    environ: Mapping[str, str],
    parts: list[_Part],
    held: _HeldBack,
) -> None:
    exporter = _metric_exporter(target)
    if exporter is None:
        return
    outage = _Outage("metrics", target.endpoint)
    held.route(exporter, ("metrics",), outage)
    interval_ms = _number(
        _var(environ, "OTEL_METRIC_EXPORT_INTERVAL"),
        DEFAULT_INTERVAL_MS,
        "OTEL_METRIC_EXPORT_INTERVAL",
    )
    export = RegistryExport(
        metrics.registry, exporter, resource, interval_s=interval_ms / 1000, outage=outage
    )
    export.start()
    parts.append(export)


def _judge_part(target: LangfuseOtlp, parts: list[_Part]) -> trace.Tracer:
    exporter = LangfuseSpanExporter(target)
    watched = _WatchedSpanExporter(exporter, exporter.outage)
    resource = Resource(
        {
            "service.name": SERVICE_NAME,
            "service.version": __version__,
            "langfuse.environment": JUDGE_ENVIRONMENT,
            "deployment.environment.name": JUDGE_ENVIRONMENT,
        }
    )
    provider = TracerProvider(resource=resource, sampler=sampling.ALWAYS_ON, shutdown_on_exit=False)
    processor = BatchSpanProcessor(watched)
    provider.add_span_processor(processor)
    parts.append(_SpanPart("judge_generations", provider, processor, watched, exporter.outage))
    return provider.get_tracer(TRACER_NAME, __version__)


# -- the judge's LLM calls: GenAI spans, and Langfuse generations ------------------------------

# The Langfuse tracer and the root of the judged trace in flight in this thread.
_judge_root: ContextVar[tuple[trace.Tracer, trace.Span] | None] = ContextVar(
    "observer_judge_root", default=None
)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


class JudgeTrace:
    """One judged trace in Langfuse (a no-op without a Langfuse tracer)."""

    def __init__(self, root: trace.Span | None) -> None:
        self._root = root

    def done(self, summary: Mapping[str, Any], error: str | None = None) -> None:
        if self._root is None:
            return
        self._root.set_attribute("langfuse.observation.output", _json(dict(summary)))
        if error:
            self._root.set_attribute("langfuse.observation.level", "ERROR")
            self._root.set_attribute("langfuse.observation.status_message", error[:300])
            self._root.set_status(Status(StatusCode.ERROR, error[:300]))


@contextmanager
def judge_trace(langfuse: trace.Tracer | None, judged_trace_id: str) -> Iterator[JudgeTrace]:
    """Around the judging of one trace: with a Langfuse tracer, its LLM calls (`llm_call`)
    become generations of one `observer.judge` trace in environment `observer-judge`."""
    if langfuse is None:
        yield JudgeTrace(None)
        return
    root = langfuse.start_span(
        JUDGE_TRACE_NAME,
        context=otel_context.Context(),  # its own trace, never a child of observer's spans
        attributes={
            "langfuse.trace.name": JUDGE_TRACE_NAME,
            "langfuse.environment": JUDGE_ENVIRONMENT,
            "langfuse.observation.type": "span",
            "langfuse.trace.metadata.judged_trace_id": judged_trace_id,
            "observer.trace_id": judged_trace_id,
        },
    )
    token = _judge_root.set((langfuse, root))
    try:
        yield JudgeTrace(root)
    finally:
        _judge_root.reset(token)
        root.end()


def _server(base_url: str | None) -> dict[str, AttributeValue]:
    if not base_url:
        return {}
    parts = urlsplit(base_url)
    out: dict[str, AttributeValue] = {}
    if parts.hostname:
        out["server.address"] = parts.hostname
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    if port:
        out["server.port"] = port
    return out


class LlmCall:
    """One chat completion, as a GenAI client span and (when on) a Langfuse generation."""

    def __init__(
        self,
        span: trace.Span,
        generation: trace.Span | None,
        prices_per_1k: tuple[float, float],
    ) -> None:
        self._span = span
        self._generation = generation
        self._prices = prices_per_1k

    def _spans(self) -> list[trace.Span]:
        return [self._span] if self._generation is None else [self._span, self._generation]

    def completed(self, response: ChatCompletion) -> None:
        """The response's model, id, finish reason and token usage (and its text, to Langfuse)."""
        if not self._span.is_recording() and self._generation is None:
            return
        attributes: dict[str, AttributeValue] = {"gen_ai.response.model": response.model}
        if response.id:
            attributes["gen_ai.response.id"] = response.id
        reasons = [c.finish_reason for c in response.choices if c.finish_reason]
        if reasons:
            attributes["gen_ai.response.finish_reasons"] = reasons
        usage = response.usage
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens
        for span in self._spans():
            span.set_attributes(attributes)
        if self._generation is None:
            return
        if response.choices:
            content = response.choices[0].message.content
            if content is not None:
                self._generation.set_attribute("langfuse.observation.output", content)
        if usage is not None:
            self._generation.set_attribute(
                "langfuse.observation.usage_details",
                _json({"input": usage.prompt_tokens, "output": usage.completion_tokens}),
            )
            if any(self._prices):
                cost_in = usage.prompt_tokens / 1000 * self._prices[0]
                cost_out = usage.completion_tokens / 1000 * self._prices[1]
                self._generation.set_attribute(
                    "langfuse.observation.cost_details",
                    _json({"input": cost_in, "output": cost_out, "total": cost_in + cost_out}),
                )

    def failed(self, error: BaseException) -> None:
        kind = type(error).__name__
        message = f"{kind}: {error}"[:300]
        for span in self._spans():
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, message))
        if self._generation is not None:
            self._generation.set_attribute("langfuse.observation.level", "ERROR")
            self._generation.set_attribute("langfuse.observation.status_message", message)


@contextmanager
def llm_call(
    *,
    step: str,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    temperature: float,
    max_tokens: int,
    response_format: str,
    base_url: str | None = None,
    prices_per_1k: tuple[float, float] = (0.0, 0.0),
) -> Iterator[LlmCall]:
    """One LLM call of the judge: an `observer.judge_call` span following the GenAI
    semantic conventions (model, tokens, error type; never the text), and inside a
    `judge_trace` with Langfuse on, a generation with input and output in Langfuse.

    An exception leaving the block marks both failed and goes on.
    """
    request: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": model,
        "gen_ai.request.temperature": temperature,
        "gen_ai.request.max_tokens": max_tokens,
        "gen_ai.output.type": "json",
        "observer.judge.step": step,
        **_server(base_url),
    }
    span = _tracer.start_span(JUDGE_CALL_SPAN, kind=SpanKind.CLIENT, attributes=request)
    generation: trace.Span | None = None
    root = _judge_root.get()
    if root is not None:
        langfuse, parent = root
        generation = langfuse.start_span(
            step,
            context=trace.set_span_in_context(parent, otel_context.Context()),
            kind=SpanKind.CLIENT,
            attributes={
                **request,
                "langfuse.observation.type": "generation",
                "langfuse.environment": JUDGE_ENVIRONMENT,
                "langfuse.observation.model.name": model,
                "langfuse.observation.model.parameters": _json(
                    {
                        "temperature": temperature,
                        "max_tokens": max_tokens,
                        "response_format": response_format,
                    }
                ),
                "langfuse.observation.input": _json(list(messages)),
            },
        )
    call = LlmCall(span, generation, prices_per_1k)
    try:
        yield call
    except BaseException as error:
        call.failed(error)
        raise
    finally:
        span.end()
        if generation is not None:
            generation.end()
