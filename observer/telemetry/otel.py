"""OpenTelemetry: observer's own spans over OTLP; the transport of the judge's calls to Langfuse.

observer only decides whether spans are exported (`asked_for`); the SDK reads the rest
of the standard variables itself: `OTLPSpanExporter()` (http/protobuf, or gRPC) takes
endpoint, headers, timeout and compression, `Resource.create()` and its environment
detector `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME`. `Telemetry.tracer` is
handed by the composition root to what makes spans; no global provider is set.
Metrics are not pushed: a collector scrapes `/metrics` (docs/decisions.md#telemetry).

With `judge_to_langfuse`, `Telemetry.judge_langfuse` is a Langfuse SDK client over a
private TracerProvider whose spans go through `LangfuseSpanExporter`, a transport of
our own that reads no `OTEL_EXPORTER_OTLP_*` variable: the SDK's OTLP exporter would
merge `OTEL_EXPORTER_OTLP_HEADERS`, meant for the collector, into its requests to
Langfuse. The SDK keeps one client per public key and process: one such setup a process.

Nothing here raises. A failing export is logged once per outage
(`telemetry_export_failed`, then `telemetry_export_recovered`; the SDK exporter's
per-retry warnings held back), and `shutdown(timeout_s)` keeps its budget whatever the
collector does (the SDK's own shutdown waits out its retries).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
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

SERVICE_NAME = TRACER_NAME = "observer"
JUDGE_ENVIRONMENT = "observer-judge"
LANGFUSE_OTLP_PATH = "/api/public/otel/v1/traces"
_NOOP = trace.NoOpTracer()


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def asked_for(signal: str) -> bool:
    """The standard variables ask for `signal` ("traces", "metrics") over OTLP."""
    upper = signal.upper()
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return False
    if _env(f"OTEL_{upper}_EXPORTER").lower() == "none":
        return False
    return bool(_env(f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT") or _env("OTEL_EXPORTER_OTLP_ENDPOINT"))


def resource() -> Resource:
    """`service.name=observer` and the version, under what the environment says."""
    own = Resource.create({"service.name": SERVICE_NAME, "service.version": __version__})
    return own.merge(OTELResourceDetector().detect())


def _safe_url(url: str) -> str:
    """A URL for a log line: no user info, no query."""
    parts = urlsplit(url)
    netloc = f"{parts.hostname or ''}:{parts.port}" if parts.port else parts.hostname or ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) if parts.scheme else url


class _Watched(SpanExporter):
    """An exporter whose failures are logged once per outage; exceptions become failures
    (the batch worker must not die); shutdown is idempotent."""

    def __init__(
        self,
        inner: SpanExporter,
        what: str,
        endpoint: str,
        reason: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._inner = inner
        self.what = what
        self.endpoint = _safe_url(endpoint)
        self._reason = reason
        self._lock = threading.Lock()
        self.down = False
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception as error:
            self.failed(f"{type(error).__name__}: {error}"[:300])
            return SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self._down(False)
        else:
            self.failed(self._reason() or "the exporter reported a failure")
        return result

    def failed(self, reason: str) -> None:
        self._down(True, reason)

    def _down(self, down: bool, reason: str = "") -> None:
        with self._lock:
            changed, self.down = self.down != down, down
        where = {"what": self.what, "endpoint": self.endpoint}
        if changed and down:
            log.warning("telemetry_export_failed", **where, reason=reason)
        elif changed:
            log.info("telemetry_export_recovered", **where)

    def shutdown(self) -> None:
        with self._lock:
            closed, self._closed = self._closed, True
        if not closed:
            self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _HeldBack(logging.Filter):
    """The SDK exporter's own warnings (one per retry, per batch) held back: the first of
    an outage becomes, at once, the reason of its one `telemetry_export_failed`."""

    def __init__(self, watched: _Watched, exporter: SpanExporter) -> None:
        super().__init__()
        self._watched = watched
        self._loggers = [
            logging.getLogger(cls.__module__)
            for cls in type(exporter).__mro__
            if cls.__module__.startswith("opentelemetry.exporter")
        ]
        for logger in self._loggers:
            logger.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        self._watched.failed(record.getMessage()[:300])
        return False

    def remove(self) -> None:
        for logger in self._loggers:
            logger.removeFilter(self)


@dataclass(frozen=True)
class LangfuseOtlp:
    """Where the judge's generations go: the Langfuse project observer reads from."""

    base_url: str
    public_key: str
    secret_key: str = field(repr=False)
    timeout_s: float = 10.0

    @property
    def traces_url(self) -> str:
        return self.base_url.rstrip("/") + LANGFUSE_OTLP_PATH


class LangfuseSpanExporter(SpanExporter):
    """Spans to Langfuse's OTLP endpoint: HTTP protobuf (the SDK's encoder), Basic auth.

    Sends `x-langfuse-ingestion-version: 4`, as the Langfuse SDK's own exporter does:
    Langfuse v4 then writes the spans straight away, readable at once (without it, up to
    15 minutes later). One retry after a network error, a 5xx or a 429.
    """

    def __init__(self, target: LangfuseOtlp) -> None:
        self.url = target.traces_url
        self._client = httpx.Client(
            auth=(target.public_key, target.secret_key),
            headers={
                "Content-Type": "application/x-protobuf",
                "User-Agent": f"observer/{__version__}",
                "x-langfuse-ingestion-version": "4",
            },
            timeout=target.timeout_s,
        )
        self._closing = threading.Event()
        self.reason: str | None = None  # why the last export failed

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closing.is_set():
            return SpanExportResult.FAILURE
        body = encode_spans(spans).SerializeToString()
        for attempt in range(2):
            try:
                response = self._client.post(self.url, content=body)
            except httpx.HTTPError as error:
                self.reason = f"{type(error).__name__}: {error}"[:300]
            else:
                if response.is_success:
                    return SpanExportResult.SUCCESS
                self.reason = f"Langfuse answered {response.status_code}"
                if response.status_code < 500 and response.status_code != 429:
                    break
            if attempt == 0 and self._closing.wait(1.0):
                break
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._closing.set()
        self._client.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


@dataclass
class _Part:
    """A TracerProvider, its watched exporter, and what to do once it is shut down."""

    name: str
    provider: TracerProvider
    exporter: _Watched
    then: Callable[[], None] = lambda: None

    def close(self) -> bool:
        self.provider.shutdown()  # the batch worker's last export, then the exporter
        self.then()
        return not self.exporter.down


class Telemetry:
    """What `setup_telemetry` built. `tracer` makes observer's spans (non-recording when
    nothing is exported, and after shutdown); `judge_langfuse` (None unless
    judge_to_langfuse) makes the judge's generations in Langfuse.

    `force_flush` and `shutdown` never raise and return within their budget (True:
    everything went out); `shutdown` is idempotent.
    """

    def __init__(self, parts: Sequence[_Part] = (), judge_langfuse: Langfuse | None = None) -> None:
        self._parts = list(parts)
        self.judge_langfuse = judge_langfuse
        spans = next((part.provider for part in self._parts if part.name == "spans"), None)
        self._tracer = spans.get_tracer(TRACER_NAME, __version__) if spans else None
        self._lock = threading.Lock()
        self._closed: bool | None = None  # once shut down: whether everything went out
        if self._parts:
            atexit.register(self.shutdown, 2.0)

    @property
    def tracer(self) -> trace.Tracer:
        return self._tracer if self._tracer is not None and self._closed is None else _NOOP

    @property
    def enabled(self) -> bool:
        """Something is exported (spans or judge generations)."""
        return bool(self._parts)

    @property
    def parts(self) -> list[str]:
        return [part.name for part in self._parts]

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export the spans ended so far."""
        if self._closed is not None:
            return not self._parts
        ms = int(timeout_s * 1000)
        return self._run(lambda p: p.provider.force_flush(ms) and not p.exporter.down, timeout_s)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Flush the spans, then stop; spans started later are no-ops."""
        with self._lock:
            if self._closed is not None:
                return self._closed
            self._closed = True
        if self._parts:
            atexit.unregister(self.shutdown)
            self._closed = self._run(_Part.close, timeout_s, abort_late=True)
        return self._closed

    def _run(
        self, work: Callable[[_Part], bool], timeout_s: float, *, abort_late: bool = False
    ) -> bool:
        """`work` on every part, each in a daemon thread of its own, until the deadline;
        a part still at work then has its exporter shut down (its retries end at once)."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        results: dict[str, bool] = {}

        def run(part: _Part) -> None:
            try:
                results[part.name] = work(part)
            except Exception:
                log.exception("telemetry_flush_failed", part=part.name)

        threads = [
            (part, threading.Thread(target=run, args=(part,), name="observer-otel", daemon=True))
            for part in self._parts
        ]
        for _part, thread in threads:
            thread.start()
        late = []
        for part, thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                late.append(part.name)
                if abort_late:
                    part.exporter.shutdown()
        if late:
            log.warning("telemetry_flush_incomplete", parts=late, timeout_s=timeout_s)
        return not late and len(results) == len(self._parts) and all(results.values())


def _spans_part() -> _Part:
    """The SDK's OTLP span exporter, built by the SDK from the standard variables."""
    protocol = _env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
    exporter: SpanExporter
    if protocol.lower() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )

        exporter = HttpSpanExporter()
    watched = _Watched(exporter, "spans", str(getattr(exporter, "_endpoint", "")))
    held = _HeldBack(watched, exporter)
    provider = TracerProvider(resource=resource(), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(watched))
    # The exporter's warnings stay held back until its last export is done, late or not.
    return _Part("spans", provider, watched, held.remove)


def _judge_part(target: LangfuseOtlp) -> tuple[_Part, Langfuse]:
    """The Langfuse SDK's client over a private provider; the SDK adds its span processor
    to the provider and sends through our exporter (`span_exporter`) as it is."""
    from langfuse import Langfuse

    exporter = LangfuseSpanExporter(target)
    watched = _Watched(exporter, "judge_generations", target.traces_url, lambda: exporter.reason)
    attributes = {"service.name": SERVICE_NAME, "service.version": __version__}
    for key in ("langfuse.environment", "deployment.environment.name"):
        attributes[key] = JUDGE_ENVIRONMENT
    provider = TracerProvider(
        resource=Resource(attributes), sampler=sampling.ALWAYS_ON, shutdown_on_exit=False
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


def setup_telemetry(*, judge_to_langfuse: LangfuseOtlp | None = None) -> Telemetry:
    """Build what the variables ask for; a no-op `Telemetry` when they ask for nothing.

    `judge_to_langfuse` is observer's own setting. Never raises: a part that cannot be
    built is logged and left out.
    """
    parts: list[_Part] = []
    judge_langfuse = None
    try:
        if asked_for("traces"):
            parts.append(_spans_part())
    except Exception:
        log.exception("telemetry_setup_failed", part="spans")
    try:
        if judge_to_langfuse is not None:
            judge_part, judge_langfuse = _judge_part(judge_to_langfuse)
            parts.append(judge_part)
    except Exception:
        log.exception("telemetry_setup_failed", part="judge_generations")
    if not parts:
        return Telemetry()
    log.info(
        "telemetry_started",
        traces=parts[0].exporter.endpoint if parts[0].name == "spans" else None,
        metrics="not pushed: scrape /metrics" if asked_for("metrics") else None,
        judge_to_langfuse=parts[-1].exporter.endpoint if judge_langfuse else None,
    )
    return Telemetry(parts, judge_langfuse)
