"""CrewAI: one agent with a retrieval tool in a one-task crew, traced through OpenInference, as
Langfuse's CrewAI guide says (integrations/frameworks/crewai: ``langfuse.get_client()``, then
``CrewAIInstrumentor().instrument(skip_dep_check=True)`` and
``LiteLLMInstrumentor().instrument()``; the Langfuse SDK's span processor exports the spans).

The guide no longer traces the model calls on current CrewAI: CrewAI 1 calls OpenAI models
through its native provider (the openai SDK) and installs no LiteLLM, so the LiteLLM
instrumentor sees nothing and the trace has no generation at all (a CHAIN, an AGENT and the
TOOL). This app adds ``openinference-instrumentation-openai``'s ``OpenAIInstrumentor``, which
records the calls as GENERATIONs.

The agent's LLM is CrewAI's ``LLM`` on the stub (``base_url``); the tool (``@tool``) searches
the knowledge base, reranks and returns the kept chunks as a list of
``{id, title, text, relevance_score}`` dicts, which CrewAI hands the model as text. The task's
description is the question; its expected output asks for cited sentences. CrewAI's own
telemetry is switched off (``CREWAI_DISABLE_TELEMETRY``): it would dial CrewAI's servers.
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
    "CrewAI Agent + Task + Crew through openinference-instrumentation-crewai and "
    "-litellm with get_client() (Langfuse's guide), CrewAI's LLM on the stub; the retrieval "
    "(search + rerank) is a @tool returning the kept chunks as a list of dicts"
)


def run(stub: ToolCallingStub) -> None:
    os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
    os.environ["CREWAI_TRACING_ENABLED"] = "false"
    from langfuse import get_client
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.litellm import LiteLLMInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    langfuse = get_client()
    CrewAIInstrumentor().instrument(skip_dep_check=True)
    LiteLLMInstrumentor().instrument()
    # Not in the guide: CrewAI 1 calls OpenAI models through the openai SDK, not LiteLLM.
    OpenAIInstrumentor().instrument()

    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    @tool("search_knowledge_base")
    def search_knowledge_base(query: str) -> list[dict[str, Any]]:
        """Search the support knowledge base. Returns the relevant passages, most relevant
        first; cite the n-th passage as [n]."""
        found = [c for c, _ in candidates(query)]
        return [
            {"id": c, "title": CHUNKS[c].title, "text": CHUNKS[c].text, "relevance_score": s}
            for c, s in rerank_ids(query, found)
        ]

    llm = LLM(
        model=f"openai/{MODEL}",
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key="sk-test",
        temperature=0,
    )
    agent = Agent(
        role="Support agent",
        goal="Answer customers' questions from the knowledge base.",
        backstory=SYSTEM_PROMPT,
        tools=[search_knowledge_base],
        llm=llm,
        allow_delegation=False,
        verbose=False,
    )
    for scenario in SCENARIOS:
        task = Task(
            description=scenario.question,
            expected_output="The answer, citing the n-th passage as [n] after each claim.",
            agent=agent,
        )
        call = {"name": "search_knowledge_base", "arguments": {"query": scenario.question}}
        stub.script(TOOL_CALL + json.dumps(call), scenario.answer)
        Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
    langfuse.flush()
