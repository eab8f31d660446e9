"""Regenerate the instrumentation fixtures: real RAG apps, real instrumentations, local servers.

Run on demand, not in the test suite::

    .venv/bin/pip install -e ".[instrumentations]"
    .venv/bin/python tests/instrumentations/generate.py [APP ...]

Each app (``APPS``) runs in a child process of its own (instrumentations patch globals),
with a loopback capture server standing in for Langfuse's OTLP endpoint
(``/api/public/otel/v1/traces``) and the local OpenAI stub of ``tests/fakes/openai_stub.py``
(taught to answer with a tool call) standing in for the model. Every app answers the three
questions of ``scenarios.py``: a first-stage retrieval of 5 candidates from the in-memory
corpus, a rerank keeping 3-4 with a fixed cross-encoder's scores, and an answer the stub
gives, citing the kept chunks with ``[n]`` in reranked order (one sentence cites nothing; the
``backups`` answer cites the ghost ``[9]``). Each app is traced as that library's Langfuse
integration guide says and exports through the Langfuse Python SDK 5 (its span processor
sends OTLP/protobuf with ``x-langfuse-ingestion-version: 4``). Nothing leaves the machine:
the LLM base URL is the stub, embeddings are a deterministic stand-in, rerank scores come
from a table.

The child checks, for every question, that the model was shown exactly the reranked chunks
in [n] order (the stub's recorded request), then writes the raw capture,
``fixtures/<app>.otlp.json`` (OTLP/JSON, ids in hex). The parent converts it with
``observer.otlp.spans.convert`` into ``fixtures/<app>.observations.json`` and writes
``expected.json``: per trace, the scenario's hand-derived expectations (``scenarios.py``),
its trace id and the id of the GENERATION that produced the answer (the innermost, latest
generation whose output holds the answer text).

All apps run offline here; none had to be left out. The apps under ``apps/`` each pin
their packages and run in a virtualenv of their own (README.md, Regenerate).
"""

from __future__ import annotations

import base64
import fcntl
import gzip
import importlib
import json
import os
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FIXTURES = HERE / "fixtures"
EXPECTED = HERE / "expected.json"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from observer.otlp.spans import convert  # noqa: E402
from tests.instrumentations.kit import (  # noqa: E402
    CHUNKS,
    MODEL,
    SCENARIOS,
    SYSTEM_PROMPT,
    TOOL_CALL,
    ToolCallingStub,
    candidates,
    chat_messages,
    cross_encoder,
    numbered,
    rerank_ids,
    scenario_for,
)
from tests.instrumentations.scenarios import PROJECT_ID  # noqa: E402

APPS: dict[str, str] = {
    "sdk_typed": "Langfuse SDK 5 @observe: retriever typed as_type='retriever' (5 candidates), "
    "a plain @observe rerank span (the kept chunks), generation as_type='generation' "
    "calling the OpenAI client",
    "sdk_untyped": "Langfuse SDK 5 @observe: the retrieval function untyped (a plain span doing "
    "search and rerank, returning the kept chunks), generation as_type='generation'",
    "langchain": "LangChain LCEL + Langfuse CallbackHandler: a BaseRetriever (5 candidates), a "
    "rerank RunnableLambda ({documents, question}), ChatPromptTemplate, ChatOpenAI, "
    "StrOutputParser",
    "openai_dropin": "langfuse.openai drop-in client + an @observe retriever (as_type='retriever') "
    "returning the kept chunks, with a nested @observe rerank span",
    "llamaindex": "LlamaIndex VectorStoreIndex query engine through "
    "openinference-instrumentation-llama-index (Langfuse's guide): a deterministic "
    "embedding, a node postprocessor reranker dispatching ReRank events like "
    "SentenceTransformerRerank, a CustomLLM calling the OpenAI-compatible stub",
    "pydantic_ai": "pydantic-ai Agent with Agent.instrument_all() (Langfuse's guide), an "
    "OpenAIChatModel on the stub; the retrieval (search + rerank) is a tool the agent calls",
    "haystack": "Haystack pipeline + langfuse-haystack LangfuseConnector: InMemoryBM25Retriever "
    "(top 5), a custom @component cross-encoder ranker (top 3-4), ChatPromptBuilder, "
    "OpenAIChatGenerator on the stub",
}


# ---- local servers --------------------------------------------------------------------------


def _hex_ids(node: Any) -> Any:
    """OTLP/JSON wants hex ids; protobuf's JSON mapping gives base64."""
    if isinstance(node, dict):
        return {
            k: base64.b64decode(v).hex()
            if k in ("traceId", "spanId", "parentSpanId")
            else _hex_ids(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def _base64_ids(node: Any) -> Any:
    """OTLP/JSON's hex ids -> the base64 protobuf's JSON mapping wants."""
    if isinstance(node, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode()
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
            else _base64_ids(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_base64_ids(v) for v in node]
    return node


class CaptureServer:
    """Loopback stand-in for Langfuse's OTLP/HTTP traces endpoint; keeps every request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path.rstrip("/").endswith("/v1/traces"):
                    capture.record(body, self.headers.get("Content-Type") or "", dict(self.headers))
                    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                        ExportTraceServiceResponse,
                    )

                    payload = ExportTraceServiceResponse().SerializeToString()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                else:
                    payload = b"{}"
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_PUT = do_POST

            def do_GET(self) -> None:
                # The connector asks for the project (to link the trace): answer like Langfuse.
                body: Any = {}
                if self.path.startswith("/api/public/projects"):
                    body = {
                        "data": [
                            {
                                "id": "fixture-project",
                                "name": "fixture",
                                "metadata": {},
                                "organization": {"id": "fixture-org", "name": "fixture"},
                            }
                        ]
                    }
                payload = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def record(self, body: bytes, content_type: str, headers: dict[str, str]) -> None:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        message = ExportTraceServiceRequest()
        if "json" in content_type:
            # OTLP/JSON sends ids as hex (the OTLP spec); protobuf's JSON mapping reads bytes as
            # base64 (@langfuse/otel's default exporter, which Mastra's exporter uses, is JSON).
            json_format.ParseDict(_base64_ids(json.loads(body)), message)
        else:
            message.ParseFromString(body)
        self.requests.append(_hex_ids(json_format.MessageToDict(message)))
        self.headers.append({k.lower(): v for k, v in headers.items()})

    def start(self) -> CaptureServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# ---- the apps ----------------------------------------------------------------------------------
# Each takes the stub and runs every scenario, leaving the answers in the stub's script.


def app_sdk_typed(stub: ToolCallingStub) -> None:
    from langfuse import get_client, observe
    from openai import OpenAI

    langfuse = get_client()
    client = OpenAI(max_retries=0)

    @observe(as_type="retriever", name="retrieve")
    def retrieve(question: str) -> list[dict[str, Any]]:
        return [
            {
                "chunk_id": c,
                "doc_id": CHUNKS[c].doc_id,
                "title": CHUNKS[c].title,
                "text": CHUNKS[c].text,
                "score": s,
            }
            for c, s in candidates(question)
        ]

    @observe(name="rerank")
    def rerank(question: str, documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept = rerank_ids(question, [d["chunk_id"] for d in documents])
        by_id = {d["chunk_id"]: d for d in documents}
        return [{**by_id[c], "score": s} for c, s in kept]

    @observe(as_type="generation", name="generate")
    def generate(question: str, documents: list[dict[str, Any]]) -> str:
        messages = chat_messages(question, [d["text"] for d in documents])
        response = client.chat.completions.create(model=MODEL, messages=messages, temperature=0)  # type: ignore[arg-type]
        usage = response.usage
        langfuse.update_current_generation(
            model=MODEL,
            model_parameters={"temperature": 0},
            usage_details={"input": usage.prompt_tokens, "output": usage.completion_tokens}
            if usage
            else None,
        )
        return response.choices[0].message.content or ""

    @observe(name="rag-query")
    def answer_question(question: str) -> str:
        documents = retrieve(question)
        return generate(question, rerank(question, documents))

    for scenario in SCENARIOS:
        stub.script(scenario.answer)
        answer_question(scenario.question)
    langfuse.flush()


def app_sdk_untyped(stub: ToolCallingStub) -> None:
    from langfuse import get_client, observe
    from openai import OpenAI

    langfuse = get_client()
    client = OpenAI(max_retries=0)

    @observe(name="retrieve_context")
    def retrieve_context(question: str) -> list[dict[str, Any]]:
        found = [c for c, _ in candidates(question)]  # the vector search, not traced
        return [
            {
                "id": c,
                "content": CHUNKS[c].text,
                "rerank_score": s,
                "metadata": {"doc_id": CHUNKS[c].doc_id, "title": CHUNKS[c].title},
            }
            for c, s in rerank_ids(question, found)
        ]

    @observe(as_type="generation", name="llm-answer")
    def generate(question: str, context: list[dict[str, Any]]) -> str:
        messages = chat_messages(question, [d["content"] for d in context])
        langfuse.update_current_generation(model=MODEL, input=messages)
        response = client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
        return response.choices[0].message.content or ""

    @observe(name="answer_question")
    def answer_question(question: str) -> str:
        return generate(question, retrieve_context(question))

    for scenario in SCENARIOS:
        stub.script(scenario.answer)
        answer_question(question=scenario.question)
    langfuse.flush()


def app_openai_dropin(stub: ToolCallingStub) -> None:
    from langfuse import get_client, observe
    from langfuse.openai import OpenAI  # the drop-in

    langfuse = get_client()
    client = OpenAI(max_retries=0)

    @observe(name="rerank")
    def rerank(question: str, chunk_ids: list[str]) -> list[dict[str, Any]]:
        return [
            {
                "id": c,
                "text": CHUNKS[c].text,
                "score": s,
                "metadata": {"doc_id": CHUNKS[c].doc_id, "title": CHUNKS[c].title},
            }
            for c, s in rerank_ids(question, chunk_ids)
        ]

    @observe(as_type="retriever", name="retrieve")
    def retrieve(question: str) -> list[dict[str, Any]]:
        return rerank(question, [c for c, _ in candidates(question)])

    @observe(name="support-bot")
    def handle(question: str) -> str:
        documents = retrieve(question)
        response = client.chat.completions.create(
            name="answer",  # type: ignore[call-overload]
            model=MODEL,
            messages=chat_messages(question, [d["text"] for d in documents]),
            temperature=0,
        )
        return response.choices[0].message.content or ""

    for scenario in SCENARIOS:
        stub.script(scenario.answer)
        handle(scenario.question)
    langfuse.flush()


def app_langchain(stub: ToolCallingStub) -> None:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough
    from langchain_openai import ChatOpenAI
    from langfuse import get_client
    from langfuse.langchain import CallbackHandler

    langfuse = get_client()

    class KnowledgeBaseRetriever(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [
                Document(
                    page_content=CHUNKS[c].text,
                    metadata={
                        "chunk_id": c,
                        "doc_id": CHUNKS[c].doc_id,
                        "title": CHUNKS[c].title,
                        "similarity": s,
                    },
                )
                for c, s in candidates(query)
            ]

    def rerank(inputs: dict[str, Any]) -> dict[str, Any]:
        question, documents = inputs["question"], inputs["documents"]
        by_id = {d.metadata["chunk_id"]: d for d in documents}
        kept = rerank_ids(question, list(by_id))
        reranked = [
            Document(
                page_content=by_id[c].page_content,
                metadata={
                    "chunk_id": c,
                    "doc_id": by_id[c].metadata["doc_id"],
                    "title": by_id[c].metadata["title"],
                    "rerank_score": s,
                },
            )
            for c, s in kept
        ]
        return {"documents": reranked, "question": question}

    def format_sources(inputs: dict[str, Any]) -> dict[str, str]:
        texts = [d.page_content for d in inputs["documents"]]
        return {"context": numbered(texts), "question": inputs["question"]}

    prompt = ChatPromptTemplate.from_messages(
        [("system", SYSTEM_PROMPT), ("user", "Sources:\n{context}\n\nQuestion: {question}")]
    )
    llm = ChatOpenAI(model=MODEL, temperature=0, max_retries=0)
    chain = (
        {"documents": KnowledgeBaseRetriever(), "question": RunnablePassthrough()}
        | RunnableLambda(rerank).with_config(run_name="rerank")
        | RunnableLambda(format_sources).with_config(run_name="format_sources")
        | prompt
        | llm
        | StrOutputParser()
    )
    handler = CallbackHandler()
    for scenario in SCENARIOS:
        stub.script(scenario.answer)
        chain.invoke(scenario.question, config={"callbacks": [handler], "run_name": "rag-chain"})
    langfuse.flush()


def app_llamaindex(stub: ToolCallingStub) -> None:
    from langfuse import get_client
    from llama_index.core import PromptTemplate, VectorStoreIndex
    from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
    from llama_index.core.bridge.pydantic import Field
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
    from llama_index.core.llms import CustomLLM
    from llama_index.core.llms.callbacks import llm_completion_callback
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from openai import OpenAI
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
            return self._vector(dict(candidates(query)))

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
            question = query_bundle.query_str
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

    class StubLLM(CustomLLM):
        """An OpenAI-compatible chat endpoint (the stub) behind LlamaIndex's LLM interface."""

        model: str = MODEL

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name=self.model, context_window=16000, num_output=512)

        @llm_completion_callback()
        def complete(
            self, prompt: str, formatted: bool = False, **kwargs: Any
        ) -> CompletionResponse:
            client = OpenAI(max_retries=0)
            response = client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": prompt},
                ],
            )
            return CompletionResponse(text=response.choices[0].message.content or "")

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError

    nodes = [
        TextNode(
            id_=c,
            text=CHUNKS[c].text,
            metadata={"doc_id": CHUNKS[c].doc_id, "title": CHUNKS[c].title},
        )
        for c in order
    ]
    index = VectorStoreIndex(nodes=nodes, embed_model=CorpusEmbedding())
    qa_template = PromptTemplate(
        "Sources, in order (the first is [1]):\n{context_str}\n\nQuestion: {query_str}\nAnswer: "
    )
    engine = index.as_query_engine(
        llm=StubLLM(),
        similarity_top_k=5,
        node_postprocessors=[CrossEncoderRerank()],
        text_qa_template=qa_template,
    )
    for scenario in SCENARIOS:
        stub.script(scenario.answer)
        engine.query(scenario.question)
    langfuse.flush()


def app_pydantic_ai(stub: ToolCallingStub) -> None:
    from langfuse import get_client
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    langfuse = get_client()
    Agent.instrument_all()
    model = OpenAIChatModel(
        MODEL, provider=OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"], api_key="sk-test")
    )
    agent = Agent(model, instructions=SYSTEM_PROMPT, name="support-agent")

    @agent.tool_plain
    def search_knowledge_base(query: str) -> list[dict[str, Any]]:
        """Search the knowledge base; the results are numbered sources, in order."""
        found = [c for c, _ in candidates(query)]
        return [
            {
                "chunk_id": c,
                "doc_id": CHUNKS[c].doc_id,
                "title": CHUNKS[c].title,
                "text": CHUNKS[c].text,
                "relevance_score": s,
            }
            for c, s in rerank_ids(query, found)
        ]

    for scenario in SCENARIOS:
        call = {"name": "search_knowledge_base", "arguments": {"query": scenario.question}}
        stub.script(TOOL_CALL + json.dumps(call), scenario.answer)
        agent.run_sync(scenario.question)
    langfuse.flush()


def app_haystack(stub: ToolCallingStub) -> None:
    from haystack import Document, Pipeline
    from haystack.components.builders import ChatPromptBuilder
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.dataclasses import ChatMessage
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.utils import Secret
    from haystack_integrations.components.connectors.langfuse import LangfuseConnector
    from langfuse import get_client

    from tests.instrumentations.haystack_ranker import CrossEncoderRanker

    store = InMemoryDocumentStore(bm25_algorithm="BM25Okapi")  # keeps zero-score candidates
    store.write_documents(
        [
            Document(
                id=c,
                content=CHUNKS[c].text,
                meta={"chunk_id": c, "doc_id": CHUNKS[c].doc_id, "title": CHUNKS[c].title},
            )
            for c in CHUNKS
        ]
    )
    template = [
        ChatMessage.from_system(SYSTEM_PROMPT),
        ChatMessage.from_user(
            "Sources:\n{% for d in documents %}[{{ loop.index }}] {{ d.content }}\n{% endfor %}"
            "\nQuestion: {{ question }}"
        ),
    ]
    pipe = Pipeline()
    pipe.add_component("tracer", LangfuseConnector("haystack-rag"))
    pipe.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=5))
    pipe.add_component("ranker", CrossEncoderRanker(rerank_ids))
    pipe.add_component(
        "prompt_builder", ChatPromptBuilder(template=template, required_variables=["question"])
    )
    pipe.add_component(
        "llm",
        OpenAIChatGenerator(
            api_key=Secret.from_token("sk-test"),
            api_base_url=os.environ["OPENAI_BASE_URL"],
            model=MODEL,
            max_retries=0,
        ),
    )
    pipe.connect("retriever.documents", "ranker.documents")
    pipe.connect("ranker.documents", "prompt_builder.documents")
    pipe.connect("prompt_builder.prompt", "llm.messages")
    for scenario in SCENARIOS:
        stub.script(scenario.answer)
        q = scenario.question
        # BM25 alone would rank other chunks in; the app's metadata filter narrows the search
        # to the question's 5 candidates (the corpus is tiny), BM25 orders them.
        allowed = {
            "field": "meta.chunk_id",
            "operator": "in",
            "value": [c for c, _ in candidates(q)],
        }
        pipe.run(
            {
                "retriever": {"query": q, "filters": allowed},
                "ranker": {"query": q},
                "prompt_builder": {"question": q},
            }
        )
    get_client().flush()


RUNNERS: dict[str, Callable[[ToolCallingStub], list[dict[str, Any]] | None]] = {
    "sdk_typed": app_sdk_typed,
    "sdk_untyped": app_sdk_untyped,
    "langchain": app_langchain,
    "openai_dropin": app_openai_dropin,
    "llamaindex": app_llamaindex,
    "pydantic_ai": app_pydantic_ai,
    "haystack": app_haystack,
}


# What each app's trace holds of the kept chunks, when not everything (``scenarios.py``
# ``Scenario.expected``): ``{"chunk_ids": bool, "scores": bool}``.
HOLDS: dict[str, dict[str, bool]] = {}


def _more_apps() -> None:
    """The apps under ``apps/``, one module each: its ``DESCRIPTION`` and ``run(stub)``, and
    ``HOLDS`` when its trace lacks the chunks' ids or scores."""
    for path in sorted((HERE / "apps").glob("[!_]*.py")):
        module = importlib.import_module(f"tests.instrumentations.apps.{path.stem}")
        APPS[path.stem] = module.DESCRIPTION
        RUNNERS[path.stem] = module.run
        HOLDS[path.stem] = getattr(module, "HOLDS", {})


_more_apps()


# ---- child: run one app ----------------------------------------------------------------------


def _request_text(request: dict[str, Any]) -> str:
    """The conversation a model request carries (Gemini's ``contents``, others' ``messages``)."""
    return json.dumps(request.get("messages") or request.get("contents"), ensure_ascii=False)


def check_model_saw_reranked(requests: list[dict[str, Any]]) -> None:
    """Every answer request showed the kept chunks in reranked order and no dropped one."""
    answered = {s.key: False for s in SCENARIOS}
    for request in requests:
        text = _request_text(request)
        for scenario in SCENARIOS:
            kept = scenario.reranked()
            if scenario.question not in text or not all(CHUNKS[c].text in text for c, _ in kept):
                continue
            positions = [text.index(CHUNKS[c].text) for c, _ in kept]
            assert positions == sorted(positions), f"{scenario.key}: sources out of order"
            kept_ids = {c for c, _ in kept}
            dropped = [c for c, _ in scenario.candidates if c not in kept_ids]
            assert not any(CHUNKS[c].text in text for c in dropped), f"{scenario.key}: dropped"
            answered[scenario.key] = True
    missing = [k for k, ok in answered.items() if not ok]
    assert not missing, f"the model never saw the reranked sources of {missing}"


def run_child(app: str) -> None:
    capture = CaptureServer().start()
    stub = ToolCallingStub()
    stub.start()
    os.environ.update(
        {
            "LANGFUSE_PUBLIC_KEY": "pk-lf-fixture",
            "LANGFUSE_SECRET_KEY": "sk-lf-fixture",
            "LANGFUSE_BASE_URL": capture.url,
            "LANGFUSE_HOST": capture.url,
            "LANGFUSE_TRACING_ENVIRONMENT": "production",
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": stub.url + "/v1",
            "HAYSTACK_CONTENT_TRACING_ENABLED": "true",
            "HAYSTACK_TELEMETRY_ENABLED": "False",
            "ANONYMIZED_TELEMETRY": "False",
        }
    )
    try:
        # An app whose model is another stub (apps/anthropic.py) returns its requests.
        requests = RUNNERS[app](stub)
        from langfuse import get_client

        get_client().shutdown()
        check_model_saw_reranked(stub.requests if requests is None else requests)
    finally:
        stub.stop()
        capture.stop()
    FIXTURES.mkdir(parents=True, exist_ok=True)
    otlp = {"resourceSpans": [rs for r in capture.requests for rs in r.get("resourceSpans", [])]}
    (FIXTURES / f"{app}.otlp.json").write_text(
        json.dumps(otlp, indent=1, ensure_ascii=False) + "\n"
    )
    headers = sorted({h.get("x-langfuse-ingestion-version", "") for h in capture.headers})
    print(f"{app}: {len(capture.requests)} export requests, ingestion-version {headers}")


# ---- parent: convert and write the expectations ------------------------------------------------


def answer_generation(trace: list[dict[str, Any]], answer: str) -> dict[str, Any]:
    """The GENERATION that produced the answer: it holds the answer text; the innermost and
    latest of several (a wrapper such as LlamaIndex's predict holds it too). When none holds
    it but the root returned it (OpenLIT 1.33 records a placeholder as every completion), the
    latest generation made it."""
    first = answer.split(" [")[0]
    generations = [o for o in trace if o["type"] == "GENERATION"]
    found = [o for o in generations if first in (o.get("output") or "")]
    roots = [o for o in trace if o["isRootObservation"]]
    if not found and any(first in (o.get("output") or "") for o in roots):
        return max(generations, key=lambda o: o["startTime"])
    assert found, "no generation holds the answer"
    parents = {o.get("parentObservationId") for o in found}
    innermost = [o for o in found if o["id"] not in parents]
    return max(innermost, key=lambda o: o["startTime"])


def expectations(app: str, observations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    traces: dict[str, list[dict[str, Any]]] = {}
    for observation in observations:
        traces.setdefault(observation["traceId"], []).append(observation)
    out = []
    for scenario in SCENARIOS:
        # The trace that asks the question and holds its answer (smolagents records the
        # previous run's task in the next run's root metadata).
        first = scenario.answer.split(" [")[0]
        matching = [
            tid
            for tid, trace in traces.items()
            if any(scenario.question in json.dumps(o, ensure_ascii=False) for o in trace)
            and any(first in (o.get("output") or "") for o in trace)
        ]
        assert len(matching) == 1, f"{app}/{scenario.key}: {len(matching)} traces"
        generation = answer_generation(traces[matching[0]], scenario.answer)
        out.append(
            {
                "trace_id": matching[0],
                "observation_id": generation["id"],
                **scenario.expected(**HOLDS.get(app, {})),
            }
        )
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        run_child(argv[1])
        return 0
    apps = argv or list(APPS)
    unknown = [a for a in apps if a not in APPS]
    if unknown:
        print(f"unknown apps {unknown}; known: {list(APPS)}", file=sys.stderr)
        return 2
    written: dict[str, Any] = {}
    for app in apps:
        subprocess.run([sys.executable, __file__, "--child", app], check=True, cwd=ROOT)
        otlp = json.loads((FIXTURES / f"{app}.otlp.json").read_text())
        observations = convert(otlp, PROJECT_ID)
        (FIXTURES / f"{app}.observations.json").write_text(
            json.dumps(observations, indent=1, ensure_ascii=False) + "\n"
        )
        written[app] = {"description": APPS[app], "traces": expectations(app, observations)}
    # Apps may be regenerated side by side: the read-modify-write of expected.json is locked.
    with (HERE / ".expected.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        expected: dict[str, Any] = {"apps": {}}
        if EXPECTED.exists():
            expected = json.loads(EXPECTED.read_text())
        expected["apps"].update(written)
        expected["apps"] = {a: expected["apps"][a] for a in APPS if a in expected["apps"]}
        EXPECTED.write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
