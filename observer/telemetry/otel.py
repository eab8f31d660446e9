"""OpenTelemetry: observer's own spans over OTLP; the transport of the judge's calls to Langfuse.

observer only decides whether spans are exported (`asked_for`): the SDK's
`OTLPSpanExporter()` and `Resource.create()` read the other standard variables. No global
provider is set; metrics are not pushed, a collector scrapes `/metrics`. Nothing here
raises. Three things are ours on purpose (docs/decisions.md#telemetry): the judge's spans
go to Langfuse through `LangfuseSpanExporter`, as the SDK's exporter would merge
`OTEL_EXPORTER_OTLP_HEADERS`, meant for the collector, into its requests to Langfuse;
`force_flush` and `shutdown` keep their budget, each provider in a thread of its own and
its exporter aborted at the deadline, as the SDK's own shutdown waits out the exporter's
retries (9.4 s on a 2 s budget against a dead collector); and an outage is logged once
(`telemetry_export_failed`, then `telemetry_export_recovered`), not once per retry.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx
import structlog
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Sampler

from observer import USER_AGENT, __version__
from observer.background import DaemonThreads, Deadline
from observer.urls import without_credentials

if TYPE_CHECKING:
    from langfuse import Langfuse

log = structlog.get_logger("observer.telemetry")

SERVICE_NAME = TRACER_NAME = "observer"
JUDGE_ENVIRONMENT = "observer-judge"
LANGFUSE_OTLP_PATH = "/api/public/otel/v1/traces"
_OWN = {"service.name": SERVICE_NAME, "service.version": __version__}
_NOOP = trace.NoOpTracer()


def _env(name: str) -> str:
    """A standard variable, stripped and lower-cased: observer only tests them."""
    return os.environ.get(name, "").strip().lower()


def asked_for(signal: str) -> bool:
    """The standard variables ask for `signal` ("traces", "metrics") over OTLP."""
    upper = signal.upper()
    if _env("OTEL_SDK_DISABLED") == "true" or _env(f"OTEL_{upper}_EXPORTER") == "none":
        return False
    return bool(_env(f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT") or _env("OTEL_EXPORTER_OTLP_ENDPOINT"))


def resource() -> Resource:
    """`service.name=observer` and the version, under what the environment says."""
    return Resource.create(_OWN).merge(OTELResourceDetector().detect())


class _Part(SpanExporter):
    """A TracerProvider of ours and, wrapped, the exporter its spans go through: shut down
    once (by the provider, or at the deadline); an exception from it is a failed export."""

    def __init__(
        self, name: str, exporter: SpanExporter, resource: Resource, sampler: Sampler | None = None
    ) -> None:
        self.name = name
        self.endpoint = without_credentials(str(getattr(exporter, "_endpoint", "")))
        self.provider = TracerProvider(resource=resource, sampler=sampler, shutdown_on_exit=False)
        self.langfuse: Langfuse | None = None  # the judge's client, closed after the provider
        self.down = self._closed = False
        self._inner = exporter
        self._lock = threading.Lock()
        # The SDK exporter's warnings (one per retry, per batch) are held back until the part
        # is closed: the first of an outage is the reason of its one log line.
        self._loggers = [
            logging.getLogger(cls.__module__)
            for cls in type(exporter).__mro__
            if cls.__module__.startswith("opentelemetry.exporter")
        ]
        for logger in self._loggers:
            logger.addFilter(self._held_back)

    def _held_back(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            self._set_down(True, record.getMessage()[:300])
        return record.levelno < logging.WARNING

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
            # LangfuseSpanExporter says why in `reason`; the SDK's said it in its warnings.
            reason = getattr(self._inner, "reason", None) or "the exporter reported a failure"
        except Exception as error:
            result, reason = SpanExportResult.FAILURE, f"{type(error).__name__}: {error}"[:300]
        self._set_down(result is not SpanExportResult.SUCCESS, reason)
        return result

    def _set_down(self, down: bool, reason: str) -> None:
        with self._lock:
            changed, self.down = self.down != down, down
        where = {"what": self.name, "endpoint": self.endpoint}
        if changed and down:
            log.warning("telemetry_export_failed", **where, reason=reason)
        elif changed:
            log.info("telemetry_export_recovered", **where)

    def shutdown(self) -> None:
        with self._lock:
            closed, self._closed = self._closed, True
        if not closed:
            self._inner.shutdown()

    def close(self) -> bool:
        self.provider.shutdown()  # the batch worker's last export, then the exporter's shutdown
        for logger in self._loggers:
            logger.removeFilter(self._held_back)
        if self.langfuse is not None:
            self.langfuse.shutdown()
        return not self.down


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
    """Spans to Langfuse's OTLP endpoint, as protobuf, with one retry after a network error,
    a 5xx or a 429. `x-langfuse-ingestion-version: 4`, as the Langfuse SDK's own exporter
    sends: Langfuse v4 then writes the spans at once (without it, up to 15 minutes later)."""

    def __init__(self, target: LangfuseOtlp) -> None:
        self._endpoint = target.traces_url
        self._client = httpx.Client(
            auth=(target.public_key, target.secret_key),
            headers={
                "Content-Type": "application/x-protobuf",
                "User-Agent": USER_AGENT,
                "x-langfuse-ingestion-version": "4",
            },
            timeout=target.timeout_s,
        )
        self._closing = threading.Event()
        self.reason: str | None = None  # why the last export failed

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        body = encode_spans(spans).SerializeToString()
        for pause_s in (0.0, 1.0):  # before each of the two attempts; none once shut down
            if self._closing.wait(pause_s):
                break
            try:
                response = self._client.post(self._endpoint, content=body)
            except httpx.HTTPError as error:
                self.reason = f"{type(error).__name__}: {error}"[:300]
                continue
            if response.is_success:
                return SpanExportResult.SUCCESS
            self.reason = f"Langfuse answered {response.status_code}"
            if response.status_code < 500 and response.status_code != 429:
                break
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._closing.set()
        self._client.close()


def _spans_part() -> _Part:
    """The SDK's OTLP span exporter (http/protobuf, or gRPC), built from the variables."""
    protocol = _env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
    kind = "grpc" if protocol == "grpc" else "http"
    module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{kind}.trace_exporter")
    part = _Part("spans", module.OTLPSpanExporter(), resource())
    part.provider.add_span_processor(BatchSpanProcessor(part))
    return part


def _judge_part(target: LangfuseOtlp) -> _Part:
    """The Langfuse SDK's client over the part's provider: the SDK adds its span processor,
    which sends through the part. The SDK keeps one client per public key and process."""
    from langfuse import Langfuse

    attributes = {**_OWN, "langfuse.environment": JUDGE_ENVIRONMENT}
    attributes["deployment.environment.name"] = JUDGE_ENVIRONMENT
    # Always sampled: OTEL_TRACES_SAMPLER is for observer's own spans.
    part = _Part("judge_generations", LangfuseSpanExporter(target), Resource(attributes), ALWAYS_ON)
    part.langfuse = Langfuse(
        public_key=target.public_key,
        secret_key=target.secret_key,
        base_url=target.base_url,
        timeout=max(1, int(target.timeout_s)),
        environment=JUDGE_ENVIRONMENT,
        tracer_provider=part.provider,
        span_exporter=part,
    )
    return part


class Telemetry:
    """What the variables and `judge_to_langfuse` ask for (a part that cannot be built is
    logged and left out): `tracer` makes observer's spans (non-recording when nothing is
    exported, and after shutdown), `judge_langfuse` the judge's generations."""

    def __init__(self, *, judge_to_langfuse: LangfuseOtlp | None = None) -> None:
        wanted = {"spans": _spans_part} if asked_for("traces") else {}
        if judge_to_langfuse is not None:
            wanted["judge_generations"] = lambda: _judge_part(judge_to_langfuse)
        self._parts: list[_Part] = []
        for name, build in wanted.items():
            try:
                self._parts.append(build())
            except Exception:
                log.exception("telemetry_setup_failed", part=name)
        self.parts = [part.name for part in self._parts]
        self.enabled = bool(self._parts)  # something is exported (spans or generations)
        spans = next((part.provider for part in self._parts if part.name == "spans"), None)
        self.tracer: trace.Tracer = spans.get_tracer(TRACER_NAME, __version__) if spans else _NOOP
        self.judge_langfuse = next((p.langfuse for p in self._parts if p.langfuse), None)
        self._lock = threading.Lock()
        self._closed: bool | None = None  # once shut down: whether everything went out
        if self._parts:
            atexit.register(self.shutdown, 2.0)
            where = {part.name: part.endpoint for part in self._parts}
            log.info(
                "telemetry_started",
                traces=where.get("spans"),
                metrics="not pushed: scrape /metrics" if asked_for("metrics") else None,
                judge_to_langfuse=where.get("judge_generations"),
            )

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export the spans ended so far; True when everything went out."""
        if self._closed is not None:
            return not self._parts
        ms = int(timeout_s * 1000)
        return self._run(lambda part: part.provider.force_flush(ms) and not part.down, timeout_s)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Flush the spans, then stop; spans started later are no-ops. Idempotent."""
        with self._lock:
            if self._closed is not None:
                return self._closed
            self._closed, self.tracer = True, _NOOP
        atexit.unregister(self.shutdown)
        self._closed = self._run(_Part.close, timeout_s, abort=True)
        return self._closed

    def _run(self, work: Callable[[_Part], bool], timeout_s: float, *, abort: bool = False) -> bool:
        """`work` on every part, each in a daemon thread, until the deadline; with `abort`,
        a part still at work then has its exporter shut down."""
        pool = DaemonThreads()
        running = {part: pool.submit(work, part) for part in self._parts}
        pool.join(Deadline.within(timeout_s))
        late = [part for part, done in running.items() if not done.done()]
        for part in late if abort else ():
            part.shutdown()  # its retries end at once
        for part, done in running.items():
            if done.done() and done.exception() is not None:
                log.error("telemetry_flush_failed", part=part.name, exc_info=done.exception())
        if late:
            log.warning(
                "telemetry_flush_incomplete", parts=[p.name for p in late], timeout_s=timeout_s
            )
        return not late and all(d.exception() is None and d.result() for d in running.values())
