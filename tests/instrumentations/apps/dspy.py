"""DSPy RAG module traced by openinference-instrumentation-dspy, exported by the Langfuse SDK.

Langfuse's DSPy guide: ``pip install langfuse dspy openinference-instrumentation-dspy``, set
the ``LANGFUSE_*`` variables, ``get_client()`` (its span processor exports the OpenInference
spans), ``DSPyInstrumentor().instrument()``, then ``dspy.configure(lm=dspy.LM(...))``.

Shaped like DSPy's RAG programs: a retrieval model configured as ``dspy.settings.rm`` (called
like ``ColBERTv2``: ``rm(query, k=...)`` -> passages with ``long_text``, ``pid`` and
``score``), a ``dspy.Module`` retrieval step wrapping ``dspy.Retrieve(k=5)`` that reranks the
candidates with a cross-encoder and keeps the best, and a ``RAG`` module whose
``self.respond = dspy.ChainOfThought("context, question -> response")`` gets the kept
passages, as DSPy passes them, a list of strings ``context`` (the ChatAdapter shows it to the
model as ``[1] «...»``, ``[2] «...»``, in reranked order). The stub answers in the
ChatAdapter's own format (``[[ ## reasoning ## ]]``, ``[[ ## response ## ]]``,
``[[ ## completed ## ]]``). DSPy's disk and memory caches and the LM's cache are off, so every
call reaches the stub.
"""

from __future__ import annotations

import os
from typing import Any

from tests.instrumentations.kit import (
    CHUNKS,
    MODEL,
    SCENARIOS,
    ToolCallingStub,
    candidates,
    rerank_ids,
)

DESCRIPTION = (
    "DSPy module through openinference-instrumentation-dspy (Langfuse's guide): dspy.Retrieve "
    "(k=5) on a ColBERTv2-like retrieval model, a dspy.Module reranking it with a cross-encoder "
    "(keeps 3-4), dspy.ChainOfThought('context, question -> response') on dspy.LM "
    "openai/gpt-4o-mini (the stub, answering in the ChatAdapter's format)"
)

REASONING = "The numbered context passages answer the question directly, so I cite them."


def chat_adapter_reply(answer: str) -> str:
    """The raw completion DSPy's ChatAdapter parses for ``context, question -> reasoning,
    response`` (ChainOfThought prepends ``reasoning``)."""
    return (
        f"[[ ## reasoning ## ]]\n{REASONING}\n\n"
        f"[[ ## response ## ]]\n{answer}\n\n"
        "[[ ## completed ## ]]"
    )


def run(stub: ToolCallingStub) -> None:
    # generate.py sets OPENAI_BASE_URL, so DSPy's engine="auto" routes the LM through LiteLLM
    # (its "legacy environment-configured gateway" rule); LiteLLM would fetch its model cost map
    # from the internet on import: its own switch keeps the bundled copy.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import dspy
    from dspy.dsp.utils import dotdict
    from langfuse import get_client
    from openinference.instrumentation.dspy import DSPyInstrumentor

    langfuse = get_client()
    langfuse.auth_check()
    DSPyInstrumentor().instrument()

    by_text = {chunk.text: chunk.chunk_id for chunk in CHUNKS.values()}

    class KnowledgeBase:
        """The retrieval model ``dspy.Retrieve`` calls (``dspy.settings.rm``), answering like
        ``dspy.ColBERTv2``: passages with ``long_text``, ``pid`` and ``score``."""

        def __call__(self, query: str, k: int = 5, **kwargs: Any) -> list[dotdict]:
            return [
                dotdict(
                    {
                        "pid": chunk_id,
                        "text": CHUNKS[chunk_id].text,
                        "long_text": CHUNKS[chunk_id].text,
                        "score": similarity,
                    }
                )
                for chunk_id, similarity in candidates(query)[:k]
            ]

    class RerankedRetrieve(dspy.Module):
        """The first stage (``dspy.Retrieve``), then a cross-encoder keeps the best passages."""

        def __init__(self, k: int = 5) -> None:
            super().__init__()
            self.retrieve = dspy.Retrieve(k=k)

        def forward(self, query: str) -> Any:
            passages = self.retrieve(query).passages
            kept = rerank_ids(query, [by_text[p] for p in passages])  # cut to the top 3-4
            return dspy.Prediction(
                passages=[CHUNKS[c].text for c, _ in kept],
                pids=[c for c, _ in kept],
                scores=[s for _, s in kept],
            )

    class RAG(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.retrieve = RerankedRetrieve(k=5)
            self.respond = dspy.ChainOfThought("context, question -> response")

        def forward(self, question: str) -> Any:
            context = self.retrieve(question).passages
            return self.respond(context=context, question=question)

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    lm = dspy.LM(
        f"openai/{MODEL}",
        api_base=os.environ["OPENAI_BASE_URL"],
        api_key="sk-test",
        cache=False,
        num_retries=0,
    )
    dspy.configure(lm=lm, rm=KnowledgeBase())
    rag = RAG()
    for scenario in SCENARIOS:
        stub.script(chat_adapter_reply(scenario.answer))
        prediction = rag(question=scenario.question)
        assert prediction.response == scenario.answer, prediction
    langfuse.flush()
