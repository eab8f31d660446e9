"""The default trace convention of docs/trace-convention.md, with declarative overrides.

A trace is every observation sharing a `traceId`, as plain dicts in the
shape the Observations API v2 returns (camelCase keys). `map_trace` turns
one trace into a RagRecord or a `Skip` with a reason; it never raises on
strange input. Users whose traces look different change `MappingRules`
(observation types or names, keys) or name a hook function instead.
"""

from __future__ import annotations

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


def _first_key(obj: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        if key in obj and obj[key] is not None:
            return obj[key]
    return None


def _question(value: Any, rules: MappingRules) -> str:
    value = decode(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        found = _first_key(value, rules.question_keys)
        text = as_str(found)
        if text is not None:
            return text
        messages = value.get("messages")
        if isinstance(messages, list):
            value = messages
    if isinstance(value, list):
        # A chat transcript: the last thing the user said.
        for message in reversed(value):
            if isinstance(message, Mapping) and message.get("role") == "user":
                return _content_text(message.get("content")) or ""
    return ""


def _content_text(content: Any) -> str | None:
    """OpenAI message content: a string, or a list of parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") if isinstance(part, Mapping) else part for part in content]
        texts = [p for p in parts if isinstance(p, str)]
        return "".join(texts) if texts else None
    return None


def answer_text(output: Any, rules: MappingRules) -> str | None:
    """The answer held by a generation's output (docs/trace-convention.md), or None."""
    if isinstance(output, str):
        decoded = decode(output)
        # A number or boolean is the raw text itself ("42"); a JSON string is its value.
        if isinstance(decoded, bool | int | float) or decoded is None:
            return output
        if isinstance(decoded, str):
            return decoded
        output = decoded
    if isinstance(output, list):
        if not output:
            return None
        output = output[0]
    if isinstance(output, Mapping):
        choices = output.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            message = choices[0].get("message")
            if isinstance(message, Mapping):
                return _content_text(message.get("content"))
            return as_str(choices[0].get("text"))
        for key in rules.answer_keys:
            if key in output:
                text = _content_text(output[key])
                if text is not None:
                    return text
        return None
    return as_str(output)


def _lookup(item: Mapping[str, Any], keys: Sequence[str]) -> Any:
    found = _first_key(item, keys)
    if found is None:
        metadata = item.get("metadata")
        if isinstance(metadata, Mapping):
            found = _first_key(metadata, keys)
    return found


def sources_of(output: Any, rules: MappingRules) -> tuple[Source, ...] | Skip:
    """The numbered sources held by a retriever's output, or why they are malformed."""
    items = decode(output)
    if items is None or items == "":
        return ()
    if isinstance(items, Mapping):
        for key in rules.sources_keys:
            if isinstance(items.get(key), list):
                items = items[key]
                break
        else:
            return Skip(
                "malformed_sources", "retriever output is an object without a list of sources"
            )
    if not isinstance(items, list):
        return Skip(
            "malformed_sources", f"retriever output is a {type(items).__name__}, not a list"
        )
    sources: list[Source] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            return Skip(
                "malformed_sources", f"source {index + 1} is a {type(item).__name__}, not an object"
            )
        text = as_str(_lookup(item, rules.text_keys))
        if text is None:
            return Skip("malformed_sources", f"source {index + 1} has no text")
        origin = as_str(_lookup(item, ("origin",)))
        sources.append(
            Source(
                text=text,
                chunk_id=as_str(_lookup(item, rules.chunk_id_keys)),
                doc_id=as_str(_lookup(item, ("doc_id",))),
                title=as_str(_lookup(item, ("title",))),
                score=as_float(_lookup(item, rules.score_keys)),
                text_hash=as_str(_lookup(item, ("text_hash",))),
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


def _metadata(observation: Observation | None) -> Mapping[str, Any]:
    metadata = observation.get("metadata") if observation is not None else None
    return metadata if isinstance(metadata, Mapping) else {}


def _scope_name(metadata: Mapping[str, Any]) -> Any:
    """The OTel instrumentation scope's name: Observations API v2 flattens metadata into
    dotted keys (`scope.name`); a nested `scope: {name}` (older shapes, replays) counts too."""
    if "scope.name" in metadata:
        return metadata["scope.name"]
    scope = metadata.get("scope")
    return scope.get("name") if isinstance(scope, Mapping) else None


def find_root(observations: Sequence[Observation]) -> Observation | None:
    for observation in observations:
        if observation.get("isRootObservation"):
            return observation
    return None


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


def map_trace(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules
) -> RagRecord | Skip:
    """One trace in, one RagRecord (or the reason it is skipped) out."""
    if len(observations) > rules.max_observations:
        return Skip(
            "too_large",
            f"{len(observations)} observations (limits.max_observations_per_trace "
            f"{rules.max_observations})",
        )
    try:
        mapped = _map(trace_id, observations, rules)
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


def _map(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules
) -> RagRecord | Skip:
    root = find_root(observations)
    if root is None:
        return Skip("no_root", "no observation with isRootObservation")
    environment = as_str(root.get("environment")) or DEFAULT_ENVIRONMENT
    skip = trace_filter(root, environment, rules)
    if skip is not None:
        return skip
    if rules.hook is not None:
        return _from_hook(trace_id, observations, rules)

    ordered = sorted(observations, key=_start)
    generations = [o for o in ordered if _is(o, rules.generation_types, rules.generation_names)]
    if not generations:
        return Skip("no_generation", "no generation observation")
    generation = generations[-1]
    generation_start = _start(generation)
    answer = answer_text(generation.get("output"), rules)
    if not answer or not answer.strip():
        return Skip("no_answer_text", "generation output holds no text")

    retrievers = [
        o
        for o in ordered
        if _is(o, rules.retriever_types, rules.retriever_names) and _start(o) <= generation_start
    ]
    sources: tuple[Source, ...] = ()
    if retrievers:
        found = sources_of(retrievers[-1].get("output"), rules)
        if isinstance(found, Skip):
            return found
        sources = found

    root_meta, gen_meta = _metadata(root), _metadata(generation)

    def meta(key: str) -> Any:
        value = gen_meta.get(key)
        return value if value is not None else root_meta.get(key)

    generation_id = as_str(generation.get("id"))
    started = parse_time(generation.get("startTime"))
    return RagRecord(
        trace_id=trace_id,
        question=_question(root.get("input"), rules),
        answer=answer,
        sources=sources,
        observation_id=generation_id,
        timestamp=iso(started) if started is not None else None,
        environment=as_str(generation.get("environment")) or environment,
        rerank_scores=as_float_list(meta("rerank_scores")),
        needs_fallback=as_bool(meta("needs_fallback")),
        low_confidence=as_bool(meta("low_confidence")),
        query_type=as_str(decode(meta("query_type"))),
        context=as_str(decode(meta("context")))
        if isinstance(decode(meta("context")), str)
        else None,
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
