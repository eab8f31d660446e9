"""The observation type of a span: Langfuse's ``ObservationTypeMapperRegistry``.

A port of ``packages/shared/src/server/otel/ObservationTypeMapper.ts``: the first mapper
that maps, by priority (the order and the tables are the server's; observer.otlp.spans
cites the whole list).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from observer.otlp.values import OBSERVATION_TYPES

# ---- observation type (ObservationTypeMapper.ts) --------------------------------------------


def _meaningful(value: Any) -> bool:
    if value is None or value == "":
        return False
    if isinstance(value, list | dict):
        return len(value) > 0
    return True


def _valid_type(value: Any) -> str | None:
    if isinstance(value, str) and value.upper() in OBSERVATION_TYPES:
        return value.upper()
    return None


_DIRECT = {
    "span": "SPAN",
    "generation": "GENERATION",
    "event": "EVENT",
    "embedding": "EMBEDDING",
    "agent": "AGENT",
    "tool": "TOOL",
    "chain": "CHAIN",
    "retriever": "RETRIEVER",
    "guardrail": "GUARDRAIL",
    "evaluator": "EVALUATOR",
}
_OPENINFERENCE = {
    "CHAIN": "CHAIN",
    "RETRIEVER": "RETRIEVER",
    "LLM": "GENERATION",
    "EMBEDDING": "EMBEDDING",
    "AGENT": "AGENT",
    "TOOL": "TOOL",
    "GUARDRAIL": "GUARDRAIL",
    "EVALUATOR": "EVALUATOR",
}
_GENAI_OPERATION = {
    "chat": "GENERATION",
    "completion": "GENERATION",
    "text_completion": "GENERATION",
    "generate_content": "GENERATION",
    "generate": "GENERATION",
    "embeddings": "EMBEDDING",
    "invoke_agent": "AGENT",
    "create_agent": "AGENT",
    "execute_tool": "TOOL",
}
_GENKIT = {
    "background-model": "GENERATION",
    "model": "GENERATION",
    "embedder": "EMBEDDING",
    "tool": "TOOL",
    "tool.v2": "TOOL",
    "retriever": "RETRIEVER",
    "evaluator": "EVALUATOR",
}
_VERCEL_GENERATION = (
    "ai.generateText.doGenerate",
    "ai.streamText.doStream",
    "ai.generateObject.doGenerate",
    "ai.streamObject.doStream",
)
_VERCEL_EMBEDDING = ("ai.embedMany.doEmbed", "ai.embed.doEmbed")
_GENERATION_KEYS = (
    "langfuse.observation.model.name",
    "langfuse.observation.cost_details",
    "langfuse.observation.usage_details",
    "langfuse.observation.completion_start_time",
    "langfuse.observation.model.parameters",
    "langfuse.observation.prompt.name",
    "langfuse.observation.prompt.version",
)


def _vercel_matches(attributes: Mapping[str, Any], prefixes: Sequence[str]) -> bool:
    operation_name = attributes.get("operation.name")
    operation_id = attributes.get("ai.operationId")
    if _meaningful(operation_name) and any(str(operation_name).startswith(p) for p in prefixes):
        return True
    return _meaningful(operation_id) and operation_id in prefixes


def _simple(attributes: Mapping[str, Any], key: str, table: Mapping[str, str]) -> str | None:
    if key in attributes and _meaningful(attributes[key]):
        value = attributes[key]
        return _valid_type(table.get(value)) if isinstance(value, str) else None
    return None


def observation_type(  # noqa: C901 - a port of Langfuse's, branch for branch
    attributes: Mapping[str, Any],
    resource_attributes: Mapping[str, Any],
    scope: Mapping[str, Any],
    span_name: str,
) -> str:
    """``ObservationTypeMapperRegistry.mapToObservationType``."""
    # 0: Python SDK <= 3.3.0 spans with generation attributes
    if (
        attributes.get("langfuse.observation.type") == "span"
        and scope.get("name") == "langfuse-sdk"
        and resource_attributes.get("telemetry.sdk.language") == "python"
    ):
        version = scope.get("version")
        old = True
        if isinstance(version, str) and version:
            parts = version.split(".")
            try:
                major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
                old = not (major > 3 or (major == 3 and minor > 3))
            except ValueError:
                old = True  # NaN comparisons are false in JS: not newer
        if old and any(key in attributes for key in _GENERATION_KEYS):
            return "GENERATION"
    for key, table in (
        ("langfuse.observation.type", _DIRECT),  # 1
        ("openinference.span.kind", _OPENINFERENCE),  # 2
        ("gen_ai.operation.name", _GENAI_OPERATION),  # 3
        ("genkit:metadata:subtype", _GENKIT),  # 4
    ):
        mapped = _simple(attributes, key, table)
        if mapped:
            return mapped
    # 5: Vercel AI SDK generation/embedding operations with model information
    model_keys = (
        "langfuse.observation.model.name",
        "ai.model.id",
        "gen_ai.request.model",
        "gen_ai.response.model",
    )
    if any(_meaningful(attributes.get(k)) for k in model_keys) and _vercel_matches(
        attributes, _VERCEL_GENERATION + _VERCEL_EMBEDDING
    ):
        if _vercel_matches(attributes, _VERCEL_GENERATION):
            return "GENERATION"
        if _vercel_matches(attributes, _VERCEL_EMBEDDING):
            return "EMBEDDING"
    # 6: Vercel AI SDK span-like operations
    operation_name, operation_id = (
        attributes.get("operation.name"),
        attributes.get("ai.operationId"),
    )
    has_ai_operation = (_meaningful(operation_name) and str(operation_name).startswith("ai.")) or (
        _meaningful(operation_id) and str(operation_id).startswith("ai.")
    )
    if (
        has_ai_operation
        and not _vercel_matches(attributes, _VERCEL_GENERATION + _VERCEL_EMBEDDING)
        and _vercel_matches(attributes, ("ai.toolCall",))
    ):
        return "TOOL"
    # 7: GenAI tool calls (pydantic-ai sets no gen_ai.operation.name on them)
    if _meaningful(attributes.get("gen_ai.tool.name")) or _meaningful(
        attributes.get("gen_ai.tool.call.id")
    ):
        return "TOOL"
    # 8: Flue
    if _meaningful(attributes.get("flue.tool.name")) or _meaningful(
        attributes.get("flue.tool.call_id")
    ):
        return "TOOL"
    if _meaningful(attributes.get("flue.task.id")) or _meaningful(
        attributes.get("flue.task.agent")
    ):
        return "AGENT"
    # 9: LiveKit span names
    if scope.get("name") == "livekit-agents":
        if span_name in ("agent_turn", "start_agent_activity"):
            return "AGENT"
        if span_name == "function_tool":
            return "TOOL"
    # 10: model-based fallback
    for key in (
        "langfuse.observation.model.name",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "llm.model_name",
        "model",
    ):
        if _meaningful(attributes.get(key)):
            return "GENERATION"
    return "SPAN"
