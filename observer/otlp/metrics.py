"""The OTLP receiver's own metrics, declared beside what they measure
(docs/daemon.md#the-event-path): registered when the receiver runs."""

from __future__ import annotations

from observer.telemetry.metrics import Declarations, counter, gauge


class OtlpMetrics(Declarations):
    """The OTLP receiver's (docs/daemon.md#the-event-path), registered when it runs."""

    # fmt: off
    requests = counter("observer_otlp_requests_total",
        "Trace export requests by result (throttled: 429, unavailable: 503; the sender retries "
        "both after Retry-After)", ("result",),
        zero="accepted throttled unavailable unauthorized bad_request too_large unsupported")
    spans = counter("observer_otlp_spans_total", "Spans received (a span sent again counts once)")
    handed = counter("observer_otlp_traces_settled_total",
        "Traces handed to scoring by reason (whole: root in, every parent in, quiet for "
        "root_grace_s; settled: quiet for settle_s; max_traces, max_bytes: settled early, "
        "the assembly was full)",
        ("reason",), zero="settled max_traces max_bytes")
    dropped = counter("observer_otlp_traces_dropped_total",
        "Traces not scored from here by reason (no_root; late_forgotten, partial: left to the "
        "poller's backstop)", ("reason",), zero="no_root late_forgotten partial")
    held_traces = gauge("observer_otlp_assembly_traces", "Traces held: assembling, due or kept")
    held_bytes = gauge("observer_otlp_assembly_bytes", "Span bytes held (protobuf size)")
    # fmt: on
