"""The two ways to serve observer's metrics, measured: `python bench/metrics_paths.py`.

(a) the OpenTelemetry metrics API, `/metrics` from `opentelemetry-exporter-prometheus`'s
    reader (and a periodic OTLP reader beside it);
(b) prometheus-client, as observer declares them (`observer/telemetry/metrics.py`),
    `/metrics` from its own exposition, the collector scraping it.

Prints per path: the cost of one recording (a labelled counter increment, a
histogram observation), the cost of one scrape of the full set (every family of
`Metrics` after the golden test's updates, replayed into OTel instruments for (a)),
and whether the text is the one `/metrics` serves today. (a) needs
`pip install opentelemetry-exporter-prometheus`; without it only (b) is measured.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.telemetry.test_metrics_golden import updated  # noqa: E402

N = 200_000


def per_call(work: Callable[[], object], n: int = N) -> float:
    started = time.perf_counter()
    for _ in range(n):
        work()
    return (time.perf_counter() - started) / n


def prometheus_client_path() -> dict[str, Any]:
    metrics = updated()
    counter = metrics.traces.labels(outcome="scored")
    histogram = metrics.confidence.labels(environment="production", query_type="howto")
    text = generate_latest(metrics.registry)
    return {
        "record counter (labels().inc())": per_call(
            lambda: metrics.traces.labels(outcome="scored").inc()
        ),
        "record counter (bound child)": per_call(counter.inc),
        "record histogram (bound child)": per_call(lambda: histogram.observe(0.8)),
        "scrape": per_call(lambda: generate_latest(metrics.registry), 500),
        "text bytes": len(text),
        "same text as today": True,
    }


def otel_path() -> dict[str, Any] | None:
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
    except ImportError:
        return None
    from opentelemetry.sdk.metrics import MeterProvider

    registry = CollectorRegistry()
    reader = PrometheusMetricReader()
    # The reader registers itself in prometheus-client's global registry; move it to ours.
    from prometheus_client import REGISTRY

    REGISTRY.unregister(reader._collector)
    registry.register(reader._collector)
    meter = MeterProvider(metric_readers=[reader]).get_meter("observer")
    source = updated()
    for family in source.registry.collect():
        if family.type == "counter":
            counter = meter.create_counter(family.name + "_total", description=family.documentation)
            for s in family.samples:
                if s.name == family.name + "_total":
                    counter.add(s.value, dict(s.labels))
        elif family.type == "gauge":
            gauge = meter.create_gauge(family.name, description=family.documentation)
            for s in family.samples:
                gauge.set(s.value, dict(s.labels))
        elif family.type == "histogram":
            bounds = sorted(
                {float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")}
                - {float("inf")}
            )
            hist = meter.create_histogram(
                family.name,
                description=family.documentation,
                explicit_bucket_boundaries_advisory=bounds,
            )
            for s in family.samples:
                if s.name == family.name + "_sum" and s.value:
                    labels = dict(s.labels)
                    hist.record(s.value, labels)
    counter = meter.create_counter("bench_traces_total")
    histogram = meter.create_histogram("bench_confidence_ratio")
    text = generate_latest(registry)
    today = generate_latest(source.registry)
    scrape = per_call(lambda: generate_latest(registry), 500)
    registry.unregister(reader._collector)  # back where the reader's shutdown looks for it
    REGISTRY.register(reader._collector)
    return {
        "record counter (labels().inc())": per_call(lambda: counter.add(1, {"outcome": "scored"})),
        "record counter (bound child)": float("nan"),
        "record histogram (bound child)": per_call(
            lambda: histogram.record(0.8, {"environment": "production", "query_type": "howto"})
        ),
        "scrape": scrape,
        "text bytes": len(text),
        "same text as today": text == today,
        "_text": text.decode(),
    }


def show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value * 1e6:.2f} µs" if value == value else "-"
    return str(value)


def main() -> None:
    b = prometheus_client_path()
    a = otel_path()
    rows = [k for k in b]
    print(f"{'':34} {'(b) prometheus-client':>22} {'(a) OTel API + reader':>22}")
    for key in rows:
        av = a[key] if a else "not installed"
        print(f"{key:34} {show(b[key]):>22} {show(av):>22}")
    if a and len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(a["_text"])


if __name__ == "__main__":
    main()
