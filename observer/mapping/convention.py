"""The default trace convention of docs/trace-convention.md, with declarative overrides.

A trace is every observation sharing a `traceId`, as plain dicts in the shape the
Observations API v2 returns (camelCase keys). `map_trace` turns one trace into a RagRecord
or a `Skip` with a reason; it never raises on strange input. Users whose traces look
different change `MappingRules` (observation types or names, keys) or name a hook function.

The parts are read by the modules beside this one: the answer (`answer`), the sources
(`sources`, over `documents` and `messages`), each checked by content against the others
(`evidence`). `explain_trace` runs the same code with a trail: which observation gave
each part, and by which rule (`observer explain`, `observer discover`). Without one,
nothing is written down: the daemon's path pays for no explanation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from observer.mapping.answer import (
    Answered,
    answering_generation,
    first_str,
    is_generation,
    name_of,
    prompt_version,
    user_answer,
)
from observer.mapping.decode import as_bool, as_float_list, as_str, clean_text, decode
from observer.mapping.evidence import cut_question, holds_passages, labelled_question
from observer.mapping.messages import answer_of, is_object_name, question_of
from observer.mapping.rules import (
    QUESTION_ASKED,
    QUESTION_CUT,
    QUESTION_UNVERIFIED,
    SCORES_NO_SOURCES,
    SCORES_NOT_RECORDED,
    SCORES_RECORDED,
    MappingRules,
    Observation,
    Provenance,
    Skip,
    Step,
    Trail,
    note,
)
from observer.mapping.sources import TraceView, find_sources, metadata_of, retrieval_signs
from observer.mapping.tree import sibling_key, tree_order
from observer.model import RagRecord, Source, quick_init
from observer.records import RecordError, record_from_obj
from observer.signals.text import prepare
from observer.times import iso_text

JUDGE_ENVIRONMENT = "langfuse-llm-as-a-judge"
DEFAULT_ENVIRONMENT = "default"
# Observation types that show retrieval was done by a tool (an agent's search).
TOOL_TYPES = ("TOOL",)


def _scope_name(metadata: Mapping[str, Any]) -> Any:
    """The OTel instrumentation scope's name: Observations API v2 flattens metadata into
    dotted keys (`scope.name`); a nested `scope: {name}` (older shapes, replays) counts too."""
    if "scope.name" in metadata:
        return metadata["scope.name"]
    scope = metadata.get("scope")
    return scope.get("name") if isinstance(scope, dict) else None


def find_root(observations: Sequence[Observation]) -> Observation | None:
    """The trace's earliest root observation (a trace may have several, docs/daemon.md)."""
    roots = [o for o in observations if o.get("isRootObservation")]
    if len(roots) < 2:
        return roots[0] if roots else None
    return min(roots, key=sibling_key)


def trace_filter(root: Observation, environment: str, rules: MappingRules) -> Skip | None:
    """Traces never scored, or not asked for: the judge's, the observer's own, filtered out."""
    if environment == JUDGE_ENVIRONMENT:
        return Skip("judge_environment", "Langfuse LLM-as-a-judge trace")
    name = as_str(root.get("name")) or ""
    if _scope_name(metadata_of(root)) == "observer" or name.startswith(rules.own_trace_prefixes):
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


@quick_init  # built per trace (observer.model)
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
        note(trail, "skip", f"{skip.reason}: {skip.detail}" if skip.detail else skip.reason)
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
    limit = _past_a_limit(mapped, rules)
    return Explained(limit or mapped, provenance=provenance)


def _past_a_limit(record: RagRecord, rules: MappingRules) -> Skip | None:
    """Bounded time and memory per trace: past a limit, a trace is skipped as `too_large`."""
    if len(record.answer) > rules.max_answer_chars:
        return Skip(
            "too_large",
            f"answer of {len(record.answer)} characters (limits.max_answer_chars "
            f"{rules.max_answer_chars})",
        )
    if len(record.sources) > rules.max_sources:
        return Skip(
            "too_large", f"{len(record.sources)} sources (limits.max_sources {rules.max_sources})"
        )
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _encodes(text: str) -> bool:
    """The text holds no surrogate (what `_SURROGATE` finds is what UTF-8 refuses)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _clean(record: RagRecord) -> RagRecord:
    """Every text of the record writable as UTF-8 (scores, state and logs are)."""
    held: list[Any] = [record.question, record.answer, record.trace_id, record.environment]
    held.append(record.context)
    for source in record.sources:
        held += (source.text, source.chunk_id, source.doc_id, source.title)
    # An ASCII string holds no surrogate (`isascii` reads a flag), and UTF-8 refuses one (an
    # encoder's pass, not a pattern's): most records are scanned no further.
    joined = "".join([t for t in held if isinstance(t, str)])
    if joined.isascii() or _encodes(joined):
        return record  # the usual case: nothing to clean

    def dirty(value: Any) -> bool:
        return isinstance(value, str) and _SURROGATE.search(value) is not None

    def clean(value: Any) -> Any:
        return clean_text(value) if isinstance(value, str) else value

    if any(dirty(getattr(record, f.name)) for f in fields(record)):
        record = replace(
            record,
            **{
                f.name: clean(getattr(record, f.name))
                for f in fields(record)
                if f.name != "sources"
            },
        )
    sources = record.sources
    if any(dirty(getattr(s, f.name)) for s in sources for f in fields(Source)):
        sources = tuple(
            replace(s, **{f.name: clean(getattr(s, f.name)) for f in fields(Source)})
            for s in sources
        )
        record = replace(record, sources=sources)
    return record


# What the SDK adds to every observation's metadata: never an app's flag.
_SDK_KEYS = frozenset({"resourceAttributes", "scope"})


class _Meta:
    """A metadata object read by the bare keys the convention reads (`MappingRules.
    metadata_keys`): the key itself, else under a vendor prefix (`traceloop.association.
    properties.query_type`, `langfuse.trace.metadata.query_type`: the first such name in
    sorted order), else in a nested object (`{"traceloop": {...}}`, in sorted order, four
    levels at most). Indexed once, on the first key it lacks, for those keys only."""

    __slots__ = ("_data", "_depth", "_index", "_wanted")

    def __init__(self, data: Mapping[str, Any], wanted: tuple[str, ...], depth: int = 0) -> None:
        self._data = data
        self._wanted = wanted
        self._depth = depth
        self._index: dict[str, Any] | None = None

    def get(self, key: str) -> Any:
        value = self._data.get(key)
        if value is not None:
            return value
        if self._index is None:
            self._index = self._indexed()
        return self._index.get(key)

    @staticmethod
    def found(data: Mapping[str, Any], wanted: tuple[str, ...]) -> dict[str, Any]:
        """Every wanted key of `data` that has a value (`get`), read at once; a flat object
        without prefixed keys (the usual one) is read without an index."""
        found = {key: data[key] for key in wanted if data.get(key) is not None}
        if len(found) < len(wanted) and not _flat(data):
            for key, value in _Meta(data, wanted)._indexed().items():
                found.setdefault(key, value)
        return found

    def _indexed(self) -> dict[str, Any]:
        prefixed: dict[str, str] = {}
        if _flat(self._data):
            return {}  # the key itself or nothing
        nested: list[str] = []
        for name, inner in self._data.items():
            if not isinstance(name, str) or inner is None:
                continue
            if isinstance(inner, dict) and name not in _SDK_KEYS:
                nested.append(name)
            dot = name.rfind(".")
            if dot >= 0:
                bare = name[dot + 1 :]
                if bare in self._wanted and (bare not in prefixed or name < prefixed[bare]):
                    prefixed[bare] = name
        index = {bare: self._data[name] for bare, name in prefixed.items()}
        if self._depth < 4:
            for name in sorted(nested):
                inner = _Meta(self._data[name], self._wanted, self._depth + 1)
                for key in self._wanted:
                    if key not in index:
                        value = inner.get(key)
                        if value is not None:
                            index[key] = value
        return index


def _flat(data: Mapping[str, Any]) -> bool:
    """No key with a vendor prefix, no nested object but the SDK's."""
    for k, v in data.items():
        if "." in k or (isinstance(v, dict) and k not in _SDK_KEYS):
            return False
    return True


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


def _asked(
    root: Observation,
    ordered: Sequence[Observation],
    rules: MappingRules,
    sources: Sequence[Source],
) -> tuple[str, str, Observation, str]:
    """The question, where it came from, and its check: cut out of a user message that also
    shows the passages, or left empty (`unverified`) when the two cannot be told apart."""
    question, where, asked = _question(root, ordered, rules)
    texts = [s.text for s in sources]
    if not texts or not holds_passages(question, texts):
        labelled = labelled_question(question) if asked is not root else None
        if labelled is not None:  # a prompt template's text around the user's question
            return labelled, f"{where}, after its label", asked, QUESTION_CUT
        return question, where, asked, QUESTION_ASKED
    cut = cut_question(question, texts)
    if cut is not None:
        return cut, f"{where}, the passages cut out of it", asked, QUESTION_CUT
    why = f"{where}: it shows the passages too, and the question cannot be told apart"
    return "", why, asked, QUESTION_UNVERIFIED


def scores_verdict(record: RagRecord) -> str:
    """Whether the record carries retrieval scores (docs/signals.md#unknown-is-not-zero)."""
    if not record.sources:
        return SCORES_NO_SOURCES
    return SCORES_RECORDED if record.retrieval_scores() else SCORES_NOT_RECORDED


def _map(
    trace_id: str, observations: Sequence[Observation], rules: MappingRules, trail: Trail | None
) -> tuple[RagRecord | Skip, Provenance | None]:
    root = find_root(observations)
    if root is None:
        return Skip("no_root", "no observation with isRootObservation"), None
    if trail is not None:
        roots = sum(1 for o in observations if o.get("isRootObservation"))
        many = f"the earliest of {roots} root observations"
        note(trail, "root", many if roots > 1 else "the root observation", root)
    environment = as_str(root.get("environment")) or DEFAULT_ENVIRONMENT
    skip = trace_filter(root, environment, rules)
    if skip is not None:
        return skip, None
    trace_name = as_str(root.get("traceName")) or as_str(root.get("name")) or ""
    if rules.hook is not None:
        note(trail, "record", "built by the mapping hook")
        return _from_hook(trace_id, observations, rules), Provenance(
            "the mapping hook", "the mapping hook", trace_name=trace_name
        )
    malformed = _malformed_id(observations)
    if malformed is not None:
        return malformed, None
    view = TraceView(tree_order(observations), rules)
    answered = answering_generation(view.ordered, rules, root)
    if isinstance(answered, Skip):
        last = [o for o in view.ordered if is_generation(o, rules)][-1:]
        if last:
            said = answered.detail
            if answered.reason == "no_answer_text":
                said = answer_of(last[0].get("output"), rules)[1]
            note(trail, "answer", said, last[0])
        return answered, None
    generation = view.ordered[answered.at]
    answer, how, answer_check = user_answer(answered.text, root, generation)
    shape = f"{answered.shape}, {how}" if how else answered.shape
    if trail is not None:
        line = f"{answered.which}; {shape}; the root's output: {answer_check}"
        note(trail, "answer", line, generation)
    found = find_sources(view, answered.at, rules, trail, TOOL_TYPES, answer)
    said = f"{name_of(generation)}: {shape}"
    sources = found.sources
    if sources is None:
        sources = _absent(view, answered, answer, rules) or ()
        if not isinstance(sources, Skip):
            note(trail, "sources", "no retrieval: an answer without sources")
    if isinstance(sources, Skip):
        return sources, Provenance(
            answer=said,
            answer_check=answer_check,
            sources=found.where,
            sources_check=found.check,
            trace_name=trace_name,
        )
    question, where, asked, question_check = _asked(root, view.ordered, rules, sources)
    note(trail, "question", where, asked)
    record = _record(
        trace_id, root, generation, environment, rules, trail, question, answer, sources, trace_name
    )
    return record, Provenance(  # built whole: `replace` reads every field back, slowly
        question=f"{name_of(asked)}: {where}",
        answer=said,
        answer_check=answer_check,
        sources=found.where,
        sources_check=found.check,
        trace_name=trace_name,
        question_check=question_check,
        scores=scores_verdict(record),
    )


def _malformed_id(observations: Sequence[Observation]) -> Skip | None:
    """An observation whose id is an object or a list: no observation id of Langfuse's, and
    the tree and the rules match ids (`malformed_observation_id`, naming the first)."""
    for at, observation in enumerate(observations):
        own = observation.get("id")
        if isinstance(own, (dict, list)):
            kind = as_str(observation.get("type")) or "observation"
            name = as_str(observation.get("name")) or "?"
            return Skip(
                "malformed_observation_id",
                f"observation {at + 1} of {len(observations)} ({kind} {name}): its id is a "
                f"{type(own).__name__}, not a text",
            )
    return None


def _absent(view: TraceView, answered: Answered, answer: str, rules: MappingRules) -> Skip | None:
    """Absence of evidence is not evidence of absence: an answer whose trace shows that
    retrieval happened, with no documents observer can read, is skipped, naming what showed
    it and where observer looked; None when nothing shows retrieval (an answer without
    sources, scored)."""
    signs = retrieval_signs(view, answered.at, rules, TOOL_TYPES)
    looked = (
        "looked in every observation's output and OpenInference metadata, the tool results "
        "and numbered passages of the answer's prompt"
    )
    if prepare(answer).markers:
        shown = f" ({'; '.join(signs[:3])})" if signs else ""
        return Skip(
            "citations_without_sources",
            f"the answer cites [n] but no list of documents was found{shown}: {looked}",
        )
    if signs:
        return Skip(
            "sources_not_found",
            f"retrieval happened ({'; '.join(signs[:3])}) but no list of documents was found: "
            f"{looked}",
        )
    return None


# The flags in the order the trail names them.
_FLAGS = (
    "context",
    "rerank_scores",
    "needs_fallback",
    "low_confidence",
    "query_type",
    "crag_grade",
)


def _record(
    trace_id: str,
    root: Observation,
    generation: Observation,
    environment: str,
    rules: MappingRules,
    trail: Trail | None,
    question: str,
    answer: str,
    sources: tuple[Source, ...],
    trace_name: str,
) -> RagRecord:
    wanted = rules.metadata_keys
    mine = _Meta.found(metadata_of(generation), wanted)
    flags = {**_Meta.found(metadata_of(root), wanted), **mine}  # the generation's first
    if trail is not None:
        for key in _FLAGS:
            if key in flags:
                held, whose = (generation, "generation") if key in mine else (root, "root")
                note(trail, "flags", f"metadata.{key} of the {whose}", held)
    meta = flags.get
    context = meta("context")
    context = decode(context) if isinstance(context, str) else context
    return RagRecord(
        trace_id=trace_id,
        question=question,
        answer=answer,
        sources=sources,
        observation_id=as_str(generation.get("id")),
        timestamp=iso_text(generation.get("startTime")),
        environment=as_str(generation.get("environment")) or environment,
        rerank_scores=as_float_list(meta("rerank_scores")),
        needs_fallback=as_bool(meta("needs_fallback")),
        low_confidence=as_bool(meta("low_confidence")),
        query_type=as_str(decode(meta("query_type"))),
        context=context if isinstance(context, str) else None,
        app_crag_grade=as_str(decode(meta("crag_grade"))),
        project_id=as_str(root.get("projectId")),
        trace_name=trace_name or None,
        release=first_str(root, generation, "release"),
        version=first_str(root, generation, "version"),
        model=first_str(generation, root, "model"),
        prompt_name=first_str(generation, root, "promptName"),
        prompt_version=prompt_version(generation, root),
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
