"""A span's input and output: Langfuse's ``extractInputAndOutput`` (observation domain).

A port of the server's rules (``OtelIngestionProcessor.ts``), source by source in its
order; observer.otlp.spans cites the list. The keys an input or output came from are
left out of the attributes kept in metadata (``filtered_attributes``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from observer.otlp.values import (
    attributes_of,
    js_parse,
    js_stringify,
    json_payload,
    truthy,
)

# ---- input and output (extractInputAndOutput) -----------------------------------------------

_IO_KEYS = (
    "langfuse.trace.input",
    "langfuse.trace.output",
    "langfuse.observation.input",
    "langfuse.observation.output",
    "ai.prompt.messages",
    "ai.prompt",
    "ai.toolCall.args",
    "ai.response.text",
    "ai.result.text",
    "ai.toolCall.result",
    "ai.response.object",
    "ai.result.object",
    "ai.response.toolCalls",
    "ai.result.toolCalls",
    "gcp.vertex.agent.llm_request",
    "gcp.vertex.agent.llm_response",
    "gcp.vertex.agent.tool_call_args",
    "gcp.vertex.agent.tool_response",
    "prompt",
    "all_messages_events",
    "events",
    "lk.input_text",
    "lk.user_transcript",
    "lk.chat_ctx",
    "lk.user_input",
    "lk.function_tool.output",
    "lk.response.text",
    "mlflow.spanInputs",
    "mlflow.spanOutputs",
    "traceloop.entity.input",
    "traceloop.entity.output",
    "input.value",
    "output.value",
    "final_result",
    "pydantic_ai.all_messages",
    "gen_ai.system_instructions",
    "input",
    "output",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "genkit:input",
    "genkit:output",
    "flue.turn.input",
    "flue.turn.output",
    "flue.tool.arguments",
    "flue.tool.result",
    "flue.task.prompt",
    "flue.task.result",
    "flue.operation.result",
    "flue.workflow.payload",
    "flue.workflow.result",
)
_IO_PREFIXES = (
    "gen_ai.prompt",
    "gen_ai.completion",
    "llm.input_messages",
    "llm.output_messages",
    "langfuse.trace.metadata",
    "langfuse.observation.metadata",
    "ai.telemetry.metadata",
)


def filtered_attributes(attributes: Mapping[str, Any]) -> dict[str, str]:
    kept = {
        k: v for k, v in attributes.items() if k not in _IO_KEYS and not k.startswith(_IO_PREFIXES)
    }
    return {k: v if isinstance(v, str) else js_stringify(v) for k, v in kept.items()}


def _key_path_to_nested(values: Mapping[str, Any], prefix: str) -> Any:  # noqa: C901 - a port of Langfuse's, branch for branch
    """``convertKeyPathToNestedObject`` (the array-slot budget is never reached here)."""
    if truthy(values.get(prefix)):
        return values[prefix]
    keys = [k.replace(f"{prefix}.", "", 1) for k in values]
    use_array = any(re.match(r"^\d+\.", k) for k in keys)
    dangerous = {"__proto__", "constructor", "prototype"}

    def set_nested(obj: Any, path: list[str], value: Any) -> None:
        current = obj
        for i, key in enumerate(path[:-1]):
            if key in dangerous:
                return
            if isinstance(current, list):
                index = int(key)
                while len(current) <= index:
                    current.append(None)
                if current[index] is None:
                    current[index] = [] if re.fullmatch(r"\d+", path[i + 1]) else {}
                current = current[index]
            else:
                if key not in current:
                    current[key] = [] if re.fullmatch(r"\d+", path[i + 1]) else {}
                current = current[key]
        final = path[-1]
        if final in dangerous:
            return
        if isinstance(current, list):
            index = int(final)
            while len(current) <= index:
                current.append(None)
            current[index] = value
        else:
            current[final] = value

    if use_array:
        result: list[Any] = []
        for key in keys:
            parts = key.split(".")
            index = int(parts[0]) if parts[0].isdigit() else 0
            while len(result) <= index:
                result.append(None)
            if not result[index]:
                result[index] = {}
            if len(parts) == 2:
                result[index][parts[1]] = values[f"{prefix}.{key}"]
            else:
                set_nested(result[index], parts[1:], values[f"{prefix}.{key}"])
        return result
    nested: dict[str, Any] = {}
    for key in keys:
        parts = key.split(".")
        if len(parts) == 1:
            nested[key] = values[f"{prefix}.{key}"]
        else:
            set_nested(nested, parts, values[f"{prefix}.{key}"])
    return nested


def _prepend_system_instructions(value: Any, instructions: Any) -> Any:
    try:
        messages = js_parse(value) if isinstance(value, str) else value
    except ValueError:
        return value
    if not isinstance(messages, list):
        return value
    if any(isinstance(m, dict) and m.get("role") == "system" for m in messages):
        return value
    try:
        parsed = js_parse(instructions) if isinstance(instructions, str) else instructions
        if isinstance(parsed, list):
            content = "\n".join(
                str(p["content"]) if isinstance(p, dict) and truthy(p.get("content")) else str(p)
                for p in parsed
            )
        else:
            content = parsed if isinstance(parsed, str) else js_stringify(parsed)
    except ValueError:
        content = str(instructions)
    merged = [{"role": "system", "content": content}, *messages]
    return js_stringify(merged) if isinstance(value, str) else merged


def _genai_io(attributes: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """``extractOpenTelemetryGenAiInputAndOutput``."""
    value_in = attributes.get("gen_ai.input.messages")
    value_out = attributes.get("gen_ai.output.messages")
    if truthy(value_in) and truthy(attributes.get("gen_ai.system_instructions")):
        value_in = _prepend_system_instructions(value_in, attributes["gen_ai.system_instructions"])
    if truthy(value_in) or truthy(value_out):
        return value_in, value_out
    value_in = attributes.get("gen_ai.tool.call.arguments")
    value_out = attributes.get("gen_ai.tool.call.result")
    if truthy(value_in) or truthy(value_out):
        return value_in, value_out
    return None


def _event_attributes(event: Mapping[str, Any]) -> dict[str, Any]:
    return attributes_of(event.get("attributes"))


def _io_from_events(events: Sequence[Mapping[str, Any]]) -> tuple[bool, Any, Any]:
    for event in events:
        if event.get("name") == "gen_ai.client.inference.operation.details":
            found = _genai_io(_event_attributes(event))
            if found:
                return True, found[0], found[1]
    inputs = [
        e
        for e in events
        if e.get("name")
        in (
            "gen_ai.system.message",
            "gen_ai.user.message",
            "gen_ai.assistant.message",
            "gen_ai.tool.message",
        )
    ]
    outputs = [e for e in events if e.get("name") == "gen_ai.choice"]
    if inputs or outputs:
        processed_in = (
            [
                {
                    "role": str(e["name"]).replace("gen_ai.", "").replace(".message", ""),
                    **_event_attributes(e),
                }
                for e in inputs
            ]
            if inputs
            else None
        )
        processed_out: Any = [_event_attributes(e) for e in outputs] if outputs else None
        if processed_out is not None and len(processed_out) == 1:
            processed_out = processed_out[0]
        return True, processed_in, processed_out
    prompt = next((e for e in events if e.get("name") == "gen_ai.content.prompt"), None)
    completion = next((e for e in events if e.get("name") == "gen_ai.content.completion"), None)
    if prompt is not None or completion is not None:
        prompt_attrs = _event_attributes(prompt) if prompt is not None else {}
        completion_attrs = _event_attributes(completion) if completion is not None else {}
        event_in, _ = extract_io([], prompt_attrs, "")
        _, event_out = extract_io([], completion_attrs, "")
        return (
            True,
            event_in if truthy(event_in) else prompt_attrs,
            event_out if truthy(event_out) else completion_attrs,
        )
    return False, None, None


IO = tuple[Any, Any]


def extract_io(
    events: Sequence[Mapping[str, Any]], attributes: Mapping[str, Any], scope_name: str
) -> IO:
    """The input and output of one span (``extractInputAndOutput``, observation domain):
    Langfuse's own attributes, then the instrumentation scope's, the span's events, and
    each convention in Langfuse's order, the first that holds a value winning."""
    value_in = attributes.get("langfuse.observation.input")
    value_out = attributes.get("langfuse.observation.output")
    if value_in is not None or value_out is not None:
        return value_in, value_out
    scoped = _BY_SCOPE.get(scope_name)
    if scoped is not None and (found := scoped(attributes)) is not None:
        return found
    from_events, value_in, value_out = _io_from_events(events)
    if from_events:
        return value_in, value_out
    for convention in _CONVENTIONS:
        if (found := convention(attributes)) is not None:
            return found
    if scope_name == "pydantic-ai" and (found := _pydantic_ai_io(attributes)) is not None:
        return found
    for convention in (_tool_io, _prefixed_io):
        if (found := convention(attributes)) is not None:
            return found
    genai = _genai_io(attributes)
    if genai:
        return genai
    return None, None


def _genkit_io(attributes: Mapping[str, Any]) -> IO:
    """Genkit's (scope "genkit-tracer"): its spans are read here alone, empty or not."""
    genkit_in = json_payload(attributes.get("genkit:input")) or attributes.get("genkit:input")
    genkit_out = json_payload(attributes.get("genkit:output")) or attributes.get("genkit:output")
    value_in = genkit_in.get("messages", genkit_in) if isinstance(genkit_in, dict) else genkit_in
    value_out = (
        genkit_out.get("message", genkit_out) if isinstance(genkit_out, dict) else genkit_out
    )
    return value_in, value_out


_AI_OUTPUTS = (
    "ai.result.text",
    "ai.toolCall.result",
    "ai.response.object",
    "ai.result.object",
    "ai.response.toolCalls",
    "ai.result.toolCalls",
)


def _vercel_ai_io(attributes: Mapping[str, Any]) -> IO:
    """The Vercel AI SDK's (scope "ai")."""
    value_in = value_out = None
    for key in ("ai.prompt.messages", "ai.prompt", "ai.toolCall.args"):
        if key in attributes:
            value_in = attributes[key]
            break
    if "ai.response.text" in attributes and "ai.response.toolCalls" in attributes:
        value_out = js_stringify(
            {
                "role": "assistant",
                "content": attributes["ai.response.text"],
                "tool_calls": attributes["ai.response.toolCalls"],
            }
        )
    elif "ai.response.text" in attributes and truthy(attributes["ai.response.text"]):
        value_out = attributes["ai.response.text"]
    else:
        value_out = next((attributes[k] for k in _AI_OUTPUTS if k in attributes), None)
    genai = _genai_io(attributes)
    if genai:
        value_in = value_in if value_in is not None else genai[0]
        value_out = value_out if value_out is not None else genai[1]
    return value_in, value_out


_FLUE_INPUTS = (
    "flue.turn.input",
    "flue.tool.arguments",
    "flue.task.prompt",
    "flue.workflow.payload",
)
_FLUE_OUTPUTS = (
    "flue.turn.output",
    "flue.tool.result",
    "flue.task.result",
    "flue.operation.result",
    "flue.workflow.result",
)


def _first(attributes: Mapping[str, Any], keys: Sequence[str]) -> Any:
    return next((attributes[k] for k in keys if attributes.get(k) is not None), None)


def _flue_io(attributes: Mapping[str, Any]) -> IO | None:
    flue_in = _first(attributes, _FLUE_INPUTS)
    flue_out = _first(attributes, _FLUE_OUTPUTS)
    if flue_in is None and flue_out is None:
        return None
    parsed_in = json_payload(flue_in)
    parsed_out = json_payload(flue_out)
    return (
        parsed_in if parsed_in is not None else flue_in,
        parsed_out if parsed_out is not None else flue_out,
    )


_BY_SCOPE: dict[str, Callable[[Mapping[str, Any]], IO | None]] = {
    "genkit-tracer": _genkit_io,
    "ai": _vercel_ai_io,
    "@flue/opentelemetry": _flue_io,
}


def _vertex_io(attributes: Mapping[str, Any]) -> IO | None:
    value_in = attributes.get("gcp.vertex.agent.llm_request")
    value_out = attributes.get("gcp.vertex.agent.llm_response")
    if value_in == "{}" or not truthy(value_in):
        value_in = attributes.get("gcp.vertex.agent.tool_call_args")
    if value_out == "{}" or not truthy(value_out):
        value_out = attributes.get("gcp.vertex.agent.tool_response")
    if truthy(value_in) or truthy(value_out):
        return value_in, value_out
    return None


def _pair_io(attributes: Mapping[str, Any], pairs: Sequence[tuple[str, str]]) -> IO | None:
    for key_in, key_out in pairs:
        if truthy(attributes.get(key_in)) or truthy(attributes.get(key_out)):
            return attributes.get(key_in), attributes.get(key_out)
    return None


def _prompt_io(attributes: Mapping[str, Any]) -> IO | None:
    return _pair_io(attributes, (("prompt", "all_messages_events"),))


def _livekit_io(attributes: Mapping[str, Any]) -> IO | None:
    livekit_in = _first(attributes, ("lk.input_text", "lk.user_transcript", "lk.chat_ctx"))
    livekit_out = attributes.get("lk.function_tool.output")
    if not truthy(livekit_out):
        livekit_out = attributes.get("lk.response.text")
    if truthy(livekit_in) or truthy(livekit_out):
        return livekit_in, livekit_out
    return None


def _is_choice(event: Any) -> bool:
    return isinstance(event, dict) and event.get("event.name") == "gen_ai.choice"


def _events_attribute_io(attributes: Mapping[str, Any]) -> IO | None:
    """An `events` attribute (a JSON list, or a list): the gen_ai.choice out, the rest in."""
    events_array = attributes.get("events")
    if not isinstance(events_array, str | list):
        return None
    items: Any = events_array
    if isinstance(events_array, str):
        try:
            items = js_parse(events_array)
        except ValueError:
            items = []
    if not isinstance(items, list):
        return None
    choice = next((e for e in items if _is_choice(e)), None)
    rest = [e for e in items if not _is_choice(e)]
    if choice is not None or rest:
        return (rest or None), choice
    return None


def _named_io(attributes: Mapping[str, Any]) -> IO | None:
    return _pair_io(
        attributes,
        (
            ("mlflow.spanInputs", "mlflow.spanOutputs"),
            ("traceloop.entity.input", "traceloop.entity.output"),
            ("input.value", "output.value"),
            ("input", "output"),
        ),
    )


_CONVENTIONS = (_vertex_io, _prompt_io, _livekit_io, _events_attribute_io, _named_io)


def _pydantic_ai_io(attributes: Mapping[str, Any]) -> IO | None:
    value_in = attributes.get("pydantic_ai.all_messages")
    value_out = attributes.get("final_result")
    if truthy(value_in) and truthy(attributes.get("gen_ai.system_instructions")):
        value_in = _prepend_system_instructions(value_in, attributes["gen_ai.system_instructions"])
    if truthy(value_in) or truthy(value_out):
        return value_in, value_out
    return None


def _tool_io(attributes: Mapping[str, Any]) -> IO | None:
    return _pair_io(attributes, (("tool_arguments", "tool_response"),))


def _prefixed_io(attributes: Mapping[str, Any]) -> IO | None:
    for prefix_in, prefix_out in (
        ("gen_ai.prompt", "gen_ai.completion"),
        ("llm.input_messages", "llm.output_messages"),
    ):
        keys_in = {k: v for k, v in attributes.items() if k.startswith(prefix_in)}
        keys_out = {k: v for k, v in attributes.items() if k.startswith(prefix_out)}
        if keys_in or keys_out:
            return _key_path_to_nested(keys_in, prefix_in), _key_path_to_nested(
                keys_out, prefix_out
            )
    return None
