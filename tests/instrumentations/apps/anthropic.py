"""The Anthropic Python SDK in a hand-written tool-use loop, traced as Langfuse's Anthropic
guide says (integrations/model-providers/anthropic: ``opentelemetry-instrumentation-anthropic``'s
``AnthropicInstrumentor().instrument()`` with the Langfuse SDK's ``get_client()``; the guide
groups calls under one trace with the SDK's ``@observe``, as here).

The loop is the one of Anthropic's tool-use docs: the model answers ``tool_use``, the app
runs the tool and sends a user turn of ``tool_result`` blocks, the model answers. The tool
(not traced: a plain function of the app) searches the knowledge base, reranks and returns
the kept chunks; its result goes back as the ``tool_result`` block's ``content``, JSON text
of ``{id, title, text, relevance_score}`` objects. The documents are therefore only in the
answer generation's input, inside a ``tool_result`` block.

The Anthropic SDK 2 also traces itself (OpenTelemetry scope ``com.anthropic.sdk.python``,
no content by default): a content-free ``chat`` span beside each instrumentor span, starting
a moment after it. ``anthropic_openinference`` is the same app through OpenInference's
instrumentor.

The model is ``tests/fakes/anthropic_stub.py`` (Anthropic's Messages API, scripted); ``run``
returns its requests for generate.py's check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.instrumentations.kit import (
    CHUNKS,
    SCENARIOS,
    SYSTEM_PROMPT,
    ToolCallingStub,
    candidates,
    rerank_ids,
)

DESCRIPTION = (
    "Anthropic Python SDK (messages.create with a search tool) through "
    "opentelemetry-instrumentation-anthropic and the Langfuse SDK (Langfuse's guide), an "
    "@observe root around the tool-use loop; the tool (untraced) returns the kept chunks as "
    "JSON text in a tool_result block; the Anthropic Messages API stub as the model"
)

CLAUDE = "claude-sonnet-4-5"
TOOLS = [
    {
        "name": "search_knowledge_base",
        "description": (
            "Search the support knowledge base. Returns the relevant passages, most relevant "
            "first; cite the n-th passage as [n]."
        ),
        "input_schema": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look up."}},
            "required": ["query"],
        },
    }
]


def search_knowledge_base(query: str) -> list[dict[str, Any]]:
    found = [c for c, _ in candidates(query)]
    return [
        {"id": c, "title": CHUNKS[c].title, "text": CHUNKS[c].text, "relevance_score": s}
        for c, s in rerank_ids(query, found)
    ]


def run(stub: ToolCallingStub) -> list[dict[str, Any]]:
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

    return run_instrumented(AnthropicInstrumentor().instrument)


def run_instrumented(instrument: Callable[[], Any]) -> list[dict[str, Any]]:
    """The tool-use loop of every scenario, after ``get_client()`` and ``instrument()``."""
    import json

    from anthropic import Anthropic
    from langfuse import get_client, observe

    from tests.fakes.anthropic_stub import AnthropicStub, ToolUse

    langfuse = get_client()
    instrument()
    claude = AnthropicStub().start()
    client = Anthropic(base_url=claude.url, api_key="sk-ant-test", max_retries=0)

    @observe(name="support-agent")
    def answer(question: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        while True:
            response = client.messages.create(
                model=CLAUDE,
                max_tokens=1024,
                system=SYSTEM_PROMPT,
                tools=TOOLS,  # type: ignore[arg-type]
                messages=messages,  # type: ignore[arg-type]
            )
            if response.stop_reason != "tool_use":
                return "".join(b.text for b in response.content if b.type == "text")
            messages.append({"role": "assistant", "content": response.content})
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": block.id,
                            "content": json.dumps(search_knowledge_base(**block.input)),
                        }
                        for block in response.content
                        if block.type == "tool_use"
                    ],
                }
            )

    try:
        for scenario in SCENARIOS:
            claude.script(
                ToolUse("search_knowledge_base", {"query": scenario.question}), scenario.answer
            )
            answer(scenario.question)
        langfuse.flush()
    finally:
        claude.stop()
    return claude.requests
