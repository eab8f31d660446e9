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
from functools import cache
from typing import Any

from observer.mapping.decode import (
    as_bool,
    as_float,
    as_float_list,
    as_str,
    clean_text,
    decode,
)
from observer.mapping.evidence import (
    normalised,
    positions,
    prompt_passages,
    prompt_text,
    reduced,
    strings_in,
)
from observer.mapping.tree import ancestors, sibling_key, tree_order
from observer.model import RagRecord, Source
from observer.records import RecordError, record_from_obj
from observer.signals.text import prepare
from observer.times import iso, parse_time

Observation = Mapping[str, Any]
JUDGE_ENVIRONMENT = "langfuse-llm-as-a-judge"
DEFAULT_ENVIRONMENT = "default"


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
    answer_keys: tuple[str, ...] = ("content", "text", "answer", "response")
    sources_keys: tuple[str, ...] = ("documents", "sources", "chunks", "nodes")
    text_keys: tuple[str, ...] = ("text", "content", "page_content")
    chunk_id_keys: tuple[str, ...] = ("chunk_id", "id")
    # In order of preference: a reranker's own score wins over a first-stage similarity.
    score_keys: tuple[str, ...] = ("rerank_score", "relevance_score", "score")
    # A recorded prompt that shows none of the documents skips the trace
    # (`sources_unverified`); False: the rules decide (a prompt recorded without them).
    verify_sources: bool = True
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

    part: str  # root, question, answer, sources, check, flags, skip
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


@cache
def _fold(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


@cache
def _folded(keys: tuple[str, ...]) -> dict[str, int]:
    return {_fold(key): rank for rank, key in reversed(list(enumerate(keys)))}


def _first_key(obj: Mapping[str, Any], keys: Sequence[str]) -> Any:
    """The first of `keys` the object holds a value under; each key also in another case
    style (`relevance_score` is `relevanceScore` in a JavaScript app's documents)."""
    for key in keys:
        if key in obj and obj[key] is not None:
            return obj[key]
    wanted = _folded(tuple(keys))
    best: tuple[int, Any] | None = None
    for name, value in obj.items():
        if value is None or not isinstance(name, str):
            continue
        rank = wanted.get(_fold(name))
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, value)
    return None if best is None else best[1]


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
        return _question_in_object(value, rules)
    if isinstance(value, list):
        text = _last_user_text(value)
        if text is not None:
            return text, "input is chat messages: the last user message"
    return "", f"input is a {type(value).__name__} without a question"


def _question_in_object(value: Mapping[str, Any], rules: MappingRules) -> tuple[str, str]:
    """`question_of` on an object: a question key, a call's arguments, a component's key,
    or the last user message, the first that holds one."""
    found = _keyed(value, rules.question_keys)
    if found is not None:
        return found[1], f"input.{found[0]}"
    args, kwargs = value.get("args"), value.get("kwargs")
    if isinstance(args, list) and isinstance(kwargs, Mapping):
        called = _question_of_call(args, kwargs, rules)
        if called is not None:
            return called
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


def _question_of_call(
    args: list[Any], kwargs: Mapping[str, Any], rules: MappingRules
) -> tuple[str, str] | None:
    """The @observe decorator's record of a call, f(*args, **kwargs): a question key among
    the keyword arguments, else the first text argument (or None)."""
    found = _keyed(kwargs, rules.question_keys)
    if found is not None:
        return found[1], f"input.kwargs.{found[0]}"
    strings = [(i, a) for i, a in enumerate(args) if isinstance(a, str)]
    # A client passed first is recorded as its class name: the text after it.
    texts = [(i, a) for i, a in strings if not is_object_name(a)] or strings
    if texts:
        index, arg = texts[0]
        return arg, f"input.args[{index}] (the first text argument)"
    return None


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


def _score(item: Mapping[str, Any], keys: Sequence[str]) -> Any:
    """The first score key, in order of preference, on the item or in its metadata: a
    document carrying a first-stage `score` and a reranker's `relevance_score` gives the
    reranker's, wherever each sits."""
    for key in keys:
        found = _lookup(item, (key,))
        if found is not None:
            return found
    return None


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


# How deep under an output's keys document lists are looked for (a graph state's field, a
# component's result: `{"ranker": {"documents": [...]}}`).
_LIST_DEPTH = 3


# Documents kept as parallel columns, a list of texts beside lists of ids and scores of the
# same length (DSPy's `Prediction(passages, pids, scores)`): the text keys, then the others.
_TEXT_COLUMNS = ("passages", "texts", "contexts", "context", "docs", "documents", "chunks")
_ID_COLUMNS = ("pids", "ids", "chunk_ids", "doc_ids")
_SCORE_COLUMNS = ("rerank_scores", "relevance_scores", "scores")


def _columns(value: Mapping[str, Any], rules: MappingRules) -> tuple[list[Any], str] | None:
    """Documents held as parallel columns: ([{"text", "id", "score"}, ...], the text key)."""
    for key in _TEXT_COLUMNS:
        texts = value.get(key)
        if not isinstance(texts, list) or not texts:
            continue
        if not all(isinstance(t, str) and t.strip() for t in texts):
            continue
        rows: list[dict[str, Any]] = [{rules.text_keys[0]: t} for t in texts]
        for names, field_name in ((_ID_COLUMNS, "id"), (_SCORE_COLUMNS, "score")):
            for name in names:
                column = value.get(name)
                if isinstance(column, list) and len(column) == len(texts):
                    for row, item in zip(rows, column, strict=True):
                        row[field_name] = item
                    break
        return rows, key
    return None


def document_lists(output: Any, rules: MappingRules) -> list[tuple[list[Any], str]]:
    """Every non-empty list of documents an output holds, and where: the output itself, its
    sources keys first, then any key (a graph state's `context`, `docs`, `results` ...)."""
    found: list[tuple[list[Any], str]] = []

    def visit(value: Any, where: str, depth: int) -> None:
        if isinstance(value, list):
            if value and all(_is_document(item, rules) for item in value):
                found.append((value, where))
            return
        if not isinstance(value, Mapping) or depth >= _LIST_DEPTH:
            return
        columns = _columns(value, rules)
        if columns is not None:
            found.append((columns[0], f"{where}.{columns[1]}"))
        keys = [k for k in rules.sources_keys if k in value]
        keys += [k for k in value if isinstance(k, str) and k not in rules.sources_keys]
        for key in keys:
            visit(value[key], f"{where}.{key}", depth + 1)

    visit(decode(output), "output", 0)
    return found


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
        score=as_float(_score(item, rules.score_keys)),
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
    """The trace's earliest root observation (a trace may have several, docs/daemon.md)."""
    roots = [o for o in observations if o.get("isRootObservation")]
    return min(roots, key=sibling_key) if roots else None


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
    """What the mapping made of one trace, the rules that made it, and their provenance."""

    result: RagRecord | Skip
    steps: tuple[Step, ...] = ()
    # None when the trace was passed over before its parts were read (filtered, no root).
    provenance: Provenance | None = None


def explain_trace(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules
) -> Explained:
    """`map_trace`, with the trail of rules it followed."""
    trail: Trail = []
    read = _checked(trace_id, observations, rules, trail)
    if isinstance(read.result, Skip):
        skip = read.result
        _note(trail, "skip", f"{skip.reason}: {skip.detail}" if skip.detail else skip.reason)
    return replace(read, steps=tuple(trail))


def read_trace(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules
) -> Explained:
    """One trace in, its record (or the reason it is skipped) and provenance out; no trail."""
    return _checked(trace_id, observations, rules, None)


def map_trace(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules
) -> RagRecord | Skip:
    """One trace in, one RagRecord (or the reason it is skipped) out."""
    return _checked(trace_id, observations, rules, None).result


def _checked(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules, trail: Trail | None
) -> Explained:
    if len(observations) > rules.max_observations:
        return Explained(
            Skip(
                "too_large",
                f"{len(observations)} observations (limits.max_observations_per_trace "
                f"{rules.max_observations})",
            )
        )
    try:
        mapped, provenance = _map(trace_id, observations, rules, trail)
    except Exception as error:  # a strange trace is skipped, never a crash
        return Explained(Skip("mapping_error", f"{type(error).__name__}: {error}"))
    if isinstance(mapped, Skip):
        return Explained(mapped, provenance=provenance)
    mapped = _clean(mapped)
    if len(mapped.answer) > rules.max_answer_chars:
        return Explained(
            Skip(
                "too_large",
                f"answer of {len(mapped.answer)} characters (limits.max_answer_chars "
                f"{rules.max_answer_chars})",
            ),
            provenance=provenance,
        )
    if len(mapped.sources) > rules.max_sources:
        return Explained(
            Skip(
                "too_large",
                f"{len(mapped.sources)} sources (limits.max_sources {rules.max_sources})",
            ),
            provenance=provenance,
        )
    return Explained(mapped, provenance=provenance)


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


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A list of documents somewhere in the trace: a candidate for what the model saw."""

    index: int  # place in the tree order
    observation: Observation
    where: str
    sources: tuple[Source, ...]

    def named(self) -> str:
        name = as_str(self.observation.get("name")) or as_str(self.observation.get("id")) or "?"
        return f"{name} {self.where} ({len(self.sources)})"


def _candidates(
    ordered: Sequence[Observation], before: int, rules: MappingRules
) -> list[_Candidate]:
    """Every list of documents among the observations before the generation (tree order),
    under any key of their outputs, or in their OpenInference retrieval attributes."""
    found: list[_Candidate] = []
    for index in range(before):
        observation = ordered[index]
        for items, where in document_lists(observation.get("output"), rules):
            found.append(
                _Candidate(index, observation, where, tuple(_source(i, rules) for i in items))
            )
        documents = openinference_documents(_metadata(observation))
        if documents:
            found.append(_Candidate(index, observation, "metadata retrieval.documents", documents))
    return found


def _rules_pick(
    ordered: Sequence[Observation], before: int, rules: MappingRules, trail: Trail | None
) -> tuple[Source, ...] | Skip | None:
    """The documents the rules of the convention choose: from the last observation before
    the generation (tree order) whose output is a list of documents, of whatever type (a
    retriever, a reranker after it, an untyped function, a tool). A retriever met on the way
    back whose output is empty decides: no evidence (scored). One whose output is not such a
    list is passed over for a retriever it is nested in that holds documents; the trace is
    malformed when none does. None: no retrieval at all.

    With `retriever_names` configured, only observations of those names count.
    """
    named = bool(rules.retriever_names)
    malformed: Skip | None = None
    enclosing: set[str] = set()  # the ancestors of the malformed retriever
    for index in range(before - 1, -1, -1):
        observation = ordered[index]
        if named and observation.get("name") not in rules.retriever_names:
            continue
        retriever = named or observation.get("type") in rules.retriever_types
        lists = document_lists(observation.get("output"), rules)
        documents = () if lists else openinference_documents(_metadata(observation))
        nested = observation.get("id") in enclosing
        if malformed is not None and (lists or documents) and not nested:
            return malformed  # an earlier step's documents, not what the model saw
        if lists:
            items, where = lists[0]
            noun = "document" if len(items) == 1 else "documents"
            _note(trail, "sources", f"{where}: {len(items)} {noun}", observation)
            return tuple(_source(item, rules) for item in items)
        if documents:
            noun = "document" if len(documents) == 1 else "documents"
            _note(
                trail,
                "sources",
                f"metadata retrieval.documents.*: {len(documents)} OpenInference {noun}",
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
                enclosing = ancestors(observation, ordered)
            _note(trail, "sources", f"passed over: {found.detail}", observation)
    return malformed


@dataclass(frozen=True, slots=True)
class _Shown:
    """A candidate's documents as the prompt shows them."""

    candidate: _Candidate
    at: tuple[int | None, ...]  # where each text starts in the prompt

    @property
    def found(self) -> int:
        return sum(1 for a in self.at if a is not None)

    @property
    def whole(self) -> bool:
        return self.found == len(self.at)

    def numbered(self) -> tuple[Source, ...]:
        """The documents in the order the prompt shows them (those it does not, after)."""
        order = sorted(
            range(len(self.at)),
            key=lambda i: (self.at[i] is None, self.at[i] or 0, i),
        )
        return tuple(self.candidate.sources[i] for i in order)


def _find_sources(
    ordered: Sequence[Observation],
    before: int,
    generation: Observation,
    rules: MappingRules,
    trail: Trail | None,
) -> tuple[tuple[Source, ...] | Skip | None, str, str]:
    """The documents the answering model saw: (sources, where, check).

    When the generation's input is recorded, the candidate list whose texts it shows,
    numbered as it shows them; the rules (`_rules_pick`) decide between lists it cannot
    tell apart and when the input is masked. A contradiction is a `sources_unverified`
    skip naming the candidates. `check` is the verdict (docs/trace-convention.md).
    """
    picked = _rules_pick(ordered, before, rules, trail)
    prompt = prompt_text(generation.get("input"))
    candidates = _candidates(ordered, before, rules)
    if prompt is None:
        where = _where_picked(picked, candidates)
        return picked, where, CHECK_NOT_RECORDED if picked else CHECK_NO_RETRIEVAL
    if not candidates:
        if picked:  # no list of documents: `picked` is a malformed skip
            return picked, "", CHECK_NONE
        passages = prompt_passages(generation.get("input"))
        if passages and picked is None and not _unread_lists(ordered, before):
            _note(
                trail,
                "sources",
                f"no traced retrieval: the prompt's {len(passages)} numbered passages",
                generation,
            )
            sources = tuple(Source(text=text) for text in passages)
            return sources, "the prompt's numbered passages", CHECK_PROMPT
        return picked, "", CHECK_NO_RETRIEVAL
    shown = [_Shown(c, tuple(positions([s.text for s in c.sources], prompt))) for c in candidates]
    picked_key = _picked_key(picked)

    def preference(entry: _Shown) -> tuple[int, bool, bool, int]:
        is_picked = _sources_key(entry.candidate.sources) == picked_key
        return (entry.found, entry.whole, is_picked, entry.candidate.index)

    best = max(shown, key=preference)
    if best.found == 0 and not rules.verify_sources:
        where = _where_picked(picked, candidates)
        return picked, where, CHECK_NOT_RECORDED if picked else CHECK_NO_RETRIEVAL
    if best.found == 0:
        detail = "; ".join(c.named() for c in candidates)
        return (
            Skip(
                "sources_unverified",
                f"the answer's prompt shows none of the document lists: {detail} (a prompt "
                "recorded without its documents: mapping.verify_sources = false)",
            ),
            "",
            CHECK_NONE,
        )
    if rules.retriever_names:
        # A configured mapping is not overridden: its list stands when the prompt shows it
        # as well as any other, else the contradiction is a skip.
        mine = [e for e in shown if _sources_key(e.candidate.sources) == picked_key]
        if not mine or (mine[-1].found, mine[-1].whole) < (best.found, best.whole):
            return (
                Skip(
                    "sources_unverified",
                    f"mapping.retriever_names chose documents the prompt does not show "
                    f"(all of); it shows {best.candidate.named()}",
                ),
                "",
                CHECK_NONE,
            )
        best = mine[-1]
    check = CHECK_ALL if best.whole else CHECK_SOME
    if _sources_key(best.candidate.sources) != picked_key:
        _note(
            trail,
            "check",
            f"sources overridden by content: the prompt shows {best.candidate.where} "
            f"({best.found} of {len(best.at)} texts)",
            best.candidate.observation,
        )
    else:
        _note(trail, "check", f"sources: the prompt shows {best.found} of {len(best.at)} texts")
    observation = best.candidate.observation
    name = as_str(observation.get("name")) or as_str(observation.get("id")) or "?"
    return best.numbered(), f"{name} {best.candidate.where}", check


def _unread_lists(ordered: Sequence[Observation], before: int) -> bool:
    """An output before the generation holds a list of objects the rules do not read as
    documents: retrieval was traced, in a shape a mapping must name (not the prompt's
    passages, which carry no ids or scores)."""

    def holds(value: Any, depth: int) -> bool:
        if isinstance(value, list):
            return bool(value) and all(
                isinstance(item, Mapping) and "role" not in item for item in value
            )
        if isinstance(value, Mapping) and depth < _LIST_DEPTH:
            return any(holds(inner, depth + 1) for inner in value.values())
        return False

    return any(holds(decode(ordered[i].get("output")), 0) for i in range(before))


def _sources_key(sources: Sequence[Source]) -> tuple[str, ...]:
    return tuple(sorted(s.text for s in sources))


def _picked_key(picked: tuple[Source, ...] | Skip | None) -> tuple[str, ...] | None:
    return _sources_key(picked) if isinstance(picked, tuple) and picked else None


def _where_picked(
    picked: tuple[Source, ...] | Skip | None, candidates: Sequence[_Candidate]
) -> str:
    key = _picked_key(picked)
    found = [c for c in candidates if _sources_key(c.sources) == key]
    return found[-1].named() if found else ""


# The content checks' verdicts (docs/trace-convention.md): a metric's label values.
CHECK_ALL = "all"  # every text of the chosen list is in the answer's prompt
CHECK_SOME = "some"
CHECK_NONE = "none"  # never scored: skipped as sources_unverified
CHECK_NOT_RECORDED = "not_recorded"  # the prompt is masked or absent: the rules decided
CHECK_PROMPT = "prompt_passages"  # no traced retrieval: the prompt's numbered passages
CHECK_NO_RETRIEVAL = "no_retrieval"
ANSWER_CONFIRMED = "confirmed"  # the root's output holds the answer
ANSWER_DIFFERS = "differs"  # the root's output holds other text
ANSWER_NO_ROOT_OUTPUT = "no_root_output"
ANSWER_IS_ROOT = "root"  # the generation is the root


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where each part of a record came from, and whether its content confirmed it."""

    question: str = ""
    answer: str = ""
    answer_check: str = ANSWER_NO_ROOT_OUTPUT
    sources: str = ""
    sources_check: str = CHECK_NO_RETRIEVAL
    trace_name: str = ""


# What the user got is usually all of it; a part shorter than this is no evidence.
_MIN_PART = 20


def _user_answer(
    text: str, root: Observation, generation: Observation, rules: MappingRules
) -> tuple[str, str, str]:
    """The answer the user got: (text, how, check). The root's output, when it holds the
    generation's text or a part of it; else the generation's, reduced out of a structured
    completion's envelope."""
    envelope = reduced(text)
    fallback = (envelope[0], envelope[1]) if envelope is not None else (text, "")
    if root is generation:
        return fallback[0], fallback[1], ANSWER_IS_ROOT
    output = decode(root.get("output"))
    if output is None or output == "":
        return fallback[0], fallback[1], ANSWER_NO_ROOT_OUTPUT
    held = [s for s in strings_in(output) if s.strip()]
    shown = [normalised(s) for s in held]
    whole = normalised(text)
    if any(whole in s for s in shown):
        return text, "", ANSWER_CONFIRMED
    if envelope is not None and any(normalised(envelope[0]) in s for s in shown):
        return envelope[0], envelope[1], ANSWER_CONFIRMED
    parts = [h for h, n in zip(held, shown, strict=True) if len(n) >= _MIN_PART and n in whole]
    if parts:
        return max(parts, key=len), "the part the root's output holds", ANSWER_CONFIRMED
    return fallback[0], fallback[1], ANSWER_DIFFERS


# An object's name where a text was expected: `OpenAI`, `openai.OpenAI`, `<Client object at
# 0x7f...>` (a function's first argument, the client, recorded as its class or repr).
_OBJECT_NAME = re.compile(
    r"^(?:<[\w.]+(?: object)? at 0x[0-9a-fA-F]+>|[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)$"
)


def is_object_name(text: str) -> bool:
    stripped = text.strip()
    return bool(_OBJECT_NAME.match(stripped)) and (
        stripped.startswith("<") or any(c.isupper() for c in stripped[1:]) or "." in stripped
    )


def _question(
    root: Observation, ordered: Sequence[Observation], rules: MappingRules
) -> tuple[str, str, Observation]:
    """What the user asked: the root's input by the rules; when that is empty or an
    object's name, the last user message of the first generation's input, else the first
    text input in the tree."""
    question, where = question_of(root.get("input"), rules)
    if question.strip() and not is_object_name(question):
        return question, where, root
    for observation in ordered:
        if is_generation(observation, rules):
            text, how = question_of(observation.get("input"), rules)
            if text.strip() and not is_object_name(text):
                return text, f"{how} of the first generation (the root's: {where})", observation
            break
    for observation in ordered:
        text = decode(observation.get("input"))
        if isinstance(text, str) and text.strip() and not is_object_name(text):
            return text, f"the first text input (the root's: {where})", observation
    return question, where, root


def _meta_key(metadata: Mapping[str, Any], key: str, depth: int = 0) -> Any:
    """A metadata value by its bare key, else under a vendor prefix
    (`traceloop.association.properties.query_type`, `langfuse.trace.metadata.query_type`)."""
    value = metadata.get(key)
    if value is not None:
        return value
    suffix = "." + key
    prefixed: list[str] = []
    nested: list[str] = []
    for name, inner in metadata.items():
        if not isinstance(name, str) or inner is None:
            continue
        if name.endswith(suffix):
            prefixed.append(name)
        elif isinstance(inner, Mapping) and depth < 4:  # nested: {"traceloop": {...}}
            nested.append(name)
    if prefixed:
        return metadata[min(prefixed)]
    for name in sorted(nested):
        value = _meta_key(metadata[name], key, depth + 1)
        if value is not None:
            return value
    return None


def _map(
    trace_id: str,
    observations: Sequence[Observation],
    rules: MappingRules,
    trail: Trail | None,
) -> tuple[RagRecord | Skip, Provenance | None]:
    root = find_root(observations)
    if root is None:
        return Skip("no_root", "no observation with isRootObservation"), None
    roots = sum(1 for o in observations if o.get("isRootObservation"))
    which = f"the earliest of {roots} root observations" if roots > 1 else "the root observation"
    _note(trail, "root", which, root)
    environment = as_str(root.get("environment")) or DEFAULT_ENVIRONMENT
    skip = trace_filter(root, environment, rules)
    if skip is not None:
        return skip, None
    trace_name = as_str(root.get("traceName")) or as_str(root.get("name")) or ""
    if rules.hook is not None:
        _note(trail, "record", "built by the mapping hook")
        return _from_hook(trace_id, observations, rules), Provenance(
            "the mapping hook", "the mapping hook", trace_name=trace_name
        )

    ordered = tree_order(observations)
    places = [i for i, o in enumerate(ordered) if is_generation(o, rules)]
    if not places:
        return Skip("no_generation", "no generation observation"), None
    place = places[-1]
    generation = ordered[place]
    text, shape = answer_of(generation.get("output"), rules)
    if not text or not text.strip():
        _note(trail, "answer", shape, generation)
        return Skip("no_answer_text", "generation output holds no text"), None
    which = f"the last of {len(places)} generations" if len(places) > 1 else "the generation"
    answer, how, answer_check = _user_answer(text, root, generation, rules)
    shape = f"{shape}, {how}" if how else shape
    _note(trail, "answer", f"{which}; {shape}; the root's output: {answer_check}", generation)

    found, sources_where, sources_check = _find_sources(ordered, place, generation, rules, trail)
    provenance = Provenance(
        answer=f"{as_str(generation.get('name')) or '?'}: {shape}",
        answer_check=answer_check,
        sources=sources_where,
        sources_check=sources_check,
        trace_name=trace_name,
    )
    if isinstance(found, Skip):
        return found, provenance
    if found is None:
        if prepare(answer).markers:
            return Skip(
                "citations_without_sources",
                "the answer cites [n] but no observation before it holds a list of documents",
            ), provenance
        _note(trail, "sources", "no retrieval: an answer without sources")
    sources = found or ()

    question, where, asked = _question(root, ordered, rules)
    _note(trail, "question", where, asked)
    provenance = replace(provenance, question=f"{as_str(asked.get('name')) or '?'}: {where}")

    root_meta, gen_meta = _metadata(root), _metadata(generation)

    def meta(key: str) -> Any:
        value = _meta_key(gen_meta, key)
        if value is not None:
            _note(trail, "flags", f"metadata.{key} of the generation", generation)
            return value
        value = _meta_key(root_meta, key)
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
        trace_name=trace_name or None,
        release=_first_str(root, generation, "release"),
        version=_first_str(root, generation, "version"),
        model=_first_str(generation, root, "model"),
        prompt_name=_first_str(generation, root, "promptName"),
        prompt_version=_prompt_version(generation, root),
    ), provenance


def _first_str(first: Observation, second: Observation, key: str) -> str | None:
    """A dimension (docs/trace-convention.md#dimensions) of the first observation, else
    of the second: release and version are the trace's (its root first), model and prompt
    the answering generation's."""
    return as_str(first.get(key)) or as_str(second.get(key)) or None


def _prompt_version(generation: Observation, root: Observation) -> int | None:
    """The version beside the prompt name that was read (the generation's when it names a
    prompt, else the root's); None without a prompt name."""
    holder = next((o for o in (generation, root) if as_str(o.get("promptName"))), None)
    if holder is None:
        return None
    version = holder.get("promptVersion")
    if isinstance(version, bool):
        return None
    if isinstance(version, int):
        return version
    if isinstance(version, str) and version.strip().isdigit():
        return int(version)
    return None


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
