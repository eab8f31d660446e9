"""LangGraph RAG graph (LangChain's "Build a RAG app" tutorial shape) traced with Langfuse's
LangChain ``CallbackHandler`` passed in the graph's ``config``, as Langfuse's LangGraph guide
says.

State ``{question, context: list[Document], answer}``; nodes ``retrieve`` (a ``BaseRetriever``
returning the 5 candidates, ``Document.id`` the chunk id, ``metadata.score`` the similarity),
``rerank`` (a cross-encoder ``BaseDocumentCompressor`` that, like LangChain's Cohere rerank
compressor, copies each kept document and adds ``metadata.relevance_score``; it overwrites
``context``) and ``generate`` (``ChatPromptTemplate`` + ``ChatOpenAI`` on the stub, returning
``{"answer": response.content}``).
"""

from collections.abc import Sequence
from copy import deepcopy
from typing import Any

from tests.instrumentations.kit import (
    CHUNKS,
    MODEL,
    SCENARIOS,
    SYSTEM_PROMPT,
    ToolCallingStub,
    candidates,
    numbered,
    rerank_ids,
)

DESCRIPTION = (
    "LangGraph StateGraph (LangChain's RAG tutorial: state {question, context, answer}) + "
    "Langfuse CallbackHandler in graph.invoke's config: node retrieve (a BaseRetriever, 5 "
    "Documents, id = chunk id, metadata.score = similarity), node rerank (a cross-encoder "
    "BaseDocumentCompressor keeping 3-4, metadata.relevance_score added), node generate "
    "(ChatPromptTemplate + ChatOpenAI, returns {answer: response.content})"
)


def run(stub: ToolCallingStub) -> None:
    from typing import TypedDict

    from langchain_core.callbacks import CallbackManagerForRetrieverRun, Callbacks
    from langchain_core.documents import BaseDocumentCompressor, Document
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_openai import ChatOpenAI
    from langfuse import get_client
    from langfuse.langchain import CallbackHandler
    from langgraph.graph import END, START, StateGraph

    langfuse = get_client()

    class KnowledgeBaseRetriever(BaseRetriever):
        """The first stage: a vector search over the knowledge base (top 5)."""

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [
                Document(
                    id=c,
                    page_content=CHUNKS[c].text,
                    metadata={"doc_id": CHUNKS[c].doc_id, "title": CHUNKS[c].title, "score": s},
                )
                for c, s in candidates(query)
            ]

    class CrossEncoderRerank(BaseDocumentCompressor):
        """A cross-encoder reranker (a fixed scorer), shaped like LangChain's CohereRerank:
        each kept document is copied with ``metadata.relevance_score`` added."""

        def compress_documents(
            self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
        ) -> Sequence[Document]:
            by_id = {d.id: d for d in documents}
            compressed = []
            for chunk_id, score in rerank_ids(query, [str(d.id) for d in documents]):
                doc = by_id[chunk_id]
                doc_copy = Document(
                    id=doc.id, page_content=doc.page_content, metadata=deepcopy(doc.metadata)
                )
                doc_copy.metadata["relevance_score"] = score
                compressed.append(doc_copy)
            return compressed

    retriever = KnowledgeBaseRetriever()
    reranker = CrossEncoderRerank()
    prompt = ChatPromptTemplate.from_messages(
        [("system", SYSTEM_PROMPT), ("user", "Sources:\n{context}\n\nQuestion: {question}")]
    )
    llm = ChatOpenAI(model=MODEL, temperature=0, max_retries=0)

    class State(TypedDict):
        question: str
        context: list[Document]
        answer: str

    def retrieve(state: State) -> dict[str, Any]:
        return {"context": retriever.invoke(state["question"])}

    def rerank(state: State) -> dict[str, Any]:
        return {"context": list(reranker.compress_documents(state["context"], state["question"]))}

    def generate(state: State) -> dict[str, Any]:
        docs_content = numbered([doc.page_content for doc in state["context"]])
        messages = prompt.invoke({"question": state["question"], "context": docs_content})
        response = llm.invoke(messages)
        return {"answer": response.content}

    graph_builder = StateGraph(State)
    graph_builder.add_node("retrieve", retrieve)
    graph_builder.add_node("rerank", rerank)
    graph_builder.add_node("generate", generate)
    graph_builder.add_edge(START, "retrieve")
    graph_builder.add_edge("retrieve", "rerank")
    graph_builder.add_edge("rerank", "generate")
    graph_builder.add_edge("generate", END)
    graph = graph_builder.compile()

    handler = CallbackHandler()
    for scenario in SCENARIOS:
        stub.script(scenario.answer)
        graph.invoke({"question": scenario.question}, config={"callbacks": [handler]})
    langfuse.flush()
