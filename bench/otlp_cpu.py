"""The event path's CPU per trace, without the network's noise: what one process can score.

    .venv/bin/python bench/otlp_cpu.py                     # 2,000 traces, 25 per export
    .venv/bin/python bench/otlp_cpu.py --profile           # and where the time goes

One answer (a root SPAN, a RETRIEVER with two sources, a GENERATION citing them) is traced
once with the real Langfuse SDK 5 and encoded as its exporter encodes it (OTLP protobuf);
`--traces` copies of it under fresh trace and span ids are grouped `--per-export` to a
body, as the SDK's batch processor groups them. The receiver is built as `observer run`
builds it (`app.build` in mode "solo": the pipeline's recorder, the state file in a
temporary directory, the alert summaries), its clock injected. Timed on this thread's CPU
clock (`time.thread_time`, so other processes on the machine do not count):

Logs are rendered as the daemon renders them (JSON, `--log-level`), then dropped.

- intake: each body decoded (`wire.decode`) and taken (`Receiver.accept`: spans converted
  to observations, added to the assembly), what the HTTP threads spend;
- scoring: every trace settled and scored (`Receiver.step` until none is due: mapping,
  signals, fingerprint, scores, history rows and the outbox in the state file), what the
  scoring worker spends;
- delivery: the outbox sent to the fake Langfuse (`Dispatcher.send_due`: batches read,
  posted over loopback HTTP, acknowledged), what the dispatcher spends (the fake's own
  threads are not counted).

`--profile` runs both under pyinstrument (install it in the venv) and prints its tree.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.langfuse_server import FakeLangfuse  # noqa: E402
from tests.otlp.harness import Ticks, emit_answer  # noqa: E402


def one_answer() -> Any:
    """One answer traced by the Langfuse SDK, as its exporter's ExportTraceServiceRequest."""
    from langfuse import Langfuse
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()  # what the SDK's own processor exports, kept
    client = Langfuse(
        public_key="pk-lf-bench",
        secret_key="sk-lf-bench",
        base_url="http://127.0.0.1:9",  # never reached: its exporter is the one above
        tracer_provider=TracerProvider(),
        span_exporter=memory,
        environment="production",
    )
    emit_answer(client)
    return encode_spans(memory.get_finished_spans())


def bodies(template: Any, traces: int, per_export: int) -> list[bytes]:
    """`traces` copies of the template under fresh ids, `per_export` to a protobuf body."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    out: list[bytes] = []
    for first in range(0, traces, per_export):
        request = ExportTraceServiceRequest()
        for _ in range(min(per_export, traces - first)):
            copy = ExportTraceServiceRequest()
            copy.CopyFrom(template)
            trace_id = os.urandom(16)
            ids = {}
            for resource_spans in copy.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        ids[span.span_id] = os.urandom(8)
            for resource_spans in copy.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        span.trace_id = trace_id
                        span.span_id = ids[span.span_id]
                        if span.parent_span_id:
                            span.parent_span_id = ids[span.parent_span_id]
            request.resource_spans.extend(copy.resource_spans)
        out.append(request.SerializeToString())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--per-export", type=int, default=25)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--log-level", default="info", help="the daemon's default: info")
    args = parser.parse_args()

    from observer import app
    from observer.app.event_path import ProjectId
    from observer.config import Settings
    from observer.otlp import wire
    from observer.otlp.assembly import Limits
    from observer.otlp.receiver import Receiver
    from observer.telemetry.logging import configure_logging

    # As `observer run` logs (one JSON line per trace at info), to nowhere.
    configure_logging("json", args.log_level)
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the life of the bench

    template = one_answer()
    exports = bodies(template, args.traces, args.per_export)
    with FakeLangfuse() as fake, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            langfuse={
                "base_url": fake.url,
                "public_key": fake.public_key,
                "secret_key": fake.secret_key,
            },
            otlp={"listen": "127.0.0.1:0"},
            http={"enabled": False},
            source={"requests_per_minute": 6000},
        )
        parts = app.build(settings, mode="solo", state_path=Path(tmp) / "state.sqlite")
        o = settings.otlp
        ticks = Ticks()
        receiver = Receiver(
            parts.pipeline.traces.settled_elsewhere(),
            parts.state,
            parts.metrics,
            Limits(o.settle_s, o.keep_s, 10 * args.traces, 1 << 34, o.root_grace_s),
            project_id=ProjectId(app.parts.build_api(settings), parts.budget, parts.stopping),
            lookup=parts.resolver,
            clock=parts.clock,
            monotonic=ticks,
        )
        receiver.project_id()  # read once, before the clocks start
        profiler: Any = None
        if args.profile:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.0005)
            profiler.start()
        began = time.thread_time()
        for body in exports:
            decoded = wire.decode(body, wire.PROTOBUF, None, 1 << 30)
            answer = receiver.accept(decoded)
            assert answer.result == "accepted", answer
        intake = time.thread_time() - began
        ticks.advance(o.settle_s)
        began = time.thread_time()
        while receiver.step():
            pass
        scoring = time.thread_time() - began
        queued = parts.state.outbox_size()
        began = time.thread_time()
        parts.dispatcher.send_due()
        delivery = time.thread_time() - began
        if profiler is not None:
            profiler.stop()
        scored = parts.metrics.value("observer_traces_total", outcome="scored")
        stored = sum(len(names) for names in fake.scores_by_trace().values())
        parts.close()
    if profiler is not None:
        print(profiler.output_text(unicode=True, color=False, show_all=False))
    n = args.traces
    print(f"{n} traces, {args.per_export} per export, {len(exports)} exports; scored {scored:g}, "
          f"{queued} scores queued, {stored} stored; load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"intake (decode + convert + assemble): {1000 * intake / n:.2f} ms CPU per trace")
    print(f"scoring (map + signals + record):     {1000 * scoring / n:.2f} ms CPU per trace")
    print(f"delivery (post + acknowledge):        {1000 * delivery / n:.2f} ms CPU per trace")
    total = intake + scoring + delivery
    print(f"total: {1000 * total / n:.2f} ms CPU per trace "
          f"= {n / total:.0f} traces per CPU second")  # fmt: skip


if __name__ == "__main__":
    try:
        main()
    except Exception:  # stderr is the logs' devnull by now: the failure goes to the real one
        import traceback

        traceback.print_exc(file=sys.__stderr__)
        sys.exit(1)
