"""The default trace convention of docs/trace-convention.md, with declarative overrides.

A trace is every observation sharing a `traceId`, as plain dicts in the
shape the Observations API v2 returns (camelCase keys). `map_trace` turns
one trace into a RagRecord or a `Skip` with a reason; it never raises on
strange input. Users whose traces look different change `MappingRules`
(observation types or names, keys) or name a hook function instead.

`explain_trace` runs the same code with a `Trail`: which observation gave the
question, the answer and the sources, and by which rule (`observer explain`,
`observer discover`). Without one, nothing is written down: the daemon's path
pays for no explanation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any

from observer.mapping.decode import (
    as_bool,
    as_float,
    as_float_list,
    as_str,
    clean_text,
    decode,
)
from observer.model import RagRecord, Source
from observer.records import RecordError, record_from_obj
from observer.signals.text import prepare
from observer.times import iso, parse_time

Observation = Mapping[str, Any]
JUDGE_ENVIRONMENT = "langfuse-llm-as-a-judge"
DEFAULT_ENVIRONMENT = "default"
_EARLIEST = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Skip:
    """A trace that is not scored, and why (a counted, logged reason)."""

    reason: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class MappingRules:
    generation_types: tuple[str, ...] = ("GENERATION",)
    generation_names: tuple[str, ...] = ()
    retriever_types: tuple[str, ...] = ("RETRIEVER",)
    retriever_names: tuple[str, ...] = ()
    question_keys: tuple[str, ...] = ("question", "query", "input", "message")
    answer_keys: tuple[str, ...] = ("content", "text", "answer")
    sources_keys: tuple[str, ...] = ("documents", "sources", "chunks", "nodes")
    text_keys: tuple[str, ...] = ("text", "content", "page_content")
    chunk_id_keys: tuple[str, ...] = ("chunk_id", "id")
    score_keys: tuple[str, ...] = ("score", "rerank_score", "relevance_score")
    # Traces are read only when they match these (empty: all).
    environments: tuple[str, ...] = ()
    trace_names: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    # Root observation names of the observer's own traces (its OTel spans, when
    # exported to Langfuse): never scored.
    own_trace_prefixes: tuple[str, ...] = ("observer.",)
    # `module:function` resolved at start (config); takes the observation
    # list, returns a RagRecord, a RagRecord-shaped dict, or None to skip.
    hook: Callable[[list[dict[str, Any]]], Any] | None = field(default=None, compare=False)
    # Past these a trace is skipped as `too_large`: bounded time and memory per trace.
    max_answer_chars: int = 200_000
    max_sources: int = 200
    max_observations: int = 5_000

    @property
    def metadata_keys(self) -> tuple[str, ...]:
        """Metadata keys the convention reads (expanded, never truncated, by the API)."""
        return (
            "query_type",
            "needs_fallback",
            "low_confidence",
            "crag_grade",
            "rerank_scores",
            "context",
        )


@dataclass(frozen=True, slots=True)
class Step:
    """One rule the mapping applied: which part of the record, from which observation."""

    part: str  # root, question, answer, sources, flags, skip
    rule: str
    observation_id: str | None = None
    name: str | None = None
    type: str | None = None


Trail = list[Step]


def _note(
    trail: Trail | None, part: str, rule: str, observation: Observation | None = None
) -> None:
    if trail is None:
        return
    if observation is None:
        trail.append(Step(part, rule))
        return
    trail.append(
        Step(
            part,
            rule,
            as_str(observation.get("id")),
            as_str(observation.get("name")),
            as_str(observation.get("type")),
        )
    )


def _first_key(obj: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        if key in obj and obj[key] is not None:
            return obj[key]
    return None


def _keyed(obj: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, str] | None:
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
    if isinstance(value, Mapping):
        found = _keyed(value, rules.question_keys)
        if found is not None:
            return found[1], f"input.{found[0]}"
        args, kwargs = value.get("args"), value.get("kwargs")
        if isinstance(args, list) and isinstance(kwargs, Mapping):
            # The @observe decorator's record of a call: f(*args, **kwargs).
            found = _keyed(kwargs, rules.question_keys)
            if found is not None:
                return found[1], f"input.kwargs.{found[0]}"
            for index, arg in enumerate(args):
                if isinstance(arg, str):
                    return arg, f"input.args[{index}] (the first string argument)"
        for component, inner in value.items():
            # Keyed by component, one level down: {"retriever": {"query": ...}} (Haystack).
            if isinstance(inner, Mapping):
                found = _keyed(inner, rules.question_keys)
                if found is not None:
                    return found[1], f"input.{component}.{found[0]}"
        messages = value.get("messages")
        if isinstance(messages, list):
            text = _last_user_text(messages)
            if text is not None:
                return text, "input.messages: the last user message"
        return "", "input is an object without a question key"
    if isinstance(value, list):
        text = _last_user_text(value)
        if text is not None:
            return text, "input is chat messages: the last user message"
    return "", f"input is a {type(value).__name__} without a question"


def _last_user_text(messages: list[Any]) -> str | None:
    """A chat transcript: the last thing the user said (the last user message with text)."""
    users = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
    for message in reversed(users):
        # A tool's result comes back as a user message without text (GenAI): passed over.
        text = _message_text(message)
        if text:
            return text
    return "" if users else None


def _message_text(message: Mapping[str, Any]) -> str | None:
    """A chat message's text: OpenAI `content`, or OTel GenAI text `parts`."""
    text = _content_text(message.get("content"))
    if text is not None:
        return text
    return _parts_text(message.get("parts"))


def _content_text(content: Any) -> str | None:
    """OpenAI message content: a string, or a list of parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") if isinstance(part, Mapping) else part for part in content]
        texts = [p for p in parts if isinstance(p, str)]
        return "".join(texts) if texts else None
    return None


def _parts_text(parts: Any) -> str | None:
    """OTel GenAI message parts: the text parts (`{"type": "text", "content": ...}`) joined."""
    if not isinstance(parts, list):
        return None
    texts = [
        part["content"]
        for part in parts
        if isinstance(part, Mapping)
        and part.get("type") == "text"
        and isinstance(part.get("content"), str)
    ]
    return "".join(texts) if texts else None


def answer_of(output: Any, rules: MappingRules) -> tuple[str | None, str]:
    """The answer held by a generation's output, and which shape held it."""
    if isinstance(output, str):
        decoded = decode(output)
        # A number or boolean is the raw text itself ("42"); a JSON string is its value.
        if isinstance(decoded, bool | int | float) or decoded is None:
            return output, "output as text"
        if isinstance(decoded, str):
            return decoded, "output as a JSON string"
        output = decoded
    where = "output"
    if isinstance(output, list):
        if not output:
            return None, "output is an empty list"
        # Several choices (or GenAI output messages): the first one that holds text.
        for index, item in enumerate(output):
            text, shape = _answer_in(item, rules)
            if text is not None:
                return text, f"output[{index}]: {shape}"
        return None, "output is a list without a text"
    if isinstance(output, Mapping):
        text, shape = _answer_in(output, rules)
        return text, f"{where}: {shape}"
    text = as_str(output)
    return text, "output as a number" if text is not None else "no output"


def _answer_in(output: Any, rules: MappingRules) -> tuple[str | None, str]:
    if isinstance(output, str):
        return output, "text"
    if not isinstance(output, Mapping):
        return None, f"a {type(output).__name__}"
    choices = output.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        if isinstance(message, Mapping):
            return _content_text(message.get("content")), "choices[0].message.content"
        return as_str(choices[0].get("text")), "choices[0].text"
    for key in rules.answer_keys:
        if key in output:
            text = _content_text(output[key])
            if text is not None:
                shape = "a chat message's content" if "role" in output else key
                return text, shape
    text = _parts_text(output.get("parts"))
    if text is not None:
        return text, "a GenAI message's text parts"
    return None, "an object without a text"


def _lookup(item: Mapping[str, Any], keys: Sequence[str]) -> Any:
    found = _first_key(item, keys)
    if found is None:
        for nested in ("metadata", "meta"):  # LangChain documents, Haystack's
            inner = item.get(nested)
            if isinstance(inner, Mapping):
                found = _first_key(inner, keys)
                if found is not None:
                    break
    return found


def _document_list(output: Any, rules: MappingRules) -> tuple[list[Any] | None, str]:
    """The list an output holds (itself, or under a sources key), and where."""
    items = decode(output)
    if isinstance(items, list):
        return items, "output"
    if isinstance(items, Mapping):
        for key in rules.sources_keys:
            if isinstance(items.get(key), list):
                return items[key], f"output.{key}"
    return None, ""


def _is_document(item: Any, rules: MappingRules) -> bool:
    """An object with a text (a chat message, an object with a `role`, is not one)."""
    if not isinstance(item, Mapping) or "role" in item:
        return False
    return as_str(_lookup(item, rules.text_keys)) is not None


def _source(item: Mapping[str, Any], rules: MappingRules) -> Source:
    origin = as_str(_lookup(item, ("origin",)))
    text = as_str(_lookup(item, rules.text_keys))
    assert text is not None
    return Source(
        text=text,
        chunk_id=as_str(_lookup(item, rules.chunk_id_keys)),
        doc_id=as_str(_lookup(item, ("doc_id",))),
        title=as_str(_lookup(item, ("title",))),
        score=as_float(_lookup(item, rules.score_keys)),
        text_hash=as_str(_lookup(item, ("text_hash",))),
        origin="web" if origin == "web" else "kb",
    )


def sources_of(output: Any, rules: MappingRules) -> tuple[Source, ...] | Skip:
    """The numbered sources held by a retriever's output, or why they are malformed."""
    items = decode(output)
    if items is None or items == "":
        return ()
    found, _where = _document_list(items, rules)
    if found is None:
        if isinstance(items, Mapping):
            return Skip(
                "malformed_sources", "retriever output is an object without a list of sources"
            )
        return Skip(
            "malformed_sources", f"retriever output is a {type(items).__name__}, not a list"
        )
    for index, item in enumerate(found):
        if not isinstance(item, Mapping):
            return Skip(
                "malformed_sources", f"source {index + 1} is a {type(item).__name__}, not an object"
            )
        if not _is_document(item, rules):
            return Skip("malformed_sources", f"source {index + 1} has no text")
    return tuple(_source(item, rules) for item in found)


# OpenInference's retrieval attributes, as Langfuse keeps them in an observation's
# metadata (flattened into dotted keys by the Observations API v2, or nested).
# A reranker span's kept documents (`reranker.output_documents`) are what the model
# saw; its `input_documents` are the candidates and are not read.
_OPENINFERENCE_RE = re.compile(
    r"^(?:attributes\.)?(retrieval\.documents|reranker\.output_documents)\.(\d+)\.document\."
    r"(id|content|score|metadata)(?:\.(.+))?$"
)


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, inner in value.items():
        dotted = f"{prefix}{key}"
        if isinstance(inner, Mapping):
            flat.update(_flatten(inner, dotted + "."))
        else:
            flat[dotted] = inner
    return flat


def openinference_documents(metadata: Mapping[str, Any]) -> tuple[Source, ...]:
    """The documents of OpenInference retrieval (or reranker output) attributes in
    `metadata`, in index order."""
    if "attributes" not in metadata and not any(
        "retrieval" in key or "reranker" in key for key in metadata
    ):
        return ()
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for key, value in _flatten(metadata).items():
        match = _OPENINFERENCE_RE.match(key)
        if match is None:
            continue
        kind = found.setdefault(match.group(1), {})
        document = kind.setdefault(int(match.group(2)), {"metadata": {}})
        field_name, rest = match.group(3), match.group(4)
        if field_name == "metadata":
            if rest is None:
                decoded = decode(value)
                if isinstance(decoded, Mapping):
                    document["metadata"].update(decoded)
            else:
                document["metadata"][rest] = decode(value)
        else:
            document[field_name] = value
    documents = found.get("reranker.output_documents") or found.get("retrieval.documents") or {}
    sources = []
    for index in sorted(documents):
        document = documents[index]
        text = as_str(document.get("content"))
        if text is None:
            continue
        meta = document["metadata"]
        origin = as_str(meta.get("origin"))
        sources.append(
            Source(
                text=text,
                chunk_id=as_str(document.get("id")) or as_str(_first_key(meta, ("chunk_id",))),
                doc_id=as_str(_first_key(meta, ("doc_id", "file_name", "document_id"))),
                title=as_str(meta.get("title")),
                score=as_float(document.get("score")),
                text_hash=as_str(meta.get("text_hash")),
                origin="web" if origin == "web" else "kb",
            )
        )
    return tuple(sources)


def _start(observation: Observation) -> datetime:
    return parse_time(observation.get("startTime")) or _EARLIEST


def _is(observation: Observation, types: Sequence[str], names: Sequence[str]) -> bool:
    if names:
        return observation.get("name") in names
    return observation.get("type") in types


def is_generation(observation: Observation, rules: MappingRules) -> bool:
    """An observation the mapping reads as a generation (names, when set, else types)."""
    return _is(observation, rules.generation_types, rules.generation_names)


def _metadata(observation: Observation | None) -> Mapping[str, Any]:
    metadata = observation.get("metadata") if observation is not None else None
    if isinstance(metadata, str):
        metadata = decode(metadata)
    return metadata if isinstance(metadata, Mapping) else {}


def _scope_name(metadata: Mapping[str, Any]) -> Any:
    """The OTel instrumentation scope's name: Observations API v2 flattens metadata into
    dotted keys (`scope.name`); a nested `scope: {name}` (older shapes, replays) counts too."""
    if "scope.name" in metadata:
        return metadata["scope.name"]
    scope = metadata.get("scope")
    return scope.get("name") if isinstance(scope, Mapping) else None


def find_root(observations: Sequence[Observation]) -> Observation | None:
    """The trace's earliest root observation (a trace may have several, DESIGN §9)."""
    roots = [o for o in observations if o.get("isRootObservation")]
    return min(roots, key=_start) if roots else None


def trace_filter(root: Observation, environment: str, rules: MappingRules) -> Skip | None:
    """Traces never scored, or not asked for: the judge's, the observer's own, filtered out."""
    if environment == JUDGE_ENVIRONMENT:
        return Skip("judge_environment", "Langfuse LLM-as-a-judge trace")
    name = as_str(root.get("name")) or ""
    if _scope_name(_metadata(root)) == "observer" or name.startswith(rules.own_trace_prefixes):
        return Skip("own_trace", "produced by observer itself")
    if rules.environments and environment not in rules.environments:
        return Skip("filtered_environment", environment)
    trace_name = as_str(root.get("traceName")) or name
    if rules.trace_names and trace_name not in rules.trace_names:
        return Skip("filtered_name", trace_name)
    if rules.tags:
        tags = root.get("tags")
        if not isinstance(tags, list) or not set(rules.tags) & {
            t for t in tags if isinstance(t, str)
        }:
            return Skip("filtered_tags", "")
    return None


@dataclass(frozen=True, slots=True)
class Explained:
    """What the mapping made of one trace, and the rules that made it."""

    result: RagRecord | Skip
    steps: tuple[Step, ...]


def explain_trace(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules
) -> Explained:
    """`map_trace`, with the trail of rules it followed."""
    trail: Trail = []
    result = _checked(trace_id, observations, rules, trail)
    if isinstance(result, Skip):
        _note(
            trail, "skip", f"{result.reason}: {result.detail}" if result.detail else result.reason
        )
    return Explained(result, tuple(trail))


def map_trace(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules
) -> RagRecord | Skip:
    """One trace in, one RagRecord (or the reason it is skipped) out."""
    return _checked(trace_id, observations, rules, None)


def _checked(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules, trail: Trail | None
) -> RagRecord | Skip:
    if len(observations) > rules.max_observations:
        return Skip(
            "too_large",
            f"{len(observations)} observations (limits.max_observations_per_trace "
            f"{rules.max_observations})",
        )
    try:
        mapped = _map(trace_id, observations, rules, trail)
    except Exception as error:  # a strange trace is skipped, never a crash
        return Skip("mapping_error", f"{type(error).__name__}: {error}")
    if isinstance(mapped, Skip):
        return mapped
    mapped = _clean(mapped)
    if len(mapped.answer) > rules.max_answer_chars:
        return Skip(
            "too_large",
            f"answer of {len(mapped.answer)} characters (limits.max_answer_chars "
            f"{rules.max_answer_chars})",
        )
    if len(mapped.sources) > rules.max_sources:
        return Skip(
            "too_large",
            f"{len(mapped.sources)} sources (limits.max_sources {rules.max_sources})",
        )
    return mapped


def _clean(record: RagRecord) -> RagRecord:
    """Every text of the record writable as UTF-8 (scores, state and logs are)."""

    def clean(value: Any) -> Any:
        return clean_text(value) if isinstance(value, str) else value

    changed = {f.name: clean(getattr(record, f.name)) for f in fields(record)}
    changed["sources"] = tuple(
        replace(source, **{f.name: clean(getattr(source, f.name)) for f in fields(source)})
        for source in record.sources
    )
    return RagRecord(**changed)


def _find_sources(
    ordered: Sequence[Observation],
    generation: Observation,
    rules: MappingRules,
    trail: Trail | None,
) -> tuple[Source, ...] | Skip | None:
    """The documents the model saw: from the last observation at or before the
    generation whose output is a list of documents, of whatever type (a retriever, a
    reranker after it, an untyped function, a tool). A retriever met on the way back
    whose output is empty decides: no evidence (scored). One whose output is not such a
    list is passed over for a retriever it is nested in that holds documents; the trace
    is malformed when none does. None: no retrieval at all.

    With `retriever_names` configured, only observations of those names count.
    """
    generation_start = _start(generation)
    earlier = [o for o in ordered if o is not generation and _start(o) <= generation_start]
    named = bool(rules.retriever_names)
    malformed: Skip | None = None
    enclosing: set[str] = set()  # the ancestors of the malformed retriever
    for observation in reversed(earlier):
        if named and observation.get("name") not in rules.retriever_names:
            continue
        retriever = named or observation.get("type") in rules.retriever_types
        items, where = _document_list(observation.get("output"), rules)
        found_list = bool(items) and all(_is_document(item, rules) for item in items or ())
        documents = () if found_list else openinference_documents(_metadata(observation))
        nested = observation.get("id") in enclosing
        if malformed is not None and (found_list or documents) and not nested:
            return malformed  # an earlier step's documents, not what the model saw
        if found_list:
            assert items is not None
            _note(trail, "sources", f"{where}: {len(items)} documents", observation)
            return tuple(_source(item, rules) for item in items)
        if documents:
            _note(
                trail,
                "sources",
                f"metadata retrieval.documents.*: {len(documents)} OpenInference documents",
                observation,
            )
            return documents
        if retriever:
            found = sources_of(observation.get("output"), rules)
            if not isinstance(found, Skip):
                _note(trail, "sources", "retriever output is empty: no evidence", observation)
                return found
            if malformed is None:
                # Nested retrievers (LlamaIndex's retrieve around _retrieve): the outer
                # may hold the documents the inner only shows as text. Only a retriever
                # it is nested in may stand in for it; else the trace is malformed.
                malformed = found
                enclosing = _ancestors(observation, ordered)
            _note(trail, "sources", f"passed over: {found.detail}", observation)
    return malformed


def _ancestors(observation: Observation, observations: Sequence[Observation]) -> set[str]:
    parents = {
        o.get("id"): o.get("parentObservationId")
        for o in observations
        if isinstance(o.get("id"), str)
    }
    found: set[str] = set()
    parent = observation.get("parentObservationId")
    while isinstance(parent, str) and parent not in found:
        found.add(parent)
        parent = parents.get(parent)
    return found


def _map(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules, trail: Trail | None
) -> RagRecord | Skip:
    root = find_root(observations)
    if root is None:
        return Skip("no_root", "no observation with isRootObservation")
    roots = sum(1 for o in observations if o.get("isRootObservation"))
    which = f"the earliest of {roots} root observations" if roots > 1 else "the root observation"
    _note(trail, "root", which, root)
    environment = as_str(root.get("environment")) or DEFAULT_ENVIRONMENT
    skip = trace_filter(root, environment, rules)
    if skip is not None:
        return skip
    if rules.hook is not None:
        _note(trail, "record", "built by the mapping hook")
        return _from_hook(trace_id, observations, rules)

    ordered = sorted(observations, key=_start)
    generations = [o for o in ordered if is_generation(o, rules)]
    if not generations:
        return Skip("no_generation", "no generation observation")
    generation = generations[-1]
    answer, shape = answer_of(generation.get("output"), rules)
    if not answer or not answer.strip():
        _note(trail, "answer", shape, generation)
        return Skip("no_answer_text", "generation output holds no text")
    which = (
        f"the latest of {len(generations)} generations"
        if len(generations) > 1
        else "the generation"
    )
    _note(trail, "answer", f"{which}; {shape}", generation)

    found = _find_sources(ordered, generation, rules, trail)
    if isinstance(found, Skip):
        return found
    if found is None:
        if prepare(answer).markers:
            return Skip(
                "citations_without_sources",
                "the answer cites [n] but no observation before it holds a list of documents",
            )
        _note(trail, "sources", "no retrieval: an answer without sources")
    sources = found or ()

    question, where = question_of(root.get("input"), rules)
    _note(trail, "question", where, root)

    root_meta, gen_meta = _metadata(root), _metadata(generation)

    def meta(key: str) -> Any:
        value = gen_meta.get(key)
        if value is not None:
            _note(trail, "flags", f"metadata.{key} of the generation", generation)
            return value
        value = root_meta.get(key)
        if value is not None:
            _note(trail, "flags", f"metadata.{key} of the root", root)
        return value

    generation_id = as_str(generation.get("id"))
    started = parse_time(generation.get("startTime"))
    context = decode(meta("context"))
    return RagRecord(
        trace_id=trace_id,
        question=question,
        answer=answer,
        sources=sources,
        observation_id=generation_id,
        timestamp=iso(started) if started is not None else None,
        environment=as_str(generation.get("environment")) or environment,
        rerank_scores=as_float_list(meta("rerank_scores")),
        needs_fallback=as_bool(meta("needs_fallback")),
        low_confidence=as_bool(meta("low_confidence")),
        query_type=as_str(decode(meta("query_type"))),
        context=context if isinstance(context, str) else None,
        app_crag_grade=as_str(decode(meta("crag_grade"))),
        project_id=as_str(root.get("projectId")),
    )


def _from_hook(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules
) -> RagRecord | Skip:
    assert rules.hook is not None
    try:
        built = rules.hook([dict(o) for o in observations])
    except Exception as error:
        return Skip("hook_error", f"{type(error).__name__}: {error}")
    if built is None:
        return Skip("hook_skipped", "the mapping hook returned None")
    if isinstance(built, RagRecord):
        return built
    if isinstance(built, Mapping):
        try:
            return record_from_obj({"trace_id": trace_id, **built})
        except RecordError as error:
            return Skip("hook_invalid", str(error))
    return Skip("hook_invalid", f"the mapping hook returned a {type(built).__name__}")
