"""Reading what libraries record of a conversation: the question, the answer, tool calls
and tool results (docs/trace-convention.md).

Chat messages come in the shapes of the APIs the libraries wrap: OpenAI's (`role`,
`content` as text or parts, `tool_calls`; a `tool` message holding a tool's result),
Anthropic's (content blocks: `text`, `tool_use`, `tool_result`), Gemini's (`parts` with
`text`, `functionCall`, `functionResponse`), OpenTelemetry GenAI's (`parts` typed `text`,
`tool_call`, `tool_call_response`) and the Vercel AI SDK's (`tool-call`, `tool-result`).
Pure: decoded JSON in, texts out.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from observer.mapping.decode import as_str, decode, decode_all
from observer.mapping.rules import MappingRules


def keyed(obj: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, str] | None:
    """The first of `keys` holding a string (or number): (key, text)."""
    for key in keys:
        text = as_str(obj.get(key))
        if text is not None:
            return key, text
    return None


def question_of(value: Any, rules: MappingRules) -> tuple[str, str]:
    """The question in a root's input, and where it was found (docs/trace-convention.md)."""
    value = decode(value)
    if value is None:
        return "", "no input"
    if isinstance(value, str):
        return value, "input as text"
    if isinstance(value, dict):
        return _question_in_object(value, rules)
    if isinstance(value, list):
        text = last_user_text(value)
        if text is not None:
            return text, "input is chat messages: the last user message"
    return "", f"input is a {type(value).__name__} without a question"


def _question_in_object(value: dict[str, Any], rules: MappingRules) -> tuple[str, str]:
    """`question_of` on an object: a question key, a call's arguments, a component's key,
    or the last user message, the first that holds one."""
    found = keyed(value, rules.question_keys)
    if found is not None:
        return found[1], f"input.{found[0]}"
    args, kwargs = value.get("args"), value.get("kwargs")
    if isinstance(args, list) and isinstance(kwargs, dict):
        called = _question_of_call(args, kwargs, rules)
        if called is not None:
            return called
    for component, inner in value.items():
        # Keyed by component, one level down: {"retriever": {"query": ...}} (Haystack).
        if isinstance(inner, dict):
            found = keyed(inner, rules.question_keys)
            if found is not None:
                return found[1], f"input.{component}.{found[0]}"
    for key in _MESSAGE_KEYS:
        messages = value.get(key)
        if isinstance(messages, list):
            text = last_user_text(messages)
            if text is not None:
                return text, f"input.{key}: the last user message"
    return "", "input is an object without a question key"


# Where a call's record keeps the chat: OpenAI's `messages`, LlamaIndex's `chat_history`,
# Gemini's `contents`.
_MESSAGE_KEYS = ("messages", "chat_history", "history", "contents")


def _question_of_call(
    args: list[Any], kwargs: Mapping[str, Any], rules: MappingRules
) -> tuple[str, str] | None:
    """The @observe decorator's record of a call, f(*args, **kwargs): a question key among
    the keyword arguments, else the first text argument (or None)."""
    found = keyed(kwargs, rules.question_keys)
    if found is not None:
        return found[1], f"input.kwargs.{found[0]}"
    strings = [(i, a) for i, a in enumerate(args) if isinstance(a, str)]
    # A client passed first is recorded as its class name: the text after it.
    texts = [(i, a) for i, a in strings if not is_object_name(a)] or strings
    if texts:
        index, arg = texts[0]
        return arg, f"input.args[{index}] (the first text argument)"
    return None


def last_user_text(messages: list[Any]) -> str | None:
    """A chat transcript: the last thing the user said (the last user message with text).
    Messages recorded as their Python repr count too."""
    read = [repr_message(m) if isinstance(m, str) else m for m in messages]
    users = [m for m in read if isinstance(m, dict) and m.get("role") == "user"]
    for message in reversed(users):
        # A tool's result comes back as a user message without text (GenAI, Anthropic):
        # passed over.
        text = message_text(message)
        if text:
            return text
    return "" if users else None


def message_text(message: Mapping[str, Any]) -> str | None:
    """A chat message's text: OpenAI `content` (text or text parts), or text `parts`."""
    text = content_text(message.get("content"))
    if text is not None:
        return text
    return parts_text(message.get("parts"))


def content_text(content: Any) -> str | None:
    """OpenAI message content: a string, or a list of parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
        return "".join(texts) if texts else None
    return None


def parts_text(parts: Any) -> str | None:
    """Message parts: GenAI text parts (`{"type": "text", "content": ...}`) or Gemini's
    (`{"text": ...}`), joined."""
    if not isinstance(parts, list):
        return None
    texts = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("content"), str):
            texts.append(part["content"])
        elif "type" not in part and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "".join(texts) if texts else None


# A completion rendered as `role: content` (LlamaIndex's ChatResponse as text).
_ROLE_PREFIX = re.compile(r"^assistant: ")


def answer_of(output: Any, rules: MappingRules) -> tuple[str | None, str]:
    """The answer held by a generation's output, and which shape held it."""
    text, shape = _answer_of(output, rules)
    if text is not None and _ROLE_PREFIX.match(text):
        return text[len("assistant: ") :], f"{shape}, its `assistant: ` prefix cut"
    return text, shape


def _answer_of(output: Any, rules: MappingRules) -> tuple[str | None, str]:
    if isinstance(output, str):
        decoded = decode(output)
        # A number or boolean is the raw text itself ("42"); a JSON string is its value,
        # decoded again when it is JSON text itself (an output encoded twice).
        if isinstance(decoded, (bool, int, float)) or decoded is None:
            return output, "output as text"
        for _ in range(4):
            if not isinstance(decoded, str):
                break
            inner = decode(decoded)
            if not isinstance(inner, (dict, list, str)) or inner == decoded:
                return decoded, "output as a JSON string"
            decoded = inner
        if isinstance(decoded, str):
            return decoded, "output as a JSON string"
        output = decoded
    if isinstance(output, list):
        if not output:
            return None, "output is an empty list"
        # Several choices (or GenAI output messages): the first one that holds text.
        for index, item in enumerate(output):
            text, shape = _answer_in(item, rules)
            if text is not None:
                return text, f"output[{index}]: {shape}"
        return None, "output is a list without a text"
    if isinstance(output, dict):
        text, shape = _answer_in(output, rules)
        return text, f"output: {shape}"
    text = as_str(output)
    return text, "output as a number" if text is not None else "no output"


def _answer_in(output: Any, rules: MappingRules) -> tuple[str | None, str]:
    if isinstance(output, str):
        return output, "text"
    if not isinstance(output, dict):
        return None, f"a {type(output).__name__}"
    choices = output.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            return content_text(message.get("content")), "choices[0].message.content"
        return as_str(choices[0].get("text")), "choices[0].text"
    candidates = output.get("candidates")  # Gemini's GenerateContentResponse
    if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict):
        content = candidates[0].get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        return parts_text(parts), "candidates[0].content.parts"
    for key in rules.answer_keys:
        if key in output:
            text = content_text(output[key])
            if text is not None:
                shape = "a chat message's content" if "role" in output else key
                return text, shape
    text = parts_text(output.get("parts"))
    if text is not None:
        return text, "a GenAI message's text parts"
    return None, "an object without a text"


# What an instrumentation records in place of a tool-calling completion (OpenLIT writes
# this whenever the request offered tools, the final answer's completion included).
PLACEHOLDERS = frozenset({"function called with tools"})
_TOOL_CALL_TYPES = frozenset({"tool_call", "tool-call", "tool_use", "function_call"})
_TOOL_RESULT_TYPES = frozenset(
    {"tool_result", "tool-result", "tool_call_response", "function_response", "functionResponse"}
)
_TOOL_ROLES = frozenset({"tool", "function", "ipython"})


def tool_calls_in(output: Any) -> list[str]:
    """The names of the tools a completion calls (OpenAI `tool_calls`, Anthropic
    `tool_use` blocks, GenAI `tool_call` parts, Gemini `functionCall`, Vercel
    `tool-call`); [] when it calls none."""
    found: list[str] = []
    for node in _nodes(decode_all(output)):
        calls = node.get("tool_calls") or node.get("toolCalls")
        if isinstance(calls, list):
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                name = function.get("name") if isinstance(function, dict) else None
                found.append(as_str(name) or "?")
        kind = node.get("type")
        if isinstance(kind, str) and kind in _TOOL_CALL_TYPES:
            found.append(as_str(node.get("name") or node.get("toolName")) or "?")
        elif kind is None and "toolCallId" in node and "toolName" in node:  # Vercel AI SDK
            found.append(as_str(node.get("toolName")) or "?")
        call = node.get("functionCall") or node.get("function_call")
        if isinstance(call, dict):
            found.append(as_str(call.get("name")) or "?")
    return found


def tool_call_arguments(value: Any, depth: int = 0) -> list[str]:
    """Every tool call's arguments (`arguments`, `input`, `args`) in a decoded completion, as
    text, and the strings inside them: what a tool was asked, never a document or an answer."""
    found: list[str] = []
    if depth > 8:
        return found
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in ("arguments", "input", "args") and inner is not None:
                found.append(inner if isinstance(inner, str) else str(inner))
                if isinstance(inner, (dict, list)):
                    found += [s for s in _strings(inner, 0)]
            elif isinstance(inner, (dict, list)):
                found += tool_call_arguments(inner, depth + 1)
    elif isinstance(value, list):
        for inner in value:
            found += tool_call_arguments(inner, depth + 1)
    return found


def _strings(value: Any, depth: int) -> Iterator[str]:
    if depth > 8:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from _strings(inner, depth + 1)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner, depth + 1)


def tool_results_in(value: Any) -> Iterator[tuple[str, Any]]:
    """Every tool result a recorded prompt holds, in order: (where, payload). A `tool`
    (or `function`) message's content; a `tool_result`, `tool-result` or
    `tool_call_response` part's content, output or result; a Gemini `functionResponse`'s
    response."""
    if isinstance(value, str) and not _may_hold_results(value):
        return  # the usual prompt: no walk of its messages
    for node in _nodes(decode_all(value)):
        role = node.get("role")
        if isinstance(role, str) and role in _TOOL_ROLES and "content" in node:
            content = node["content"]
            if not (isinstance(content, list) and any(_is_result_part(p) for p in content)):
                yield f"a {role} message", content
            continue
        if _is_result_part(node):
            for key in ("content", "output", "result", "response"):
                if node.get(key) is not None:
                    yield f"a {node.get('type')} part", _unwrapped(node[key])
                    break
            continue
        for key in ("functionResponse", "function_response"):
            inner = node.get(key)
            if isinstance(inner, dict):
                yield "a functionResponse", _unwrapped(inner.get("response"))


def _may_hold_results(text: str) -> bool:
    """A recorded prompt's text may hold a tool result: it has a word one is told by (every
    role, part type and key that tells one holds `tool`, `unction` or `ipython`), or an
    escape that may write one (JSON writes a letter as itself unless it escapes it; a
    repr's role and a transcript's are read as written)."""
    return "tool" in text or "unction" in text or "ipython" in text or "\\u" in text


def _is_result_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in _TOOL_RESULT_TYPES


def _unwrapped(payload: Any) -> Any:
    """The Vercel AI SDK's typed output (`{"type": "json" | "text", "value": ...}`) and a
    response object holding one `content`/`result`/`output` (Gemini's), unwrapped."""
    if isinstance(payload, dict):
        if payload.get("type") in ("json", "text", "content") and "value" in payload:
            return payload["value"]
        if len(payload) == 1:
            only = next(iter(payload.values()))
            if next(iter(payload)) in ("content", "result", "output", "results"):
                return only
    return payload


def _nodes(value: Any) -> list[dict[str, Any]]:
    """Every object in a decoded value, outermost first, to a bounded depth; a message
    recorded as its Python repr or a prompt recorded as `role: content` lines read as
    messages."""
    if isinstance(value, str):
        return list(transcript(value))
    found: list[dict[str, Any]] = []
    if isinstance(value, (dict, list)):
        _walk(value, 0, found)
    return found


def _walk(value: dict[str, Any] | list[Any], depth: int, found: list[dict[str, Any]]) -> None:
    if depth > 12:
        return
    if isinstance(value, dict):
        found.append(value)
        for inner in value.values():
            if isinstance(inner, (dict, list)):
                _walk(inner, depth + 1, found)
        return
    for inner in value:
        if isinstance(inner, (dict, list)):
            _walk(inner, depth + 1, found)
        elif isinstance(inner, str):
            message = repr_message(inner)
            if message is not None:
                found.append(message)


# A chat message recorded as its Python repr: LlamaIndex's and smolagents'
# `ChatMessage(role=<MessageRole.USER: 'user'>, ... text='...' ...)`.
_REPR_ROLE = re.compile(r"^\w*Message\(role=(?:<\w+\.\w+: )?'([\w-]+)'>?")
_REPR_TEXT = re.compile(r"""\btext=|'text': """)
_REPR_ROLES = {"tool-response": "tool", "tool-call": "assistant", "model": "assistant"}
# Past this a repr is not read (a literal parse per text block; bounded work per trace).
_MAX_REPR = 200_000


def _literals_after(text: str) -> Iterator[str]:
    """The quoted string literals after each `text=` (or `'text': `) of a repr, in order.
    One scan: each literal is read to its closing quote and the search goes on after it;
    an unclosed one ends the scan (linear whatever the text)."""
    at = 0
    while (found := _REPR_TEXT.search(text, at)) is not None:
        start = found.end()
        quote = text[start : start + 1]
        if quote not in ("'", '"'):
            at = start
            continue
        index = start + 1
        while index < len(text) and text[index] != quote:
            index += 2 if text[index] == "\\" else 1
        if index >= len(text):
            return
        yield text[start : index + 1]
        at = index + 1


def repr_message(text: str) -> dict[str, Any] | None:
    """A message object's repr as `{"role", "content"}` (its text blocks joined); None when
    the text is no such repr."""
    if len(text) > _MAX_REPR:
        return None
    found = _REPR_ROLE.match(text)
    if found is None:
        return None
    texts = []
    for literal in _literals_after(text):
        try:
            value = ast.literal_eval(literal)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(value, str):
            texts.append(value)
    role = _REPR_ROLES.get(found.group(1), found.group(1))
    return {"role": role, "content": "\n".join(texts) if texts else None}


# A prompt recorded as `role: content` lines (OpenLIT before 1.34 flattened the messages).
_TRANSCRIPT_LINE = re.compile(r"(?m)^(system|user|assistant|tool|function): ?")


def transcript(text: str) -> Iterator[dict[str, Any]]:
    """The messages of a prompt flattened into `role: content` lines; none when the text is
    not one (at least two such lines, the first at its start)."""
    if len(text) > _MAX_REPR or not _TRANSCRIPT_LINE.match(text):
        return
    marks = list(_TRANSCRIPT_LINE.finditer(text))
    if len(marks) < 2:
        return
    for index, mark in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(text)
        yield {"role": mark.group(1), "content": text[mark.end() : end].rstrip("\n")}


# An object's name where a text was expected: `OpenAI`, `openai.OpenAI`, `<Client object at
# 0x7f...>` (a function's first argument, the client, recorded as its class or repr).
_OBJECT_NAME = re.compile(
    r"^(?:<[\w.]+(?: object)? at 0x[0-9a-fA-F]+>|[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)$"
)


def is_object_name(text: str) -> bool:
    stripped = text.strip()
    if len(stripped) > 200:
        return False
    return bool(_OBJECT_NAME.match(stripped)) and (
        stripped.startswith("<") or any(c.isupper() for c in stripped[1:]) or "." in stripped
    )
