"""OpenAI Agents SDK agent whose retrieval is a function tool, traced through OpenInference.

Langfuse's guide for the OpenAI Agents SDK (integrations/frameworks/openai-agents): install
``openinference-instrumentation-openai-agents``, call ``OpenAIAgentsInstrumentor().instrument()``
and ``langfuse.get_client()``; the Langfuse SDK's span processor exports the OpenInference
spans. The guide runs the agent bare (no Langfuse span around ``Runner.run``), and so does
this app. The instrumentor replaces the Agents SDK's own trace processors by default
(``exclusive_processor``), so the SDK's export to OpenAI's trace backend is gone while the
OpenInference processor stays (``set_tracing_disabled`` would switch both off).

The stub serves only ``/v1/chat/completions``: the agent's model is an
``OpenAIChatCompletionsModel`` on an ``AsyncOpenAI`` client pointed at it, the way the Agents
SDK's docs configure other OpenAI-compatible providers.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.instrumentations.kit import (
    CHUNKS,
    MODEL,
    SCENARIOS,
    SYSTEM_PROMPT,
    TOOL_CALL,
    ToolCallingStub,
    candidates,
    rerank_ids,
)

DESCRIPTION = (
    "OpenAI Agents SDK Agent through openinference-instrumentation-openai-agents and the "
    "Langfuse SDK's get_client() (Langfuse's guide), an OpenAIChatCompletionsModel on the "
    "stub; the retrieval (search + rerank) is a @function_tool the agent calls"
)


def run(stub: ToolCallingStub) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from langfuse import get_client
    from openai import AsyncOpenAI
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument()
    langfuse = get_client()

    @function_tool
    def search_knowledge_base(query: str) -> list[dict[str, Any]]:
        """Search the knowledge base; the results are numbered sources, in order.

        Args:
            query: What to look up.
        """
        found = [c for c, _ in candidates(query)]
        return [
            {
                "id": c,
                "text": CHUNKS[c].text,
                "relevance_score": s,
                "title": CHUNKS[c].title,
            }
            for c, s in rerank_ids(query, found)
        ]

    client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key="sk-test", max_retries=0)
    agent = Agent(
        name="Support agent",
        instructions=SYSTEM_PROMPT,
        model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        tools=[search_knowledge_base],
    )
    for scenario in SCENARIOS:
        call = {"name": "search_knowledge_base", "arguments": {"query": scenario.question}}
        stub.script(TOOL_CALL + json.dumps(call), scenario.answer)
        Runner.run_sync(agent, scenario.question)
    langfuse.flush()
