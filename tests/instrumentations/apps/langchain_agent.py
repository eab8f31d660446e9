"""LangChain v1 agent (``create_agent``) whose retrieval is a retriever tool, traced with
Langfuse's LangChain ``CallbackHandler`` in the agent's ``config``, as Langfuse's LangChain &
LangGraph guide says (integrations/frameworks/langchain: ``CallbackHandler()`` passed in
``config={"callbacks": [handler]}`` of ``invoke``).

The retrieval is the shape of LangGraph's agentic-RAG tutorial: a ``BaseRetriever`` turned
into a tool by ``create_retriever_tool`` (``langchain_core.tools``), which hands the model the
documents' ``page_content`` joined by blank lines, one text block, and drops everything else
(ids, metadata, scores). The retriever searches the knowledge base and reranks with a
cross-encoder inside (a hosted retrieval API that returns its top documents, reranked, without
scores): it returns the kept chunks as ``Document``s (``id`` the chunk id, ``metadata`` doc id
and title, no score). Its ``on_retriever_end`` is traced as a RETRIEVER nested in the TOOL, so
the trace holds the documents twice: as ``Document``s in the retriever's output and as one
text block in the tool's output and the answer generation's tool message. Neither holds a
retrieval score.
"""

from __future__ import annotations

import json

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
    "LangChain 1 create_agent (a ChatOpenAI on the stub) + Langfuse CallbackHandler in "
    "invoke's config (Langfuse's guide): the retrieval is a create_retriever_tool tool over "
    "a BaseRetriever that searches and reranks inside, returning the kept chunks as "
    "Documents without scores; the tool message is their page_content joined by blank lines"
)
# The retriever's Documents carry the chunk ids; no rerank score is anywhere in the trace.
HOLDS = {"chunk_ids": True, "scores": False}


def run(stub: ToolCallingStub) -> None:
    from langchain.agents import create_agent
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import create_retriever_tool
    from langchain_openai import ChatOpenAI
    from langfuse import get_client
    from langfuse.langchain import CallbackHandler

    langfuse = get_client()

    class KnowledgeBaseRetriever(BaseRetriever):
        """The knowledge base's search, reranked: the kept chunks, best first, no scores."""

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            found = [c for c, _ in candidates(query)]
            return [
                Document(
                    id=c,
                    page_content=CHUNKS[c].text,
                    metadata={"doc_id": CHUNKS[c].doc_id, "title": CHUNKS[c].title},
                )
                for c, _ in rerank_ids(query, found)
            ]

    search = create_retriever_tool(
        KnowledgeBaseRetriever(),
        "search_knowledge_base",
        "Search the support knowledge base. Returns the relevant passages, most relevant "
        "first; cite the n-th passage as [n].",
    )
    agent = create_agent(
        ChatOpenAI(model=MODEL, temperature=0, max_retries=0),
        tools=[search],
        system_prompt=SYSTEM_PROMPT,
        name="support_agent",
    )
    handler = CallbackHandler()
    for scenario in SCENARIOS:
        call = {"name": "search_knowledge_base", "arguments": {"query": scenario.question}}
        stub.script(TOOL_CALL + json.dumps(call), scenario.answer)
        agent.invoke(
            {"messages": [{"role": "user", "content": scenario.question}]},
            config={"callbacks": [handler]},
        )
    langfuse.flush()
