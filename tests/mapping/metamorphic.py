"""Transformations real libraries make to a trace, applied to captured traces.

Each takes a trace (the observations as the Observations API v2 returns them: `input` and
`output` JSON text, `metadata` an object) and returns a new one, as another library, an
upgrade or a race would have recorded the same answer: scores dropped, clocks tied,
documents moved into a tool message of the prompt (JSON, a Python repr, a text block),
a scoreless copy added, outputs JSON-encoded twice, keys in camelCase or one level deeper,
the root's output gone, a tool-calling generation before the final one. Used by
`test_metamorphic.py` over every capture of tests/instrumentations/.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from collections.abc import Callable
from typing import Any

from observer.mapping import MappingRules, read_trace
from observer.model import RagRecord

Trace = list[dict[str, Any]]
Transform = Callable[[Trace], Trace]

_SCORE_KEYS = re.compile(
    r"^(score|scores|rerank_?scores?|relevance_?scores?|similarity|distance)$", re.IGNORECASE
)
_OPENINFERENCE_SCORE = re.compile(r"\.document\.score$")


def _decoded(text: Any) -> Any:
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _encoded(value: Any, like: Any) -> Any:
    """`value` in the form the original field had: JSON text for a string field that held
    JSON, the value itself otherwise."""
    if isinstance(like, str) and not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return value


def _walk(
    value: Any,
    change: Callable[[dict[str, Any]], dict[str, Any]],
    text: Callable[[str], str] = lambda t: t,
) -> Any:
    """`change` on every object of a value, JSON text and Python reprs inside strings
    included; `text` on every other string."""
    if isinstance(value, dict):
        return change({k: _walk(v, change, text) for k, v in value.items()})
    if isinstance(value, list):
        return [_walk(v, change, text) for v in value]
    if isinstance(value, str) and value[:1] in "[{":
        inner = _decoded(value)
        if not isinstance(inner, str):
            return json.dumps(_walk(inner, change, text), ensure_ascii=False)
        try:  # a Python repr (the OpenAI Agents SDK's tool messages)
            literal = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return text(value)
        return repr(_walk(literal, change, text))
    if isinstance(value, str):
        return text(value)
    return value


def _on_fields(trace: Trace, fields: tuple[str, ...], change: Callable[[Any], Any]) -> Trace:
    out = copy.deepcopy(trace)
    for observation in out:
        for name in fields:
            raw = observation.get(name)
            if raw is None:
                continue
            observation[name] = _encoded(change(_decoded(raw)), raw)
    return out


# A score written inside a text (a prompt flattened into lines, a tool's text).
_SCORE_IN_TEXT = (
    re.compile(
        r""",\s*\\?["'](?:score|rerank_score|relevance_score|similarity)\\?["']\s*:\s*[-0-9.eE]+"""
    ),
    re.compile(
        r"""\\?["'](?:score|rerank_score|relevance_score|similarity)\\?["']\s*:\s*[-0-9.eE]+\s*,\s*"""
    ),
)


def _strip_text(text: str) -> str:
    for pattern in _SCORE_IN_TEXT:
        text = pattern.sub("", text)
    return text


def drop_scores(trace: Trace) -> Trace:
    """Every retrieval score gone: a retriever traced without them."""

    def strip(obj: dict[str, Any]) -> dict[str, Any]:
        return {
            k: v
            for k, v in obj.items()
            if not (_SCORE_KEYS.match(k) or _OPENINFERENCE_SCORE.search(k))
        }

    def drop(value: Any) -> Any:
        return _walk(value, strip, _strip_text)

    return _on_fields(trace, ("output", "input", "metadata"), drop)


def tie_timestamps(trace: Trace) -> Trace:
    """Every observation started and ended in the same millisecond (a cache hit, a fast
    local model, a coarse clock)."""
    out = copy.deepcopy(trace)
    moment = min(o["startTime"] for o in out if o.get("startTime"))
    for observation in out:
        for name in ("startTime", "endTime", "completionStartTime"):
            if observation.get(name) is not None:
                observation[name] = moment
    return out


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_case_keys(trace: Trace) -> Trace:
    """Every key of the outputs in camelCase (a JavaScript app's documents)."""

    def camel(obj: dict[str, Any]) -> dict[str, Any]:
        return {_camel(k) if isinstance(k, str) else k: v for k, v in obj.items()}

    return _on_fields(trace, ("output",), lambda v: _walk(v, camel))


def _holds_documents(value: Any) -> bool:
    if isinstance(value, list):
        return bool(value) and all(
            isinstance(i, dict)
            and "role" not in i  # a chat message is not a document
            and any(k in i for k in ("text", "content", "page_content"))
            for i in value
        )
    if isinstance(value, dict):
        return any(_holds_documents(v) for v in value.values())
    return False


def nest_outputs(trace: Trace) -> Trace:
    """Outputs that hold documents one level deeper (`{"result": <output>}`); a model's
    completion stays as it is."""
    out = copy.deepcopy(trace)
    for observation in out:
        if observation.get("type") == "GENERATION":
            continue
        value = _decoded(observation.get("output"))
        if _holds_documents(value):
            observation["output"] = json.dumps({"result": value}, ensure_ascii=False)
    return out


_TEXTS = ("text", "content", "page_content")


def _nested(item: dict[str, Any]) -> dict[str, Any]:
    text = next(k for k in _TEXTS if k in item)
    inner = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
    rest = {k: v for k, v in item.items() if k not in (text, "metadata")}
    return {text: item[text], "metadata": {**rest, **inner}}


def nest_document_fields(trace: Trace) -> Trace:
    """Every document's fields but its text one level deeper, in its `metadata` (a
    LangChain Document)."""

    def nest(value: Any) -> Any:
        if isinstance(value, list) and _holds_documents(value):
            return [_nested(item) for item in value]
        if isinstance(value, dict):
            return {k: nest(v) for k, v in value.items()}
        return value

    return _on_fields(trace, ("output",), nest)


def encode_outputs_twice(trace: Trace) -> Trace:
    """Every output JSON-encoded once more (a string of JSON text)."""
    out = copy.deepcopy(trace)
    for observation in out:
        if isinstance(observation.get("output"), str):
            observation["output"] = json.dumps(observation["output"], ensure_ascii=False)
    return out


def drop_root_output(trace: Trace) -> Trace:
    """The root records no output (an agent workflow's root)."""
    out = copy.deepcopy(trace)
    for observation in out:
        if observation.get("isRootObservation"):
            observation["output"] = None
    return out


def _answering(trace: Trace) -> tuple[RagRecord, dict[str, Any]] | None:
    trace_id = trace[0]["traceId"]
    read = read_trace(trace_id, trace, MappingRules())
    if not isinstance(read.result, RagRecord):
        return None
    generation = next(o for o in trace if o["id"] == read.result.observation_id)
    return read.result, generation


def tool_call_before_answer(trace: Trace) -> Trace:
    """A generation that called a tool, beside the final one and started just before it."""
    found = _answering(trace)
    if found is None or found[1].get("isRootObservation"):
        return trace  # a trace that is one generation has no call before it
    _, final = found
    call = copy.deepcopy(final)
    call["id"] = f"{final['id'][:12]}call"
    # It ended as the final one started: it came before (tied clocks are another transform).
    call["startTime"] = call["endTime"] = final["startTime"]
    call["output"] = json.dumps(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"query": "x"}'},
                }
            ],
        }
    )
    return [*copy.deepcopy(trace), call]


def _documents_of(record: RagRecord, form: str) -> Any:
    docs = [
        {
            k: v
            for k, v in (
                ("chunk_id", s.chunk_id),
                ("doc_id", s.doc_id),
                ("title", s.title),
                ("text", s.text),
                ("score", s.score),
            )
            if v is not None
        }
        for s in record.sources
    ]
    if form == "json":
        return json.dumps(docs, ensure_ascii=False)
    if form == "repr":
        return repr(docs)
    if form == "json_in_json":
        return json.dumps(json.dumps(docs, ensure_ascii=False))
    return "\n\n".join(s.text for s in record.sources)


def _without_documents(trace: Trace, keep: set[str]) -> Trace:
    """The trace without the observations (not the root, not `keep`) that hold documents,
    their children moved to their parent."""
    gone = {
        o["id"]: o.get("parentObservationId")
        for o in trace
        if not o.get("isRootObservation")
        and o["id"] not in keep
        and (
            _holds_documents(_decoded(o.get("output")))
            or any("retrieval.documents" in k or "reranker" in k for k in (o.get("metadata") or {}))
        )
    }
    out = []
    for observation in copy.deepcopy(trace):
        if observation["id"] in gone:
            continue
        parent = observation.get("parentObservationId")
        while parent in gone:
            parent = gone[parent]
        observation["parentObservationId"] = parent
        out.append(observation)
    return out


def _tool_message(payload: Any, shape: str) -> dict[str, Any]:
    """A tool's result as each API puts it in the chat (OpenAI, Anthropic, Gemini, GenAI)."""
    if shape == "anthropic":
        block = {"type": "tool_result", "tool_use_id": "toolu_1", "content": payload}
        return {"role": "user", "content": [block]}
    if shape == "gemini":
        response = {"name": "search", "response": {"result": _decoded(payload)}}
        return {"role": "function", "parts": [{"functionResponse": response}]}
    if shape == "genai":
        part = {"type": "tool_call_response", "id": "call_1", "response": payload}
        return {"role": "tool", "parts": [part]}
    return {"role": "tool", "tool_call_id": "call_1", "content": payload}


def documents_in_a_tool_message(form: str, shape: str = "openai") -> Transform:
    """The documents reach the model as a tool's result in its chat input (an agent's
    search tool), and no span holds them."""

    def move(trace: Trace) -> Trace:
        found = _answering(trace)
        if found is None or not found[0].sources:
            return trace
        record, final = found
        out = _without_documents(trace, {final["id"]})
        for observation in out:
            if observation["id"] == final["id"]:
                asked = _decoded(observation.get("input"))
                tool = _tool_message(_documents_of(record, form), shape)
                if isinstance(asked, dict) and isinstance(asked.get("messages"), list):
                    asked = {**asked, "messages": [*asked["messages"], tool]}
                elif isinstance(asked, list):
                    asked = [*asked, tool]
                else:
                    asked = {"messages": [{"role": "user", "content": asked}, tool]}
                observation["input"] = json.dumps(asked, ensure_ascii=False)
        return out

    move.__name__ = f"documents_in_a_{shape}_tool_result_as_{form}"
    return move


def scoreless_copy(trace: Trace) -> Trace:
    """A second copy of the documents, texts only, under the root (a graph state, a tool's
    log, OpenInference's metadata beside a retriever's output)."""
    found = _answering(trace)
    if found is None or not found[0].sources:
        return trace
    record, _ = found
    root = next(o for o in trace if o.get("isRootObservation"))
    copy_span = {
        **copy.deepcopy(root),
        "id": "copy00000000copy",
        "type": "SPAN",
        "name": "log-documents",
        "isRootObservation": False,
        "parentObservationId": root["id"],
        "input": None,
        "output": json.dumps({"documents": [{"text": s.text} for s in record.sources]}),
        "metadata": {},
    }
    return [*copy.deepcopy(trace), copy_span]


TRANSFORMS: dict[str, Transform] = {
    "drop_scores": drop_scores,
    "tie_timestamps": tie_timestamps,
    "camel_case_keys": camel_case_keys,
    "nest_outputs": nest_outputs,
    "nest_document_fields": nest_document_fields,
    "encode_outputs_twice": encode_outputs_twice,
    "drop_root_output": drop_root_output,
    "tool_call_before_answer": tool_call_before_answer,
    "tool_message_json": documents_in_a_tool_message("json"),
    "tool_message_json_in_json": documents_in_a_tool_message("json_in_json"),
    "tool_message_repr": documents_in_a_tool_message("repr"),
    "tool_message_text": documents_in_a_tool_message("text"),
    "anthropic_tool_result_json": documents_in_a_tool_message("json", "anthropic"),
    "gemini_function_response": documents_in_a_tool_message("json", "gemini"),
    "genai_tool_call_response_repr": documents_in_a_tool_message("repr", "genai"),
    "scoreless_copy": scoreless_copy,
}
# Transforms that lose what the trace knew of scores or ids, and the scores that may go with
# it: the score signals (unknown), the concentration (no doc ids); never a changed value.
_SCORE_SIGNALS = frozenset(
    {"rerank_top1", "crag_grade", "confidence", "confidence_band", "ungrounded", "over_refusal"}
)
LOSSY: dict[str, frozenset[str]] = {
    "drop_scores": _SCORE_SIGNALS,
    "tool_message_text": _SCORE_SIGNALS | {"citation_concentration"},
}
