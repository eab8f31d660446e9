"""LiteLLM's Langfuse callback alone: the model call is traced, the retrieval is not.

Langfuse's LiteLLM SDK guide (integrations/frameworks/litellm-sdk): ``litellm.callbacks =
["langfuse_otel"]`` with the Langfuse keys and host in the environment; LiteLLM exports one
span per model call through its own OpenTelemetry exporter to ``<LANGFUSE_HOST>/api/public/
otel``. A team that routes every model call through LiteLLM (its SDK, or its proxy with the
same callback) and traces nothing else sees exactly this: one generation per answer, the
retrieval visible only as the numbered passages in the prompt (``kit.chat_messages``: the
system prompt, then one user message holding the passages ``[n] text`` and the question).
The app searches and reranks without tracing (chunk ids and scores never reach the trace).
"""

from __future__ import annotations

import os

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
    "LiteLLM completion() with litellm.callbacks = ['langfuse_otel'] (Langfuse's LiteLLM SDK "
    "guide) on the stub; retrieval and rerank untraced, the kept passages numbered in the "
    "user message with the question"
)
# Only the prompt's passages: no chunk id, no score anywhere in the trace.
HOLDS = {"chunk_ids": False, "scores": False}


def run(stub: ToolCallingStub) -> None:
    # LiteLLM fetches its model price map from the internet at import unless told not to.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm

    litellm.callbacks = ["langfuse_otel"]
    for scenario in SCENARIOS:
        question = scenario.question
        kept = rerank_ids(question, [c for c, _ in candidates(question)])
        stub.script(scenario.answer)
        litellm.completion(
            model=f"openai/{MODEL}",
            messages=chat_messages(question, [CHUNKS[c].text for c, _ in kept]),
            api_base=os.environ["OPENAI_BASE_URL"],
            api_key="sk-test",
            temperature=0,
            num_retries=0,
        )
    _flush()


def _flush() -> None:
    """Wait for LiteLLM's logging threads, then flush the tracer providers its Langfuse logger
    exports through (one per set of credentials, each with its own batch processor)."""
    import time

    from litellm.litellm_core_utils.litellm_logging import _in_memory_loggers

    time.sleep(1.0)  # success callbacks run on LiteLLM's logging thread pool
    for logger in _in_memory_loggers:
        for cached in getattr(logger, "_tracer_provider_cache", {}).values():
            cached.provider.force_flush()
