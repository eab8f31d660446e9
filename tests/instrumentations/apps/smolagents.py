"""Hugging Face smolagents ``ToolCallingAgent`` whose retrieval is a tool, traced through
OpenInference, as Langfuse's smolagents guide says (integrations/frameworks/smolagents:
``langfuse.get_client()``, then ``SmolagentsInstrumentor().instrument()``; the Langfuse SDK's
span processor exports the OpenInference spans). The guide's model is Hugging Face's
``InferenceClientModel``; here ``OpenAIModel`` (smolagents' model for OpenAI-compatible
servers) on the stub.

The ``search_knowledge_base`` tool (smolagents' ``@tool``) searches the knowledge base,
reranks with the fixed cross-encoder and returns the kept chunks as a list of dicts (``id``,
``title``, ``text``, ``relevance_score``). smolagents hands a tool's result to the model as
text, ``str()`` of the value: a Python repr of the list, inside a user-role message
(``Observation:``; smolagents converts its tool-response role to ``user`` for the model) and
the TOOL span's output. A ``ToolCallingAgent`` ends by calling its ``final_answer`` tool: the
last generation's output is that tool call, the answer its ``answer`` argument, and the
agent's root span returns it.
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
    "smolagents ToolCallingAgent through openinference-instrumentation-smolagents and the "
    "Langfuse SDK's get_client() (Langfuse's guide), an OpenAIModel on the stub; the "
    "retrieval (search + rerank) is a @tool returning a list of dicts, which smolagents "
    "hands the model as its Python repr; the answer is the final_answer tool's argument"
)
# The repr holds each kept chunk's id and relevance_score.
HOLDS = {"chunk_ids": True, "scores": True}


def run(stub: ToolCallingStub) -> None:
    from langfuse import get_client
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    langfuse = get_client()
    SmolagentsInstrumentor().instrument()

    from smolagents import OpenAIModel, ToolCallingAgent, tool

    @tool
    def search_knowledge_base(query: str) -> list[dict[str, Any]]:
        """Search the support knowledge base. Returns the relevant passages, most relevant
        first; cite the n-th passage as [n].

        Args:
            query: What to look up.
        """
        found = [c for c, _ in candidates(query)]
        return [
            {
                "id": c,
                "title": CHUNKS[c].title,
                "text": CHUNKS[c].text,
                "relevance_score": s,
            }
            for c, s in rerank_ids(query, found)
        ]

    model = OpenAIModel(
        model_id=MODEL,
        api_base=os.environ["OPENAI_BASE_URL"],
        api_key="sk-test",
        client_kwargs={"max_retries": 0},
    )
    agent = ToolCallingAgent(
        tools=[search_knowledge_base],
        model=model,
        instructions=SYSTEM_PROMPT,
        name="support_agent",
        max_steps=4,
        verbosity_level=0,
    )
    for scenario in SCENARIOS:
        search = {"name": "search_knowledge_base", "arguments": {"query": scenario.question}}
        final = {"name": "final_answer", "arguments": {"answer": scenario.answer}}
        stub.script(TOOL_CALL + json.dumps(search), TOOL_CALL + json.dumps(final))
        agent.run(scenario.question)
    langfuse.flush()
