"""Mastra 1: a Node.js agent whose retrieval is a tool, traced with ``@mastra/langfuse``.

``mastra/app.mjs`` is traced as Langfuse's Mastra guide says: an ``Observability`` config
with ``new LangfuseExporter()`` (credentials and base URL from the environment), which turns
Mastra's own tracing spans into OpenTelemetry GenAI spans sent through ``@langfuse/otel``
(OTLP/JSON). The agent's model (``@ai-sdk/openai`` ``.chat()`` on the stub) calls the
``search_knowledge_base`` tool (``createTool``), which searches, reranks and returns the kept
chunks as objects with their ``relevanceScore``. The Python side hands the knowledge base's
answers over on stdin. npm packages: ``mastra/package.json`` (exact versions,
``package-lock.json`` beside it). Mastra 1 declares Node >= 22.13; it runs here on Node 20.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.instrumentations.apps.langfuse_js import knowledge_base, run_node
from tests.instrumentations.kit import ToolCallingStub

DESCRIPTION = (
    "Mastra 1 Agent (@ai-sdk/openai .chat() on the stub) with Observability + "
    "@mastra/langfuse LangfuseExporter (Langfuse's guide): the retrieval (search + rerank) "
    "is a createTool tool returning the kept chunks as objects with relevanceScore"
)
# The tool's objects hold each kept chunk's id and relevanceScore.
HOLDS = {"chunk_ids": True, "scores": True}

APP_DIR = Path(__file__).resolve().parent / "mastra"


def run(stub: ToolCallingStub) -> None:
    from tests.instrumentations.kit import SCENARIOS, TOOL_CALL

    payload = knowledge_base()
    for scenario in SCENARIOS:
        call = {"name": "searchKnowledgeBase", "arguments": {"query": scenario.question}}
        stub.script(TOOL_CALL + json.dumps(call), scenario.answer)
    run_node(APP_DIR, "app.mjs", payload)
