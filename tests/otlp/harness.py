"""An observer with its OTLP receiver on loopback, against the fake Langfuse, for tests.

The parts are the daemon's (`app.build` in mode "solo": the pipeline's recorder, the
state file, the dispatcher to the fake Langfuse); the receiver is built around them as
the composition root builds it, with two things a test owns: its monotonic clock (the
settle time passes when the test says so) and its scoring (`step()`, called by the test
instead of the worker thread). The HTTP server is cheroot on 127.0.0.1, a free port.

`emit_answer` is an app traced with the real Langfuse SDK 5 (its own OTLP exporter, as an
app sends it to Langfuse) pointed at the receiver: a root SPAN with the question, a
RETRIEVER with the numbered sources, a GENERATION answering with [n] markers.
"""

from __future__ import annotations

import base64
import copy
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from observer import app
from observer.app.event_path import EventPath, ProjectId
from observer.app.parts import Parts
from observer.config import Settings
from observer.otlp.assembly import Limits
from observer.otlp.receiver import Receiver
from observer.otlp.server import OtlpServer
from tests.fakes.langfuse_server import FakeLangfuse

CHUNKS = [
    {
        "chunk_id": "kb-1",
        "text": "Refunds are processed within 5 business days.",
        "rerank_score": 0.91,
    },
    {
        "chunk_id": "kb-2",
        "text": "Card refunds can take 3 more days to show.",
        "rerank_score": 0.74,
    },
]
QUESTION = "How long does a refund take?"
ANSWER = "Refunds are processed within 5 business days [1]. Card refunds take longer [2]."
SOURCES = "\n".join(f"[{n}] {c['text']}" for n, c in enumerate(CHUNKS, 1))
PROMPT = [
    {"role": "system", "content": "Answer from the numbered sources; cite them as [n]."},
    {"role": "user", "content": f"Sources:\n{SOURCES}\n\nQuestion: {QUESTION}"},
]


class Ticks:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def settings_for(fake: FakeLangfuse, alerts: dict[str, Any] | None = None, **otlp: Any) -> Settings:
    return Settings(
        alerts=alerts or {},
        langfuse={
            "base_url": fake.url,
            "public_key": fake.public_key,
            "secret_key": fake.secret_key,
        },
        otlp={"listen": "127.0.0.1:0", **otlp},
        http={"enabled": False},
        source={"requests_per_minute": 6000},
    )


def unique_keys(fake: FakeLangfuse) -> None:
    """The Langfuse SDK keeps one client per public key in a process: each test its own."""
    token = uuid.uuid4().hex[:12]
    fake.public_key, fake.secret_key = f"pk-lf-{token}", f"sk-lf-{token}"


@dataclass
class Observer:
    parts: Parts
    receiver: Receiver
    path: EventPath
    server: OtlpServer
    ticks: Ticks

    @property
    def url(self) -> str:
        return self.server.url

    def settle(self, seconds: float | None = None) -> None:
        """Let the settle time pass, then score what is due (one step, on this thread)."""
        self.ticks.advance(self.parts.settings.otlp.settle_s if seconds is None else seconds)
        while self.receiver.step():
            pass

    def deliver(self) -> None:
        """Send the outbox to the fake Langfuse now."""
        assert self.parts.dispatcher.flush(10.0)

    def metric(self, name: str, **labels: str) -> float:
        return self.parts.metrics.value(name, **labels)

    def close(self) -> None:
        self.server.stop()
        self.parts.close()


def start_observer(
    fake: FakeLangfuse,
    state: Path,
    *,
    clock: Callable[[], datetime] | None = None,
    alerts: dict[str, Any] | None = None,
    **otlp: Any,
) -> Observer:
    """`clock`: the receiver's wall clock (the daemon's by default); `alerts`: the
    `[alerts]` section."""
    settings = settings_for(fake, alerts=alerts, **otlp)
    parts = app.build(settings, mode="solo", state_path=state)
    o = settings.otlp
    ticks = Ticks()
    receiver = Receiver(
        parts.pipeline.traces.settled_elsewhere(),
        parts.state,
        parts.metrics,
        Limits(o.settle_s, o.keep_s, o.max_traces, o.max_bytes, o.root_grace_s),
        project_id=ProjectId(app.build_api(settings), parts.budget, parts.stopping),
        lookup=parts.resolver,
        notify=lambda: None,
        clock=clock or parts.clock,
        monotonic=ticks,
    )
    path = EventPath(settings, receiver)
    server = OtlpServer("127.0.0.1", 0, path.app, threads=2).start()
    return Observer(parts, receiver, path, server, ticks)


def langfuse_client(url: str, public_key: str, secret_key: str, **options: Any) -> Any:
    """The real Langfuse SDK exporting to `url` (its OTLP path under it), its own provider."""
    from langfuse import Langfuse
    from opentelemetry.sdk.trace import TracerProvider

    return Langfuse(
        public_key=public_key,
        secret_key=secret_key,
        base_url=url,
        tracer_provider=TracerProvider(),
        environment="production",
        **options,
    )


def emit_answer(client: Any, *, children_first: bool = False) -> str:
    """One answer traced; its trace id. `children_first`: the children are exported
    before their root ends (the root comes in a later request)."""
    with client.start_as_current_observation(
        as_type="span", name="rag-query", input={"question": QUESTION}
    ) as root:
        with client.start_as_current_observation(
            as_type="retriever", name="retrieve", input=QUESTION
        ) as retriever:
            retriever.update(output=CHUNKS)
        with client.start_as_current_observation(
            as_type="generation", name="generate", model="gpt-4o-mini", input=PROMPT
        ) as generation:
            generation.update(output=ANSWER)
        if children_first:
            client.flush()
        root.update(output=ANSWER)
        trace_id: str = root.trace_id
    client.flush()
    return trace_id


def protobuf_export(otlp: dict[str, Any]) -> bytes:
    """An OTLP/JSON body (hex ids) as the protobuf export an SDK sends."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from observer.otlp import wire

    request = ExportTraceServiceRequest()
    json_format.ParseDict(wire._base64_ids(copy.deepcopy(otlp)), request)
    return bytes(request.SerializeToString())


def only_spans(otlp: dict[str, Any], keep: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The body with only the spans `keep` says yes to."""
    body = copy.deepcopy(otlp)
    for resource_spans in body.get("resourceSpans") or []:
        for scope_spans in resource_spans.get("scopeSpans") or []:
            scope_spans["spans"] = [s for s in scope_spans.get("spans") or [] if keep(s)]
    return body


def post(url: str, body: bytes, auth: str, kind: str = "application/x-protobuf") -> Any:
    import httpx

    from observer.otlp.server import TRACES_PATH

    headers = {"Content-Type": kind, "Authorization": auth}
    return httpx.post(url + TRACES_PATH, content=body, headers=headers, timeout=10)


def basic(fake: FakeLangfuse) -> str:
    pair = base64.b64encode(f"{fake.public_key}:{fake.secret_key}".encode()).decode()
    return f"Basic {pair}"
