"""The Vercel AI SDK: a Node.js RAG agent whose retrieval is a tool, traced into Langfuse.

``vercel_ai/app.mjs`` is traced as Langfuse's Vercel AI SDK guide says: the OpenTelemetry
``NodeSDK`` with ``@langfuse/otel``'s ``LangfuseSpanProcessor`` and ``experimental_telemetry:
{isEnabled: true, functionId: "rag-answer", metadata}`` on the AI SDK calls. The model
(``@ai-sdk/openai`` ``createOpenAI({baseURL}).chat(model)`` on the stub) calls the
``searchKnowledgeBase`` tool, the RAG shape of the AI SDK's own RAG guide; the tool runs the
vector search (untraced, like the guide's database query) and reranks with the AI SDK's
``rerank()`` (a fixed cross-encoder behind the ``RerankingModelV3`` interface), returning
the kept chunks. The Python side hands the knowledge base's answers over on stdin. npm
packages: ``vercel_ai/package.json`` (exact versions, ``package-lock.json`` beside it).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.instrumentations.apps.langfuse_js import knowledge_base, run_node
from tests.instrumentations.kit import ToolCallingStub

DESCRIPTION = (
    "Vercel AI SDK 6 generateText with experimental_telemetry (functionId 'rag-answer'), "
    "exported by @langfuse/otel's LangfuseSpanProcessor on the OpenTelemetry NodeSDK "
    "(Langfuse's guide): the model calls a searchKnowledgeBase tool that runs the vector "
    "search and the AI SDK's rerank() (a fixed cross-encoder model) and returns the kept "
    "chunks; @ai-sdk/openai .chat() on the stub"
)

APP_DIR = Path(__file__).resolve().parent / "vercel_ai"


def run(stub: ToolCallingStub) -> None:
    from tests.instrumentations.kit import SCENARIOS, TOOL_CALL

    payload = knowledge_base()
    for scenario in SCENARIOS:
        call = {"name": "searchKnowledgeBase", "arguments": {"query": scenario.question}}
        stub.script(TOOL_CALL + json.dumps(call), scenario.answer)
    run_node(APP_DIR, "app.mjs", payload)
