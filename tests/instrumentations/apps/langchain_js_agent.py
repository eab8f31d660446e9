"""LangChain.js v1: a Node.js agent (``createAgent``) whose retrieval is a tool, traced with
``@langfuse/langchain``'s ``CallbackHandler``.

``langchain_js_agent/app.mjs`` is traced as Langfuse's LangChain guide says for JS/TS: the
OpenTelemetry ``NodeSDK`` with ``@langfuse/otel``'s ``LangfuseSpanProcessor`` and ``new
CallbackHandler()`` in ``invoke``'s ``callbacks``. The agent's model (``@langchain/openai``
``ChatOpenAI`` on the stub) calls the ``search_knowledge_base`` tool (LangChain's ``tool()``),
which searches, reranks and returns the kept chunks as JSON text with their
``relevance_score``. The Python side hands the knowledge base's answers over on stdin. npm
packages: ``langchain_js_agent/package.json`` (exact versions, ``package-lock.json`` beside
it).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.instrumentations.apps.langfuse_js import knowledge_base, run_node
from tests.instrumentations.kit import ToolCallingStub

DESCRIPTION = (
    "LangChain.js 1 createAgent (a ChatOpenAI on the stub) + @langfuse/langchain "
    "CallbackHandler in invoke's callbacks, @langfuse/otel's LangfuseSpanProcessor on the "
    "OpenTelemetry NodeSDK (Langfuse's guide): the retrieval (search + rerank) is a tool() "
    "returning the kept chunks as JSON text with relevance_score"
)
# The tool's JSON text holds each kept chunk's id and relevance_score.
HOLDS = {"chunk_ids": True, "scores": True}

APP_DIR = Path(__file__).resolve().parent / "langchain_js_agent"


def run(stub: ToolCallingStub) -> None:
    from tests.instrumentations.kit import SCENARIOS, TOOL_CALL

    payload = knowledge_base()
    for scenario in SCENARIOS:
        call = {"name": "search_knowledge_base", "arguments": {"query": scenario.question}}
        stub.script(TOOL_CALL + json.dumps(call), scenario.answer)
    run_node(APP_DIR, "app.mjs", payload)
