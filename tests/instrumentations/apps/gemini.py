"""The Google GenAI SDK in a manual function-calling loop, traced as Langfuse's Gemini guide
says (integrations/model-providers/google-gemini: ``openinference-instrumentation-google-genai``'s
``GoogleGenAIInstrumentor().instrument()`` with the Langfuse SDK's ``get_client()``), under an
``@observe`` root that groups the loop.

The loop is the manual one of Gemini's function-calling docs: the model answers a
``functionCall`` part, the app runs the function and sends a user turn with a
``functionResponse`` part whose ``response`` is ``{"result": <the return value>}``, the model
answers. The function (untraced) searches, reranks and returns the kept chunks as a list of
``{id, title, text, relevance_score}`` objects: the documents are only in the answer
generation's input, nested objects inside a ``functionResponse`` part. (Passing the Python
function itself as a tool would make the SDK call it inside ``generate_content``, automatic
function calling; declarations keep the calls, and so the documents, in the traced
requests.)

The model is ``tests/fakes/gemini_stub.py`` (``generateContent``, scripted); ``run``
returns its requests for generate.py's check.
"""

from __future__ import annotations

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
    "Google GenAI SDK generate_content with a function declaration through "
    "openinference-instrumentation-google-genai and the Langfuse SDK (Langfuse's guide), an "
    "@observe root around the manual function-calling loop; the function (untraced) returns "
    "the kept chunks as objects in a functionResponse part; the Gemini API stub as the model"
)

GEMINI = "gemini-2.5-flash"


def search_knowledge_base(query: str) -> list[dict[str, Any]]:
    found = [c for c, _ in candidates(query)]
    return [
        {"id": c, "title": CHUNKS[c].title, "text": CHUNKS[c].text, "relevance_score": s}
        for c, s in rerank_ids(query, found)
    ]


def run(stub: ToolCallingStub) -> list[dict[str, Any]]:
    from google import genai
    from google.genai import types
    from langfuse import get_client, observe
    from openinference.instrumentation.google_genai import GoogleGenAIInstrumentor

    from tests.fakes.gemini_stub import FunctionCall, GeminiStub

    langfuse = get_client()
    GoogleGenAIInstrumentor().instrument()
    gemini = GeminiStub().start()
    client = genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=gemini.url))
    search = types.FunctionDeclaration(
        name="search_knowledge_base",
        description=(
            "Search the support knowledge base. Returns the relevant passages, most relevant "
            "first; cite the n-th passage as [n]."
        ),
        parameters_json_schema={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look up."}},
            "required": ["query"],
        },
    )
    config = types.GenerateContentConfig(
        system_instruction=SYSTEM_PROMPT,
        tools=[types.Tool(function_declarations=[search])],
        temperature=0,
    )

    @observe(name="support-agent")
    def answer(question: str) -> str:
        contents: list[types.Content] = [
            types.Content(role="user", parts=[types.Part.from_text(text=question)])
        ]
        while True:
            response = client.models.generate_content(
                model=GEMINI,
                contents=contents,  # type: ignore[arg-type]
                config=config,
            )
            calls = response.function_calls or []
            if not calls:
                return response.text or ""
            contents.append(response.candidates[0].content)  # type: ignore[index, arg-type]
            contents.append(
                types.Content(
                    role="user",
                    parts=[
                        types.Part.from_function_response(
                            name=call.name or "",
                            response={"result": search_knowledge_base(**(call.args or {}))},
                        )
                        for call in calls
                    ],
                )
            )

    try:
        for scenario in SCENARIOS:
            gemini.script(
                FunctionCall("search_knowledge_base", {"query": scenario.question}),
                scenario.answer,
            )
            answer(scenario.question)
        langfuse.flush()
    finally:
        gemini.stop()
    return gemini.requests
