#!/usr/bin/env python3
"""Build observer/data/demo_traces.jsonl and demo_traffic.jsonl from examples/records.jsonl.

    python examples/make_demo_traces.py

Each RagRecord becomes one trace in the default trace convention (docs/trace-convention.md)
as `GET /api/public/v2/observations?fields=core,basic,time,io,metadata,
trace_context` returns it: one observation object per line, camelCase keys,
`input`/`output` as raw strings (JSON text for a logged structure, the text
itself for a logged string), newest `startTime` first.

A record's trace: a root (SPAN, CHAIN or AGENT, named "rag-query") whose input
holds the question; a RETRIEVER "retrieval" with the raw candidates; a
RETRIEVER "rerank" whose output is the record's sources in order; a GENERATION
"answer" whose output holds the answer. Records without sources have no
RETRIEVER (a fallback answer). The shapes rotate over the records so the demo
exercises the whole convention: five answer shapes, seven source-list shapes,
five root inputs, three root types, metadata as native JSON (SDK 5) or as
JSON-encoded strings (older SDKs), on the root or on the generation, with or
without the SDK's `resourceAttributes` / `scope` keys, and a query-rewrite
GENERATION before retrieval in some traces.

Ids are OTel-style hex derived from the record's trace_id:
    traceId = sha256(trace_id)[:32]
    id      = sha256(trace_id + "/" + role)[:16],
              role in root, rewrite, retrieval, rerank, answer
The record's observation_id is, conceptually, the "answer" generation's id.
The root keeps the record's timestamp as its startTime; children start 100-900
ms later. A few extra traces (keys `demo-*`, same id scheme) cover what the
observer must skip or handle specially.

demo_traffic.jsonl lays out an hour of production traffic made of copies of the
answers above, dense enough for the default alert rules to decide (20 to 50
answers of one environment and query type in a 15- or 30-minute window): one
line a copy, `{"at": startTime of its root, "of": traceId it copies}`, in time
order. `observer demo` makes each copy when it reads the file (ids of its own,
times moved to `at`: observer.app.demo_run), so the package holds the hour in
kilobytes. TRAFFIC_FROM and the lines above it say what the hour holds.

Deterministic: same input, same bytes. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RECORDS = REPO / "examples" / "records.jsonl"
OUT = REPO / "observer" / "data" / "demo_traces.jsonl"
TRAFFIC_OUT = REPO / "observer" / "data" / "demo_traffic.jsonl"

PROJECT_ID = "proj-kb-assistant"
TRACE_NAME = "rag-query"
RELEASES = {"production": "kb-assistant@1.8.2", "staging": "kb-assistant@1.9.0-rc.1"}

# What the Langfuse server puts into every observation's metadata for spans
# that arrive over OpenTelemetry (the SDKs export OTel): keys observer ignores.
RESOURCE_ATTRIBUTES = {
    "service.name": "kb-assistant",
    "telemetry.sdk.language": "python",
    "telemetry.sdk.name": "opentelemetry",
    "telemetry.sdk.version": "1.38.0",
}

Json = Any
Obs = dict[str, Any]


# --- ids, numbers and times, all derived from hashes -------------------------


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def trace_hex(key: str) -> str:
    """Langfuse traceId of a record's trace_id (or of a demo key): 32 hex."""
    return _sha(key)[:32]


def obs_hex(key: str, role: str) -> str:
    """Observation id of one role in a trace: 16 hex, like an OTel span id."""
    return _sha(f"{key}/{role}")[:16]


def _pick(key: str, salt: str, low: int, high: int) -> int:
    """A deterministic integer in [low, high]."""
    return low + int(_sha(f"{key}#{salt}")[:8], 16) % (high - low + 1)


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _ms(moment: datetime, millis: int) -> datetime:
    return moment + timedelta(milliseconds=millis)


# --- how an app logs things ----------------------------------------------------


def _raw(value: Json) -> str | None:
    """An input/output as the API returns it: a str as-is, else JSON text."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _parses_as_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _sdk_string(value: Json) -> Json:
    """A metadata value as older SDKs send it: str as-is, anything else JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def _scope(sdk_version: str) -> dict[str, Json]:
    return {"name": "langfuse-sdk", "version": sdk_version, "attributes": {}}


@dataclass(frozen=True, slots=True)
class Style:
    """How one trace is logged; rotated over the records."""

    answer_shape: str  # string | object | message | messages | choices
    answer_key: str  # key of the "object" shape: content | text | answer
    root_input: str  # question | query | input | message | text
    root_type: str  # SPAN | CHAIN | AGENT
    sources_shape: str  # see SOURCE_SHAPES
    metadata_strings: bool  # older SDK: non-string values JSON-encoded
    sdk_keys: bool  # resourceAttributes / scope present in metadata
    flags_on_generation: bool  # flags/context on the generation, not the root
    rewrite: bool  # a query-rewrite GENERATION before retrieval


ANSWER_SHAPES = ("string", "object", "message", "messages", "choices")
ANSWER_KEYS = ("content", "text", "answer")
ROOT_INPUTS = ("question", "query", "text", "input", "message")
ROOT_TYPES = ("SPAN", "CHAIN", "AGENT")
SOURCE_SHAPES = (
    "list",  # [{chunk_id, doc_id, title, text, score, text_hash}]
    "documents",  # {"documents": [same]}
    "langchain_documents",  # {"documents": [{page_content, metadata{...}}]}
    "langchain_list",  # [{page_content, metadata{...}}]
    "nodes",  # {"nodes": [{id, text, score, metadata{doc_id, title}}]}
    "chunks_rerank_score",  # {"chunks": [{chunk_id, ..., content, rerank_score}]}
    "list_rerank_score",  # [{chunk_id, ..., text, rerank_score, text_hash}]
)


def style_for(index: int, with_sources_index: int) -> Style:
    """Round-robin on independent strides so every shape gets a fair share."""
    j = with_sources_index
    return Style(
        answer_shape=ANSWER_SHAPES[index % 5],
        answer_key=ANSWER_KEYS[(index // 5) % 3],
        root_input=ROOT_INPUTS[(index // 5) % 5],
        root_type=ROOT_TYPES[index % 3],
        sources_shape=SOURCE_SHAPES[j % 7] if j >= 0 else "none",
        metadata_strings=(index // 5) % 2 == 1,
        sdk_keys=index % 4 in (1, 2),
        flags_on_generation=index % 4 == 3,
        rewrite=j >= 0 and j % 6 == 4,
    )


def _first_sentence(answer: str) -> str:
    cuts = [p + 1 for p in (answer.find("。"), answer.find(". ")) if p > 0]
    short = answer[: min(cuts)] if cuts else answer[: len(answer) // 2]
    return short if short and short != answer else answer + " (draft)"


def answer_output(answer: str, style: Style) -> Json:
    """The generation's output as the app or its integration records it."""
    shape = style.answer_shape
    if shape == "string" and not _parses_as_json(answer):
        return answer
    if shape == "message":
        return {"role": "assistant", "content": answer}
    if shape == "messages":  # n=2: several choices, the first one is used
        return [
            {"role": "assistant", "content": answer},
            {"role": "assistant", "content": _first_sentence(answer)},
        ]
    if shape == "choices":
        return {
            "id": "chatcmpl-" + _sha(answer)[:24],
            "object": "chat.completion",
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "finish_reason": "stop",
                }
            ],
        }
    return {style.answer_key: answer}


def root_input(question: str, style: Style) -> Json:
    if style.root_input == "text" and not _parses_as_json(question):
        return question
    key = "question" if style.root_input == "text" else style.root_input
    return {key: question}


def _meta_of(source: dict[str, Json], score_key: str, with_ids: bool = True) -> dict[str, Json]:
    meta: dict[str, Json] = {}
    if with_ids:
        meta["chunk_id"] = source.get("chunk_id")
    meta["doc_id"] = source.get("doc_id")
    meta["title"] = source.get("title")
    if score_key:
        meta[score_key] = source.get("score")
    if source.get("text_hash") is not None:
        meta["text_hash"] = source["text_hash"]
    if source.get("origin", "kb") != "kb":
        meta["origin"] = source["origin"]
    return meta


def _item(source: dict[str, Json], shape: str, rerank_key: bool) -> dict[str, Json]:
    """One source as the retrieval framework of `shape` serialises it."""
    text = source["text"]
    score_key = "rerank_score" if rerank_key else "score"
    if shape in ("langchain_documents", "langchain_list"):
        return {
            "page_content": text,
            "metadata": _meta_of(source, "relevance_score"),
            "type": "Document",
        }
    if shape == "nodes":
        item: dict[str, Json] = {"id": source.get("chunk_id"), "text": text}
        item["score"] = source.get("score")
        item["metadata"] = _meta_of(source, "", with_ids=False)
        return item
    item = {
        "chunk_id": source.get("chunk_id"),
        "doc_id": source.get("doc_id"),
        "title": source.get("title"),
        ("content" if shape == "chunks_rerank_score" else "text"): text,
        score_key: source.get("score"),
    }
    if shape != "chunks_rerank_score":
        item["text_hash"] = source.get("text_hash")
    if source.get("origin", "kb") != "kb":
        item["origin"] = source["origin"]
    return item


def sources_output(sources: list[dict[str, Json]], shape: str, reranked: bool) -> Json:
    """A RETRIEVER output; `reranked` False is the raw candidate list."""
    rerank_key = reranked and shape in ("chunks_rerank_score", "list_rerank_score")
    items = [_item(source, shape, rerank_key) for source in sources]
    if shape in ("documents", "langchain_documents"):
        return {"documents": items}
    if shape == "nodes":
        return {"nodes": items}
    if shape == "chunks_rerank_score":
        return {"chunks": items}
    return items


# --- building observations -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceInfo:
    trace_id: str
    environment: str
    user_id: str | None
    session_id: str | None
    tags: tuple[str, ...]
    release: str | None
    trace_name: str


def observation(
    info: TraceInfo,
    *,
    oid: str,
    parent: str | None,
    type_: str,
    name: str,
    start: datetime,
    end: datetime,
    input_: Json,
    output: Json,
    metadata: dict[str, Json],
    completion_start: datetime | None = None,
    level: str = "DEFAULT",
    status_message: str | None = None,
) -> Obs:
    updated = _ms(end, _pick(oid, "updated", 1000, 2000))
    return {
        "id": oid,
        "traceId": info.trace_id,
        "startTime": _iso(start),
        "endTime": _iso(end),
        "projectId": PROJECT_ID,
        "parentObservationId": parent,
        "type": type_,
        "name": name,
        "level": level,
        "statusMessage": status_message,
        "version": None,
        "environment": info.environment,
        "bookmarked": False,
        "public": False,
        "userId": info.user_id,
        "sessionId": info.session_id,
        "isRootObservation": parent is None,
        "completionStartTime": _iso(completion_start) if completion_start else None,
        "createdAt": _iso(start),
        "updatedAt": _iso(updated),
        "input": _raw(input_),
        "output": _raw(output),
        "metadata": metadata,
        "tags": list(info.tags),
        "release": info.release,
        "traceName": info.trace_name,
    }


def _language(record: dict[str, Json]) -> str:
    return "zh" if str(record["trace_id"]).startswith("tr-zh") else "en"


def _numbered_context(sources: list[dict[str, Json]]) -> str:
    return "\n\n".join(
        f"[{n}] {s.get('title') or s.get('doc_id') or ''}\n{s['text']}"
        for n, s in enumerate(sources, 1)
    )


def _prompt(record: dict[str, Json], sources: list[dict[str, Json]]) -> list[dict[str, str]]:
    question = record["question"]
    context = record.get("context") or _numbered_context(sources)
    if _language(record) == "zh":
        system = "你是公司知识库助手。只依据参考资料回答，用 [n] 标注出处；资料不足时直接说明。"
        user = f"参考资料：\n{context}\n\n问题：{question}" if sources else f"问题：{question}"
    else:
        system = (
            "You are the company knowledge-base assistant. Answer only from the "
            "sources and cite them as [n]; say so when they do not cover the question."
        )
        user = f"Sources:\n{context}\n\nQuestion: {question}" if sources else question
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _candidates(
    record: dict[str, Json], pool: dict[str, list[dict[str, Json]]]
) -> list[dict[str, Json]]:
    """The raw retrieval hits: the sources plus distractors, by similarity."""
    key = str(record["trace_id"])
    sources: list[dict[str, Json]] = record["sources"]
    rerank_scores = record.get("rerank_scores")
    extra = (
        max(len(rerank_scores) - len(sources), 0)
        if rerank_scores
        else _pick(key, "distractors", 1, 3)
    )
    taken = {s.get("chunk_id") for s in sources}
    others = [c for c in pool[_language(record)] if c.get("chunk_id") not in taken]
    start = _pick(key, "pool", 0, max(len(others) - 1, 0))
    distractors: list[dict[str, Json]] = []
    for offset in range(len(others) if extra else 0):
        candidate = others[(start + offset * 7) % len(others)]
        if candidate not in distractors:
            distractors.append(candidate)
        if len(distractors) == extra:
            break
    # An app that records no scores records none at either stage: the record's sources
    # without a score are no better known in the raw hits (docs/signals.md#unknown-is-not-zero).
    scored = any(s.get("score") is not None for s in sources) or not sources
    hits = [
        {**s, "score": _pick(key, f"sim{n}", 520, 890) / 1000 if scored else None}
        for n, s in enumerate(sources)
    ] + [
        {
            **s,
            "score": _pick(key, f"dsim{n}", 300, 600) / 1000 if scored else None,
            "text_hash": None,
        }
        for n, s in enumerate(distractors)
    ]
    hits.sort(key=lambda hit: (-(hit["score"] or 0.0), str(hit.get("chunk_id"))))
    return hits


def _metadata(values: dict[str, Json], style: Style, sdk_version: str) -> dict[str, Json]:
    meta = {
        k: (_sdk_string(v) if style.metadata_strings else v)
        for k, v in values.items()
        if v is not None
    }
    if style.sdk_keys:
        meta["resourceAttributes"] = dict(RESOURCE_ATTRIBUTES)
        meta["scope"] = _scope(sdk_version)
    return meta


def record_trace(
    record: dict[str, Json],
    style: Style,
    pool: dict[str, list[dict[str, Json]]],
    *,
    key: str | None = None,
) -> list[Obs]:
    """One trace for one RagRecord, in the default trace convention."""
    key = key or str(record["trace_id"])
    environment = record.get("environment") or "default"
    sessioned = _pick(key, "session", 0, 2) == 0
    info = TraceInfo(
        trace_id=trace_hex(key),
        environment=environment,
        user_id=f"u{_pick(key, 'user', 1, 40)}",
        session_id=f"sess-{_sha(key + '/session')[:12]}" if sessioned else None,
        tags=("rag",),
        release=RELEASES.get(environment),
        trace_name=record.get("trace_name", TRACE_NAME),
    )
    sdk_version = "3.6.2" if style.metadata_strings else "5.0.4"
    sources: list[dict[str, Json]] = record["sources"]
    root_id = obs_hex(key, "root")
    t0 = _parse_time(record["timestamp"])

    bucket = {"query_type": record.get("query_type")}
    grade = record.get("crag_grade", record.get("app_crag_grade"))
    flags = {
        "needs_fallback": record.get("needs_fallback"),
        "low_confidence": record.get("low_confidence"),
        "rerank_scores": record.get("rerank_scores"),
        "crag_grade": grade,
        "context": record.get("context"),
    }
    root_values = {**bucket, **({} if style.flags_on_generation else flags)}
    root_values.update(record.get("extra_root_metadata", {}))
    gen_values = flags if style.flags_on_generation else {}

    children: list[Obs] = []
    cursor = _ms(t0, _pick(key, "first", 100, 180))
    if style.rewrite:
        end = _ms(cursor, _pick(key, "rewrite", 60, 120))
        children.append(
            observation(
                info,
                oid=obs_hex(key, "rewrite"),
                parent=root_id,
                type_="GENERATION",
                name="rewrite-query",
                start=cursor,
                end=end,
                input_=[{"role": "user", "content": record["question"]}],
                output=record["question"],
                metadata=_metadata({}, style, sdk_version),
            )
        )
        cursor = _ms(end, _pick(key, "gap0", 5, 20))
    if sources:
        candidates = _candidates(record, pool)
        query = {"query": record["question"], "top_k": len(candidates)}
        end = _ms(cursor, _pick(key, "retrieval", 60, 140))
        children.append(
            observation(
                info,
                oid=obs_hex(key, "retrieval"),
                parent=root_id,
                type_="RETRIEVER",
                name="retrieval",
                start=cursor,
                end=end,
                input_=query,
                output=sources_output(candidates, style.sources_shape, False),
                metadata=_metadata({}, style, sdk_version),
            )
        )
        cursor = _ms(end, _pick(key, "gap1", 5, 20))
        end = _ms(cursor, _pick(key, "rerank", 40, 120))
        children.append(
            observation(
                info,
                oid=obs_hex(key, "rerank"),
                parent=root_id,
                type_="RETRIEVER",
                name="rerank",
                start=cursor,
                end=end,
                input_={"query": record["question"], "top_n": len(sources)},
                output=record.get(
                    "rerank_output", sources_output(sources, style.sources_shape, True)
                ),
                metadata=_metadata({}, style, sdk_version),
            )
        )
        cursor = _ms(end, _pick(key, "gap2", 10, 60))
    else:
        cursor = _ms(t0, _pick(key, "first", 300, 900))
    generation_end = _ms(cursor, _pick(key, "llm", 1500, 6000))
    output = record.get("answer_output", answer_output(record["answer"], style))
    children.append(
        observation(
            info,
            oid=obs_hex(key, "answer"),
            parent=root_id,
            type_="GENERATION",
            name="answer",
            start=cursor,
            end=generation_end,
            # A masked prompt (Langfuse's masking, or an app that logs none): only the
            # rules can say which documents the model saw.
            input_=record["answer_input"] if "answer_input" in record else _prompt(record, sources),
            output=output,
            metadata=_metadata(gen_values, style, sdk_version),
            completion_start=_ms(cursor, _pick(key, "ttft", 250, 900))
            if output is not None
            else None,
            level=record.get("answer_level", "DEFAULT"),
            status_message=record.get("answer_status"),
        )
    )
    root = observation(
        info,
        oid=root_id,
        parent=None,
        type_=style.root_type,
        name=info.trace_name,
        start=t0,
        end=_ms(generation_end, _pick(key, "tail", 3, 40)),
        input_=root_input(record["question"], style),
        output=None,
        metadata=_metadata(root_values, style, sdk_version),
    )
    return [root, *children]


# --- the traces observer must skip (or handle specially) ----------------------

DEMO_STYLE = Style(
    answer_shape="string",
    answer_key="content",
    root_input="question",
    root_type="SPAN",
    sources_shape="list",
    metadata_strings=False,
    sdk_keys=True,
    flags_on_generation=False,
    rewrite=False,
)

_TOKEN_SOURCES = [
    {
        "chunk_id": "kb-api-tokens#c2",
        "doc_id": "kb-api-tokens",
        "title": "API tokens",
        "text": "To rotate a token, open Settings > API tokens and click Rotate. The old "
        "token keeps working for 24 hours so you can roll the new one out.",
        "score": 0.88,
        "text_hash": None,
        "origin": "kb",
    },
    {
        "chunk_id": "kb-api-tokens#c1",
        "doc_id": "kb-api-tokens",
        "title": "API tokens",
        "text": "API tokens are created per workspace by admins and carry the scopes "
        "chosen at creation time.",
        "score": 0.57,
        "text_hash": None,
        "origin": "kb",
    },
]


def _demo_rag(key: str, timestamp: str, question: str, answer: str, **overrides: Json) -> list[Obs]:
    record: dict[str, Json] = {
        "trace_id": key,
        "timestamp": timestamp,
        "environment": "production",
        "question": question,
        "answer": answer,
        "sources": _TOKEN_SOURCES,
        "query_type": "howto",
        **overrides,
    }
    record.setdefault("extra_root_metadata", {})["demo_case"] = key
    return record_trace(record, DEMO_STYLE, {"en": _TOKEN_SOURCES, "zh": _TOKEN_SOURCES})


def _simple_trace(
    key: str,
    timestamp: str,
    *,
    root_name: str,
    environment: str,
    root_input: Json,
    root_output: Json,
    metadata: dict[str, Json],
    children: list[tuple[str, str, Json, Json]],
    tags: tuple[str, ...] = (),
) -> list[Obs]:
    """A root plus (role/name, type, input, output) children, one after another."""
    info = TraceInfo(
        trace_id=trace_hex(key),
        environment=environment,
        user_id=None,
        session_id=None,
        tags=tags,
        release=None,
        trace_name=root_name,
    )
    root_id = obs_hex(key, "root")
    t0 = _parse_time(timestamp)
    cursor = _ms(t0, _pick(key, "first", 100, 300))
    observations: list[Obs] = []
    for name, type_, input_, output in children:
        end = _ms(cursor, _pick(key, name, 40, 900 if type_ == "GENERATION" else 120))
        observations.append(
            observation(
                info,
                oid=obs_hex(key, name),
                parent=root_id,
                type_=type_,
                name=name,
                start=cursor,
                end=end,
                input_=input_,
                output=output,
                metadata=dict(metadata),
            )
        )
        cursor = _ms(end, _pick(key, name + "/gap", 5, 30))
    root = observation(
        info,
        oid=root_id,
        parent=None,
        type_="SPAN",
        name=root_name,
        start=t0,
        end=cursor,
        input_=root_input,
        output=root_output,
        metadata={**metadata, "demo_case": key},
    )
    return [root, *observations]


def demo_traces() -> dict[str, list[Obs]]:
    """Extra traces, by key; the comment says what observer must do with each."""
    token_q = "How do I rotate an API token?"
    token_a = (
        "Open Settings > API tokens and click Rotate [1]. The old token keeps "
        "working for 24 hours, so you can roll the new one out first [1]."
    )
    observer_meta: dict[str, Json] = {
        "resourceAttributes": {"service.name": "observer", "telemetry.sdk.language": "python"},
        "scope": {"name": "observer", "version": "0.1.0", "attributes": {}},
    }
    judge_prompt = (
        "Judge whether every claim of the answer is supported by the context.\n"
        f"Question: {token_q}\nContext: {_TOKEN_SOURCES[0]['text']}\nAnswer: {token_a}"
    )
    return {
        # skip: no_generation (a health-check span tree, no GENERATION)
        "demo-skip-no-generation": _simple_trace(
            "demo-skip-no-generation",
            "2026-11-28T03:00:00.000Z",
            root_name="health-check",
            environment="production",
            root_input=None,
            root_output={"status": "ok"},
            metadata={"scope": _scope("5.0.4")},
            children=[
                ("ping-vector-store", "SPAN", None, {"ok": True, "latency_ms": 12}),
                ("ping-llm", "SPAN", None, {"ok": True, "latency_ms": 85}),
            ],
            tags=("health",),
        ),
        # skip: malformed_sources (the rerank RETRIEVER's output is a string, and the prompt
        # is masked, so nothing shows which documents the model saw)
        "demo-skip-malformed-sources": _demo_rag(
            "demo-skip-malformed-sources",
            "2026-11-28T09:00:00.000Z",
            token_q,
            token_a,
            trace_name="rag-query-malformed-sources",
            rerank_output="not a list",
            answer_input=None,
        ),
        # skip: no_answer_text (the GENERATION timed out, output null)
        "demo-skip-no-answer-text": _demo_rag(
            "demo-skip-no-answer-text",
            "2026-11-28T13:00:00.000Z",
            token_q,
            "",
            trace_name="rag-query-empty-answer",
            answer_output=None,
            answer_level="ERROR",
            answer_status="Request timed out.",
        ),
        # never scored: Langfuse's own LLM-as-a-judge environment
        "demo-skip-llm-as-a-judge": _simple_trace(
            "demo-skip-llm-as-a-judge",
            "2026-11-28T16:30:00.000Z",
            root_name="llm-as-a-judge-faithfulness",
            environment="langfuse-llm-as-a-judge",
            root_input={"input": judge_prompt},
            root_output=None,
            metadata={},
            children=[
                (
                    "faithfulness-evaluator",
                    "GENERATION",
                    [{"role": "user", "content": judge_prompt}],
                    "Every claim in the answer is stated in the context. Score: 1",
                )
            ],
        ),
        # never scored: produced by observer itself (its judge calls)
        "demo-skip-observer-self": _simple_trace(
            "demo-skip-observer-self",
            "2026-11-28T20:00:00.000Z",
            root_name="observer.poll",
            environment="production",
            root_input={"fromStartTime": "2026-11-28T19:45:00.000Z", "limit": 200},
            root_output={"traces": 3, "scored": 3, "judged": 1},
            metadata=observer_meta,
            children=[
                (
                    "judge.extract-claims",
                    "GENERATION",
                    [{"role": "user", "content": f"Extract the atomic claims.\n{token_a}"}],
                    {"role": "assistant", "content": "1. Tokens are rotated in Settings."},
                ),
                (
                    "judge.verify",
                    "GENERATION",
                    [{"role": "user", "content": "Verify each claim against the context."}],
                    {"role": "assistant", "content": "claim 1: context yes, cited yes"},
                ),
            ],
        ),
        # scored: a refusal although retrieval found the answer (rerank top1 0.88, HIGH):
        # abstained and over_refusal (docs/signals.md#abstention-and-over-citation)
        "demo-over-refusal": _demo_rag(
            "demo-over-refusal",
            "2026-11-28T18:40:00.000Z",
            token_q,
            "Sorry, I couldn't find anything about rotating API tokens in the documentation. "
            "Please ask your workspace admin.",
            trace_name="rag-query",
        ),
        # scored: a refusal in Chinese with retrieval in the gray zone: abstained, no over-refusal
        "demo-refusal-zh": _demo_rag(
            "demo-refusal-zh",
            "2026-11-28T19:10:00.000Z",
            "API 令牌过期后还能用多久？",
            "您好！很抱歉，知识库未匹配到相关内容，建议联系工作区管理员。",
            trace_name="rag-query",
            query_type="factual",
            sources=[{**_TOKEN_SOURCES[1], "score": 0.41}],
        ),
        # scored: the answer is the JSON number 42 logged as "42" -> text "42"
        "demo-numeric-answer": _demo_rag(
            "demo-numeric-answer",
            "2026-11-28T21:15:00.000Z",
            "What does Nimbus answer to the ultimate question of life, the universe "
            "and everything? Reply with the number only.",
            "42",
            trace_name="rag-query-numeric-answer",
            query_type="factual",
            crag_grade="HIGH",
            answer_output=42,
            sources=[
                {
                    "chunk_id": "kb-easter-eggs#c1",
                    "doc_id": "kb-easter-eggs",
                    "title": "Easter eggs",
                    "text": "Ask Nimbus for the answer to the ultimate question of life, "
                    "the universe and everything and it replies with 42.",
                    "score": 0.91,
                    "text_hash": None,
                    "origin": "kb",
                }
            ],
        ),
    }


# --- the evening's traffic: copies of the answers, laid densely ------------------

# 20 production answers a minute from 22:40 to 23:40 (the records, round-robin, the
# ungrounded ones left out): the main query types reach 50 answers in 15 minutes. From
# 23:00 to 23:12 one policy answer in three is one of the ungrounded policy answers
# (stated without the citations their sources would give): `ungrounded_rate_high` fires
# for production/policy, and resolves once that stretch has left its 15-minute window.
TRAFFIC_FROM = "2026-11-28T22:40:00.000Z"
TRAFFIC_MINUTES = 60
TRAFFIC_PER_MINUTE = 20
BAD_MINUTES = (20, 32)  # from, to: minutes into the hour
# The records observer finds ungrounded (its `ungrounded` score is 1 on these five of the
# 77 answers above). The bad stretch replays the three that are production policy answers.
UNGROUNDED = ("tr-en-016", "tr-en-035", "tr-en-037", "tr-zh-013", "tr-zh-037")
BAD_POLICY = ("tr-en-016", "tr-en-037", "tr-zh-013")


def traffic(records: list[dict[str, Json]]) -> list[dict[str, str]]:
    """The copies, in time order: where each root starts, and the traceId it copies."""
    by_id = {str(r["trace_id"]): r for r in records}
    good = sorted(
        (
            r
            for r in records
            if r.get("environment") == "production" and r["trace_id"] not in UNGROUNDED
        ),
        key=lambda r: _sha(f"{r['trace_id']}#traffic"),
    )
    start = _parse_time(TRAFFIC_FROM)
    spacing_ms = 60_000 // TRAFFIC_PER_MINUTE
    copies: list[dict[str, str]] = []
    policy = 0
    for n in range(TRAFFIC_MINUTES * TRAFFIC_PER_MINUTE):
        record = good[n % len(good)]
        if record.get("query_type") == "policy":
            policy += 1
            bad = BAD_MINUTES[0] <= n // TRAFFIC_PER_MINUTE < BAD_MINUTES[1]
            if bad and policy % 3 == 0:
                record = by_id[BAD_POLICY[(policy // 3) % len(BAD_POLICY)]]
        at = _ms(start, n * spacing_ms + _pick(f"copy-{n}", "at", 0, spacing_ms - 1))
        copies.append({"at": _iso(at), "of": trace_hex(str(record["trace_id"]))})
    return copies


# --- main ----------------------------------------------------------------------


def _newest_first(obs: Obs) -> tuple[str, str, str]:
    """As the API lists observations: newest startTime first (ties: by id)."""
    return (obs["startTime"], obs["traceId"], obs["id"])


def build(records: list[dict[str, Json]]) -> list[Obs]:
    pool: dict[str, list[dict[str, Json]]] = {"en": [], "zh": []}
    seen: set[str] = set()
    for record in records:
        for source in record["sources"]:
            if source.get("chunk_id") not in seen:
                seen.add(source.get("chunk_id"))
                pool[_language(record)].append(source)
    for chunks in pool.values():
        chunks.sort(key=lambda s: str(s.get("chunk_id")))

    observations: list[Obs] = []
    with_sources = 0
    for index, record in enumerate(records):
        j = -1
        if record["sources"]:
            j, with_sources = with_sources, with_sources + 1
        observations.extend(record_trace(record, style_for(index, j), pool))
    for trace in demo_traces().values():
        observations.extend(trace)

    observations.sort(key=_newest_first, reverse=True)
    return observations


def main() -> int:
    records = [json.loads(line) for line in RECORDS.read_text("utf-8").splitlines() if line]
    observations = build(records)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8", newline="\n") as out:
        for obs in observations:
            out.write(json.dumps(obs, ensure_ascii=False) + "\n")
    traces = len({o["traceId"] for o in observations})
    print(
        f"wrote {len(observations)} observations in {traces} traces to {OUT.relative_to(REPO)}",
        file=sys.stderr,
    )
    copies = traffic(records)
    with TRAFFIC_OUT.open("w", encoding="utf-8", newline="\n") as out:
        for copy in copies:
            out.write(json.dumps(copy) + "\n")
    print(f"wrote {len(copies)} copies to {TRAFFIC_OUT.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
