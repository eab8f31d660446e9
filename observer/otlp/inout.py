"""A span's input and output: Langfuse's ``extractInputAndOutput`` (observation domain).

A port of the server's rules (``OtelIngestionProcessor.ts``), source by source in its
order; observer.otlp.spans cites the list. The keys an input or output came from are
left out of the attributes kept in metadata (``filtered_attributes``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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


def extract_io(  # noqa: C901 - a port of Langfuse's, branch for branch
    events: Sequence[Mapping[str, Any]], attributes: Mapping[str, Any], scope_name: str
) -> tuple[Any, Any]:
    """The input and output of one span (``extractInputAndOutput``, observation domain)."""
    value_in = attributes.get("langfuse.observation.input")
    value_out = attributes.get("langfuse.observation.output")
    if value_in is not None or value_out is not None:
        return value_in, value_out

    if scope_name == "genkit-tracer":
        genkit_in = json_payload(attributes.get("genkit:input")) or attributes.get("genkit:input")
        genkit_out = json_payload(attributes.get("genkit:output")) or attributes.get(
            "genkit:output"
        )
        if genkit_in is not None or genkit_out is not None:
            value_in = (
                genkit_in.get("messages", genkit_in) if isinstance(genkit_in, dict) else genkit_in
            )
            value_out = (
                genkit_out.get("message", genkit_out)
                if isinstance(genkit_out, dict)
                else genkit_out
            )
        return value_in, value_out

    if scope_name == "ai":
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
            for key in (
                "ai.result.text",
                "ai.toolCall.result",
                "ai.response.object",
                "ai.result.object",
                "ai.response.toolCalls",
                "ai.result.toolCalls",
            ):
                if key in attributes:
                    value_out = attributes[key]
                    break
        genai = _genai_io(attributes)
        if genai:
            value_in = value_in if value_in is not None else genai[0]
            value_out = value_out if value_out is not None else genai[1]
        return value_in, value_out

    if scope_name == "@flue/opentelemetry":
        flue_in = next(
            (
                attributes[k]
                for k in (
                    "flue.turn.input",
                    "flue.tool.arguments",
                    "flue.task.prompt",
                    "flue.workflow.payload",
                )
                if attributes.get(k) is not None
            ),
            None,
        )
        flue_out = next(
            (
                attributes[k]
                for k in (
                    "flue.turn.output",
                    "flue.tool.result",
                    "flue.task.result",
                    "flue.operation.result",
                    "flue.workflow.result",
                )
                if attributes.get(k) is not None
            ),
            None,
        )
        if flue_in is not None or flue_out is not None:
            parsed_in = json_payload(flue_in)
            parsed_out = json_payload(flue_out)
            return (
                parsed_in if parsed_in is not None else flue_in,
                parsed_out if parsed_out is not None else flue_out,
            )

    found, value_in, value_out = _io_from_events(events)
    if found:
        return value_in, value_out

    value_in = attributes.get("gcp.vertex.agent.llm_request")
    value_out = attributes.get("gcp.vertex.agent.llm_response")
    if value_in == "{}" or not truthy(value_in):
        value_in = attributes.get("gcp.vertex.agent.tool_call_args")
    if value_out == "{}" or not truthy(value_out):
        value_out = attributes.get("gcp.vertex.agent.tool_response")
    if truthy(value_in) or truthy(value_out):
        return value_in, value_out

    for key_in, key_out in (("prompt", "all_messages_events"),):
        if truthy(attributes.get(key_in)) or truthy(attributes.get(key_out)):
            return attributes.get(key_in), attributes.get(key_out)

    livekit_in = next(
        (
            attributes[k]
            for k in ("lk.input_text", "lk.user_transcript", "lk.chat_ctx")
            if attributes.get(k) is not None
        ),
        None,
    )
    livekit_out = attributes.get("lk.function_tool.output")
    if not truthy(livekit_out):
        livekit_out = attributes.get("lk.response.text")
    if truthy(livekit_in) or truthy(livekit_out):
        return livekit_in, livekit_out

    events_array = attributes.get("events")
    if isinstance(events_array, str | list):
        items: Any = events_array
        if isinstance(events_array, str):
            try:
                items = js_parse(events_array)
            except ValueError:
                items = []
        if isinstance(items, list):
            choice = next(
                (
                    e
                    for e in items
                    if isinstance(e, dict) and e.get("event.name") == "gen_ai.choice"
                ),
                None,
            )
            rest = [
                e
                for e in items
                if not (isinstance(e, dict) and e.get("event.name") == "gen_ai.choice")
            ]
            if choice is not None or rest:
                return (rest or None), choice

    for key_in, key_out in (
        ("mlflow.spanInputs", "mlflow.spanOutputs"),
        ("traceloop.entity.input", "traceloop.entity.output"),
        ("input.value", "output.value"),
        ("input", "output"),
    ):
        if truthy(attributes.get(key_in)) or truthy(attributes.get(key_out)):
            return attributes.get(key_in), attributes.get(key_out)

    if scope_name == "pydantic-ai":
        value_in = attributes.get("pydantic_ai.all_messages")
        value_out = attributes.get("final_result")
        if truthy(value_in) and truthy(attributes.get("gen_ai.system_instructions")):
            value_in = _prepend_system_instructions(
                value_in, attributes["gen_ai.system_instructions"]
            )
        if truthy(value_in) or truthy(value_out):
            return value_in, value_out

    if truthy(attributes.get("tool_arguments")) or truthy(attributes.get("tool_response")):
        return attributes.get("tool_arguments"), attributes.get("tool_response")

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

    genai = _genai_io(attributes)
    if genai:
        return genai
    return None, None
