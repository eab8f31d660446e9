"""OpenTelemetry: observer's own spans over OTLP; the transport of the judge's calls to Langfuse.

`setup_telemetry()` decides only whether spans are exported: an endpoint is set
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `..._TRACES_ENDPOINT`), `OTEL_SDK_DISABLED` is not
true and `OTEL_TRACES_EXPORTER` is not `none`. Everything else is the SDK's own
reading of the standard variables: the no-argument `OTLPSpanExporter()` (http/protobuf,
or gRPC with `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`) takes endpoint, headers, timeout
and compression; `Resource.create()` and its environment detector take
`OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME` over `service.name=observer`.
The tracer is `Telemetry.tracer`, handed by the composition root to whoever makes
spans; no global provider is set. Metrics are not pushed: `/metrics` is the one
exposition and a collector scrapes it (docs/operating.md, deploy/otel-collector/config.yaml).

With `judge_to_langfuse`, `judge_langfuse` is a Langfuse SDK client over a second,
private TracerProvider whose spans (the judge's generations, observer/judge/tracing.py)
go to Langfuse's OTLP endpoint through `LangfuseSpanExporter`: its own transport, so
the collector's `OTEL_EXPORTER_OTLP_HEADERS` never reach Langfuse and Langfuse's keys
never reach the collector or a log. The SDK keeps one client per public key and
process: one `judge_to_langfuse` setup per process.

Nothing here raises to its caller. An export that fails is logged once per outage
(`telemetry_export_failed`, then `telemetry_export_recovered`; the exporters' own
per-retry warnings are held back), and `shutdown(timeout_s)` returns within its budget
whatever the collector does (the SDK's own shutdown waits out its retries).
"""

from __future__ import annotations

import atexit
import base64
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
import structlog
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from observer import __version__

if TYPE_CHECKING:
    from langfuse import Langfuse

log = structlog.get_logger("observer.telemetry")

SERVICE_NAME = "observer"
TRACER_NAME = "observer"
JUDGE_ENVIRONMENT = "observer-judge"
LANGFUSE_OTLP_PATH = "/api/public/otel/v1/traces"
DEFAULT_TIMEOUT_S = 10.0


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def spans_exported() -> bool:
    """Whether the standard variables ask for observer's spans to be exported."""
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return False
    if _env("OTEL_TRACES_EXPORTER").lower() == "none":
        return False
    return bool(_env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _env("OTEL_EXPORTER_OTLP_ENDPOINT"))


def metrics_asked_for() -> bool:
    """An OTLP endpoint for metrics is set: observer says once that metrics are scraped."""
    return (
        _env("OTEL_SDK_DISABLED").lower() != "true"
        and _env("OTEL_METRICS_EXPORTER").lower() != "none"
        and bool(_env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or _env("OTEL_EXPORTER_OTLP_ENDPOINT"))
    )


def resource() -> Resource:
    """`service.name=observer` and the version, under what the environment says."""
    own = Resource.create({"service.name": SERVICE_NAME, "service.version": __version__})
    return own.merge(OTELResourceDetector().detect())


def _safe_url(url: str) -> str:
    """A URL for a log line: no user info, no query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) if parts.scheme else url


# -- failures logged once per outage -------------------------------------------------------


class Outage:
    """One warning when exports start failing, one info when they work again."""

    def __init__(self, what: str, endpoint: str) -> None:
        self.what = what
        self.endpoint = _safe_url(endpoint)
        self._lock = threading.Lock()
        self.down = False
        self.reason: str | None = None  # the exporter's own words, held back

    def failed(self, reason: str | None = None) -> None:
        with self._lock:
            if self.down:
                return
            self.down = True
        reason = reason or self.reason or "the exporter reported a failure"
        log.warning(
            "telemetry_export_failed", what=self.what, endpoint=self.endpoint, reason=reason
        )

    def succeeded(self) -> None:
        with self._lock:
            if not self.down:
                return
            self.down = False
            self.reason = None
        log.info("telemetry_export_recovered", what=self.what, endpoint=self.endpoint)


class _HeldBack(logging.Filter):
    """The SDK exporter's warnings (one per retry, per batch) held back; the first of an
    outage becomes, at once, the reason of its one `telemetry_export_failed`."""

    def __init__(self, exporter: object, outage: Outage) -> None:
        super().__init__()
        self._outage = outage
        self._loggers = [
            logging.getLogger(cls.__module__)
            for cls in type(exporter).__mro__
            if cls.__module__.startswith("opentelemetry.exporter")
        ]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        self._outage.failed(record.getMessage()[:300])  # at once, not after the retries
        return False

    def install(self) -> Callable[[], None]:
        """Hold back from now on; the returned function stops it."""
        for logger in self._loggers:
            logger.addFilter(self)

        def remove() -> None:
            for logger in self._loggers:
                logger.removeFilter(self)

        return remove


class _Watched(SpanExporter):
    """An exporter whose failures are reported once per outage; shutdown is idempotent."""

    def __init__(self, inner: SpanExporter, outage: Outage) -> None:
        self._inner = inner
        self.outage = outage
        self._closed = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception as error:  # an exporter bug must not kill the batch worker
            self.outage.failed(f"{type(error).__name__}: {error}"[:300])
            return SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.outage.succeeded()
        else:
            self.outage.failed()
        return result

    def shutdown(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


# -- the judge's generations to Langfuse ---------------------------------------------------


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


class LangfuseSpanExporter(SpanExporter):
    """Spans to Langfuse's OTLP endpoint: HTTP protobuf (the SDK's encoder), Basic auth.

    Its own transport, so no `OTEL_EXPORTER_OTLP_*` variable (meant for the
    collector) applies here. Sends `x-langfuse-ingestion-version: 4`, as the SDK's own
    exporter does (`langfuse/_client/span_processor.py`): Langfuse writes such spans
    straight to its events table, readable at once (without it, up to 15 minutes
    later). One retry after a network error, a 5xx or a 429.
    """

    def __init__(self, target: LangfuseOtlp, client: httpx.Client | None = None) -> None:
        self.outage = Outage("judge_generations", target.traces_url)
        token = base64.b64encode(f"{target.public_key}:{target.secret_key}".encode()).decode()
        self.url = target.traces_url
        self._client = client or httpx.Client(timeout=target.timeout_s)
        self._headers = {
            "Authorization": f"Basic {token}",
            "Content-Type": "application/x-protobuf",
            "User-Agent": f"observer/{__version__}",
            "x-langfuse-ingestion-version": "4",  # Langfuse v4's direct write path
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
                    return SpanExportResult.SUCCESS
                reason = f"Langfuse answered {response.status_code}"
                if response.status_code < 500 and response.status_code != 429:
                    break
            if attempt == 0 and self._closing.wait(1.0):
                break
        self.outage.reason = reason
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._closing.set()
        self._client.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


# -- Telemetry: what setup built, flushed and shut down within a budget ----------------------


class _Part:
    """One TracerProvider with its batch processor and watched exporter."""

    def __init__(
        self,
        name: str,
        provider: TracerProvider,
        exporter: _Watched,
        then: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = name
        self.provider = provider
        self.exporter = exporter
        self._then = then  # after the provider: the Langfuse client's own shutdown

    def flush(self, timeout_s: float) -> bool:
        return self.provider.force_flush(int(timeout_s * 1000)) and not self.exporter.outage.down

    def close(self, timeout_s: float) -> bool:
        self.provider.shutdown()  # the batch worker's last export, then the exporter
        self._then()
        return not self.exporter.outage.down

    def abort(self) -> None:
        self.exporter.shutdown()  # ends the exporter's retries at once


def _spans_part(exporter: SpanExporter, outage: Outage) -> _Part:
    watched = _Watched(exporter, outage)
    provider = TracerProvider(resource=resource(), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(watched))
    return _Part("spans", provider, watched)


def _judge_part(target: LangfuseOtlp) -> tuple[_Part, Langfuse]:
    """The Langfuse SDK's client over a private provider, exporting through our exporter
    (the SDK adds its span processor to the provider and uses `span_exporter` as is)."""
    from langfuse import Langfuse

    exporter = LangfuseSpanExporter(target)
    watched = _Watched(exporter, exporter.outage)
    judge_resource = Resource(
        {
            "service.name": SERVICE_NAME,
            "service.version": __version__,
            "langfuse.environment": JUDGE_ENVIRONMENT,
            "deployment.environment.name": JUDGE_ENVIRONMENT,
        }
    )
    provider = TracerProvider(
        resource=judge_resource, sampler=sampling.ALWAYS_ON, shutdown_on_exit=False
    )
    client = Langfuse(
        public_key=target.public_key,
        secret_key=target.secret_key,
        base_url=target.base_url,
        timeout=max(1, int(target.timeout_s)),
        environment=JUDGE_ENVIRONMENT,
        tracer_provider=provider,
        span_exporter=watched,
    )
    return _Part("judge_generations", provider, watched, client.shutdown), client


class Telemetry:
    """What `setup_telemetry` built. `tracer` makes observer's spans (non-recording when
    nothing is exported, and after shutdown); `judge_langfuse` (None unless
    judge_to_langfuse) makes the judge's generations in Langfuse.

    `force_flush` and `shutdown` never raise and return within their budget (True:
    everything went out); `shutdown` is idempotent.
    """

    def __init__(
        self,
        parts: Sequence[_Part] = (),
        after_close: Callable[[], None] = lambda: None,
        judge_langfuse: Langfuse | None = None,
    ) -> None:
        self._parts = list(parts)
        self._after_close = after_close
        self._lock = threading.Lock()
        self._closed = False
        self._closed_ok = True
        spans = next((part.provider for part in self._parts if part.name == "spans"), None)
        self._tracer = spans.get_tracer(TRACER_NAME, __version__) if spans else None
        self.judge_langfuse = judge_langfuse
        if self._parts:
            atexit.register(self._at_exit)

    @property
    def tracer(self) -> trace.Tracer:
        if self._tracer is None or self._closed:
            return _NOOP
        return self._tracer

    @property
    def enabled(self) -> bool:
        """Something is exported (spans or judge generations)."""
        return bool(self._parts)

    @property
    def parts(self) -> list[str]:
        return [part.name for part in self._parts]

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export the spans ended so far."""
        if not self._parts or self._closed:
            return not self._parts
        return self._run("flush", timeout_s)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Flush the spans, then stop; spans started later are no-ops."""
        with self._lock:
            if self._closed:
                return self._closed_ok
            self._closed = True
        if not self._parts:
            return True
        atexit.unregister(self._at_exit)
        self._closed_ok = self._run("close", timeout_s)
        return self._closed_ok

    def _at_exit(self) -> None:
        self.shutdown(2.0)

    def _run(self, action: Literal["flush", "close"], timeout_s: float) -> bool:
        """Every part's flush or close in a thread of its own; returns at the deadline.

        The exporters' warnings stay held back until the last close is done, late or not.
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        results: dict[str, bool] = {}
        left = [len(self._parts)]
        lock = threading.Lock()

        def work(part: _Part) -> None:
            try:
                do = part.flush if action == "flush" else part.close
                results[part.name] = do(max(0.0, deadline - time.monotonic()))
            except Exception:
                log.exception("telemetry_flush_failed", part=part.name)
                results[part.name] = False
            with lock:
                left[0] -= 1
                if left[0] == 0 and action == "close":
                    self._after_close()

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


_NOOP = trace.NoOpTracer()


def _span_exporter() -> SpanExporter | None:
    """The SDK's OTLP span exporter, built from the standard variables by the SDK itself."""
    protocol = _env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol.lower() == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.error(
                "telemetry_protocol_unavailable",
                protocol="grpc",
                detail="install opentelemetry-exporter-otlp-proto-grpc, or set "
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf; spans are not exported",
            )
            return None
        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter()


def setup_telemetry(*, judge_to_langfuse: LangfuseOtlp | None = None) -> Telemetry:
    """Build what the variables ask for; a no-op `Telemetry` when they ask for nothing.

    `judge_to_langfuse` is observer's own setting: `OTEL_SDK_DISABLED` does not turn
    it off. Never raises: a part that cannot be built is logged and left out.
    """
    parts: list[_Part] = []
    stop_holding_back: list[Callable[[], None]] = []
    endpoint = None
    if spans_exported():
        try:
            exporter = _span_exporter()
            if exporter is not None:
                endpoint = str(getattr(exporter, "_endpoint", "") or "")
                outage = Outage("spans", endpoint)
                stop_holding_back.append(_HeldBack(exporter, outage).install())
                parts.append(_spans_part(exporter, outage))
        except Exception:
            log.exception("telemetry_setup_failed", signal="traces")
    judge_langfuse = None
    if judge_to_langfuse is not None:
        try:
            judge_part, judge_langfuse = _judge_part(judge_to_langfuse)
            parts.append(judge_part)
        except Exception:
            log.exception("telemetry_setup_failed", signal="judge_generations")
    if not parts:
        return Telemetry()
    log.info(
        "telemetry_started",
        traces=_safe_url(endpoint) if endpoint else None,
        metrics="not pushed: scrape /metrics (deploy/otel-collector/config.yaml)"
        if metrics_asked_for()
        else None,
        judge_to_langfuse=_safe_url(judge_to_langfuse.traces_url)
        if judge_to_langfuse and judge_langfuse
        else None,
    )

    def after_close() -> None:
        for stop in stop_holding_back:
            stop()

    return Telemetry(parts, after_close, judge_langfuse)
