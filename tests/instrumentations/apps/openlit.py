"""OpenLIT's OpenAI instrumentation on a hand-written tool-calling loop, exported to Langfuse.

Langfuse's OpenLIT guide (integrations/other/openlit): ``langfuse = get_client()``, then
``openlit.init(tracer=langfuse._otel_tracer, disable_batch=True)``; OpenLIT's spans go out
through the Langfuse SDK's span processor. OpenLIT 1.45 has no ``tracer`` argument any more
(a TypeError); it detects an existing SDK ``TracerProvider`` and reuses it, so this app calls
``openlit.init(disable_batch=True)`` after ``get_client()``, which installed the Langfuse
SDK's provider: the same spans through the same processor.

The loop is the one of OpenAI's function-calling guide (the model asks for
``search_knowledge_base``, the app runs it and sends a ``tool`` message with its JSON
result, the model answers; ``tools`` is sent on every call), grouped under an ``@observe``
root as the Langfuse SDK lets any app do. The tool is a plain function (untraced): it
searches, reranks and returns the kept chunks as JSON text with their ``relevance_score``.

What OpenLIT 1.45 records: OTel GenAI messages (``parts``); the tool message as a
``tool_call_response`` part whose ``response`` is the JSON text; the assistant tool-call turn
left out of the answer generation's input; the tool-calling generation named after the tool
it calls (Langfuse names an observation by ``gen_ai.tool.name``). Older OpenLIT releases
recorded the placeholder "Function called with tools" as the completion of any call made
with ``tools``; this one records the completion.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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
    "OpenLIT 1.45 (openlit.init reusing the Langfuse SDK's tracer provider; Langfuse's guide "
    "passes tracer=, gone from OpenLIT) instrumenting the "
    "openai client in a function-calling loop under an @observe root; the tool (untraced) "
    "returns the kept chunks as JSON text with relevance_score in a tool message"
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_knowledge_base",
            "description": (
                "Search the support knowledge base. Returns the relevant passages, most "
                "relevant first; cite the n-th passage as [n]."
            ),
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "What to look up."}},
                "required": ["query"],
            },
        },
    }
]


def search_knowledge_base(query: str) -> list[dict[str, Any]]:
    found = [c for c, _ in candidates(query)]
    return [
        {"id": c, "title": CHUNKS[c].title, "text": CHUNKS[c].text, "relevance_score": s}
        for c, s in rerank_ids(query, found)
    ]


def run(stub: ToolCallingStub) -> None:
    import openlit

    # The guide's tracer=langfuse._otel_tracer is gone; the Langfuse provider is reused.
    run_loop(stub, lambda _langfuse: openlit.init(disable_batch=True))


def run_loop(stub: ToolCallingStub, init: Callable[[Any], object]) -> None:
    """Every scenario through the function-calling loop, after ``init(get_client())``."""
    from langfuse import get_client, observe
    from openai import OpenAI

    langfuse = get_client()
    init(langfuse)
    client = OpenAI(max_retries=0)

    @observe(name="support-agent")
    def answer(question: str) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ]
        while True:
            response = client.chat.completions.create(
                model=MODEL,
                messages=messages,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                temperature=0,
            )
            message = response.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump())
            for call in message.tool_calls:
                arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": json.dumps(search_knowledge_base(**arguments)),
                    }
                )

    for scenario in SCENARIOS:
        call = {"name": "search_knowledge_base", "arguments": {"query": scenario.question}}
        stub.script(TOOL_CALL + json.dumps(call), scenario.answer)
        answer(scenario.question)
    langfuse.flush()
