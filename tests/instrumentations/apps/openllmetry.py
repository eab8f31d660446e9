"""OpenLLMetry (Traceloop SDK) exporting OTLP straight to Langfuse, as Langfuse's guide says.

``Traceloop.init(api_endpoint=<LANGFUSE_BASE_URL>/api/public/otel, headers={"Authorization":
"Basic ..."}, disable_batch=True)``: the SDK's own OTLP/HTTP exporter, no Langfuse SDK in the
path. The app is shaped as OpenLLMetry's docs write one: a ``@workflow`` whose first argument
is the OpenAI client, two ``@task`` steps (retrieve: the 5 candidates; rerank: the kept ones)
and the chat completion, which ``opentelemetry-instrumentation-openai`` traces by itself.
Association properties are set before each question (``Traceloop.set_association_properties``).
"""

from __future__ import annotations

import base64
import os
from typing import Any

from tests.instrumentations.kit import (
    CHUNKS,
    MODEL,
    SCENARIOS,
    ToolCallingStub,
    candidates,
    chat_messages,
    rerank_ids,
)

DESCRIPTION = (
    "OpenLLMetry (traceloop-sdk + opentelemetry-instrumentation-openai) exporting OTLP to "
    "Langfuse's endpoint as Langfuse's guide says: a @workflow rag_answer(client, question) "
    "with @task retrieve (5 candidates, score = similarity) and @task rerank (kept chunks, "
    "relevance_score), then the auto-instrumented OpenAI chat completion; association "
    "properties set before each question"
)


def run(stub: ToolCallingStub) -> None:
    os.environ.setdefault("TRACELOOP_TELEMETRY", "false")
    # Langfuse's OTLP endpoint takes traces only; the SDK would also push metrics there.
    os.environ.setdefault("TRACELOOP_METRICS_ENABLED", "false")
    from openai import OpenAI
    from opentelemetry import trace
    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import task, workflow

    auth = base64.b64encode(
        f"{os.environ['LANGFUSE_PUBLIC_KEY']}:{os.environ['LANGFUSE_SECRET_KEY']}".encode()
    ).decode()
    Traceloop.init(
        app_name="support-rag",
        api_endpoint=f"{os.environ['LANGFUSE_BASE_URL']}/api/public/otel",
        headers={"Authorization": f"Basic {auth}"},
        disable_batch=True,
    )

    @task(name="retrieve")
    def retrieve(question: str) -> list[dict[str, Any]]:
        return [
            {
                "id": c,
                "text": CHUNKS[c].text,
                "score": s,
                "metadata": {"doc_id": CHUNKS[c].doc_id, "title": CHUNKS[c].title},
            }
            for c, s in candidates(question)
        ]

    @task(name="rerank")
    def rerank(question: str, documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by_id = {d["id"]: d for d in documents}
        return [
            {"id": c, "text": by_id[c]["text"], "relevance_score": s}
            for c, s in rerank_ids(question, list(by_id))
        ]

    @workflow(name="rag_answer")
    def answer(client: OpenAI, question: str) -> str:
        kept = rerank(question, retrieve(question))
        response = client.chat.completions.create(
            model=MODEL,
            messages=chat_messages(question, [d["text"] for d in kept]),  # type: ignore[arg-type]
            temperature=0,
        )
        return response.choices[0].message.content or ""

    client = OpenAI(max_retries=0)
    for scenario in SCENARIOS:
        stub.script(scenario.answer)
        Traceloop.set_association_properties({"query_type": "policy", "user_tier": "free"})
        answer(client, scenario.question)
    provider = trace.get_tracer_provider()
    provider.force_flush()  # type: ignore[attr-defined]
