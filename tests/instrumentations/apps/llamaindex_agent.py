"""LlamaIndex ``FunctionAgent`` whose retrieval is LlamaIndex's own ``RetrieverTool``, traced
through OpenInference, as Langfuse's LlamaIndex guides say (integrations/frameworks/llamaindex
and llamaindex-workflows: ``langfuse.get_client()``, then
``LlamaIndexInstrumentor().instrument()``; the Langfuse SDK's span processor exports the
OpenInference spans).

The agent's LLM is ``llama_index.llms.openai.OpenAI`` on the stub (``llama-index-llms-openai``
pins ``openai<3``: this app's virtualenv has openai 2). The tool is
``RetrieverTool.from_defaults`` over the index's retriever (top 5, a deterministic corpus
embedding as in the ``llamaindex`` app) with a cross-encoder node postprocessor keeping 3-4
(rescoring and cutting like ``SentenceTransformerRerank``, dispatching its ReRank events).
``RetrieverTool`` hands the model one text block: each kept node's content in
``MetadataMode.LLM`` (its metadata lines, a blank line, its text), the nodes joined by blank
lines; ids and scores stay in the retriever's and the reranker's spans (OpenInference
``retrieval.documents`` and ``reranker.output_documents`` attributes). ``RetrieverTool``
queries its retriever with ``"input is <question>\\n"`` (its kwargs formatted), which the
stand-in embedding reads back to the question.
"""

from __future__ import annotations

import asyncio
import json

from tests.instrumentations.kit import (
    CHUNKS,
    MODEL,
    SCENARIOS,
    SYSTEM_PROMPT,
    TOOL_CALL,
    ToolCallingStub,
    candidates,
    cross_encoder,
    scenario_for,
)

DESCRIPTION = (
    "LlamaIndex FunctionAgent (llama-index-llms-openai OpenAI on the stub) through "
    "openinference-instrumentation-llama-index and get_client() (Langfuse's guide): the "
    "retrieval is RetrieverTool over a VectorIndexRetriever (top 5) with a cross-encoder "
    "node postprocessor (top 3-4); the tool message is the kept nodes' LLM-mode content "
    "joined by blank lines, ids and scores only in the retriever's and reranker's spans"
)


def _question_in(text: str) -> str:
    """The scenario question a tool's query string holds (``"input is <question>\\n"``)."""
    return next(s.question for s in SCENARIOS if s.question in text)


def run(stub: ToolCallingStub) -> None:
    import os

    from langfuse import get_client
    from llama_index.core import Settings, VectorStoreIndex
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.bridge.pydantic import Field
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from llama_index.core.tools import RetrieverTool
    from llama_index.llms.openai import OpenAI
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    langfuse = get_client()
    LlamaIndexInstrumentor().instrument()
    dispatcher = get_dispatcher(__name__)
    order = list(CHUNKS)

    class CorpusEmbedding(BaseEmbedding):
        """Deterministic stand-in: one axis per chunk; a query points at its candidates."""

        def _vector(self, weights: dict[str, float]) -> list[float]:
            return [weights.get(c, 0.0) for c in order] + [0.01]

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._vector({c: 1.0 for c in order if CHUNKS[c].text in text})

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._vector(dict(candidates(_question_in(query))))

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

    class CrossEncoderRerank(BaseNodePostprocessor):
        """Rescores and cuts like SentenceTransformerRerank, with a fixed scorer."""

        top_n: int = Field(default=3)

        @classmethod
        def class_name(cls) -> str:
            return "CrossEncoderRerank"

        def _postprocess_nodes(
            self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
        ) -> list[NodeWithScore]:
            assert query_bundle is not None
            question = _question_in(query_bundle.query_str)
            top_n = scenario_for(question).keep
            dispatcher.event(
                ReRankStartEvent(
                    query=query_bundle, nodes=nodes, top_n=top_n, model_name="fixed-cross-encoder"
                )
            )
            rescored = [
                NodeWithScore(node=n.node, score=cross_encoder(question, n.node.node_id))
                for n in nodes
            ]
            rescored.sort(key=lambda n: n.score or 0.0, reverse=True)
            kept = rescored[:top_n]
            dispatcher.event(ReRankEndEvent(nodes=kept))
            return kept

    nodes = [
        TextNode(
            id_=c,
            text=CHUNKS[c].text,
            metadata={"doc_id": CHUNKS[c].doc_id, "title": CHUNKS[c].title},
        )
        for c in order
    ]
    Settings.embed_model = CorpusEmbedding()
    index = VectorStoreIndex(nodes=nodes)
    search = RetrieverTool.from_defaults(
        retriever=index.as_retriever(similarity_top_k=5),
        node_postprocessors=[CrossEncoderRerank()],
        name="search_knowledge_base",
        description=(
            "Search the support knowledge base. Returns the relevant passages, most relevant "
            "first; cite the n-th passage as [n]."
        ),
    )
    llm = OpenAI(
        model=MODEL,
        api_base=os.environ["OPENAI_BASE_URL"],
        api_key="sk-test",
        max_retries=0,
        temperature=0,
    )
    agent = FunctionAgent(
        name="support_agent",
        description="Answers support questions from the knowledge base.",
        tools=[search],
        llm=llm,
        system_prompt=SYSTEM_PROMPT,
        streaming=False,  # the stub answers whole completions, not server-sent events
    )

    async def ask_all() -> None:
        # One event loop for every run: the LLM's async client is bound to the first one.
        for scenario in SCENARIOS:
            call = {"name": "search_knowledge_base", "arguments": {"input": scenario.question}}
            stub.script(TOOL_CALL + json.dumps(call), scenario.answer)
            await agent.run(user_msg=scenario.question)

    asyncio.run(ask_all())
    langfuse.flush()
