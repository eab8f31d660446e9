"""What [mapping] keys would read a trace that the mapping skipped, or read short.

`proposals` looks at one trace's observations and what the mapping made of them
(`explain_trace`'s steps and result) and proposes values of MappingSettings' own
keys, each with why: a generation not typed GENERATION (`generation_names`), the
answer under another key (`answer_keys`), documents under another key or holding
their text under another key (`sources_keys`, `text_keys`), the retriever whose
documents the answer's prompt shows (`retriever_names`), and, for a trace that
scored, the question, scores and chunk ids it read empty (`question_keys`,
`score_keys`, `chunk_id_keys`). A list of documents the answer's prompt refutes is
never proposed. `observer.app.discover` tries them on the whole sample. Pure:
reads nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from observer.mapping.convention import Explained
from observer.mapping.decode import as_str, decode
from observer.mapping.documents import document_lists, to_sources, unwrapped_text
from observer.mapping.evidence import normalised, positions, prompt_text
from observer.mapping.messages import (
    answer_of,
    is_object_name,
    tool_call_arguments,
    tool_results_in,
)
from observer.mapping.rules import MappingRules, Skip, Step
from observer.mapping.tree import tree_order
from observer.times import parse_time

Observation = Mapping[str, Any]

_LLM_NAME = re.compile(
    r"llm|chat|complet|generat|openai|anthropic|claude|gpt|gemini|mistral|ollama|model|answer",
    re.I,
)
_MODEL_KEYS = ("model", "gen_ai.request.model", "gen_ai.response.model", "llm.model_name")
_NOT_LLM_TYPES = frozenset({"RETRIEVER", "EMBEDDING", "EVALUATOR", "GUARDRAIL"})
_NOT_TEXT_KEYS = frozenset({"role", "type", "id", "model", "object", "finish_reason", "name"})
_EARLIEST = datetime.min.replace(tzinfo=UTC)


def _start(observation: Observation) -> datetime:
    return parse_time(observation.get("startTime")) or _EARLIEST


def _by_id(observations: Sequence[Observation], observation_id: str | None) -> Observation | None:
    for observation in observations:
        if observation_id is not None and observation.get("id") == observation_id:
            return observation
    return None


def last_step(result: Explained, part: str) -> Step | None:
    """The last step that read `part` (question, answer, sources), or None."""
    found = [step for step in result.steps if step.part == part]
    return found[-1] if found else None


def _texts(obj: Mapping[str, Any]) -> dict[str, str]:
    """An object's non-empty strings under text-like keys (not an id, a role or a type)."""
    return {
        key: value
        for key, value in obj.items()
        if isinstance(key, str)
        and isinstance(value, str)
        and value.strip()
        and key not in _NOT_TEXT_KEYS
        and not key.lower().endswith("id")
    }


def _strings(obj: Mapping[str, Any]) -> dict[str, str]:
    """`_texts` of an object and of its `metadata`/`meta` (where the mapping looks too)."""
    found: dict[str, str] = {}
    for nested in ("metadata", "meta"):
        inner = obj.get(nested)
        if isinstance(inner, Mapping):
            found.update(_texts(inner))
    return found | _texts(obj)


def text_key(obj: Mapping[str, Any]) -> str | None:
    """The key of an object's longest text."""
    candidates = _texts(obj)
    if not candidates:
        return None
    return max(candidates, key=lambda k: len(candidates[k]))


def document_text_key(items: Sequence[Any]) -> str | None:
    """The key holding a text in every item of a list of objects (the longest in total)."""
    if not items or not all(isinstance(i, Mapping) and "role" not in i for i in items):
        return None
    per_item = [_strings(item) for item in items]
    common = set(per_item[0]).intersection(*per_item[1:])
    if not common:
        return None
    return max(sorted(common), key=lambda k: sum(len(texts[k]) for texts in per_item))


# Numbers in 0..1 that are no retrieval score: a distance (lower is better), a position.
_NOT_A_SCORE = re.compile(r"dist|index|page|position|offset|rank$|start|end", re.IGNORECASE)


def _number_key(items: Sequence[Mapping[str, Any]], suffix: str | None) -> str | None:
    """A key every item holds: a number in [0, 1] (suffix None), or a string id."""
    keys: set[str] | None = None
    for item in items:
        these = set()
        for key, value in item.items():
            if not isinstance(key, str):
                continue
            if suffix is None:
                if _NOT_A_SCORE.search(key):
                    continue
                if (
                    isinstance(value, int | float)
                    and not isinstance(value, bool)
                    and 0 <= value <= 1
                ):
                    these.add(key)
            elif isinstance(value, str) and value and key.lower().endswith(suffix):
                these.add(key)
        keys = these if keys is None else keys & these
    return sorted(keys)[0] if keys else None


@dataclass(frozen=True, slots=True)
class Proposal:
    """One [mapping] value that would read what a trace holds, and why."""

    key: str
    value: str
    why: str


def _list_under_key(output: Mapping[str, Any]) -> tuple[str, list[Any]] | None:
    """The first key of an object holding a list of document-like objects (not messages)."""
    for key, value in output.items():
        if isinstance(value, list) and document_text_key(value) is not None:
            return str(key), value
    return None


def _document_proposals(observation: Observation, rules: MappingRules) -> list[Proposal]:
    """Keys that would read an observation's output as documents (None found: [])."""
    name = as_str(observation.get("name")) or "(unnamed)"
    output = decode(observation.get("output"))
    items: Any = None
    found: list[Proposal] = []
    if isinstance(output, Mapping):
        for known in rules.sources_keys:
            if isinstance(output.get(known), list):
                items = output[known]
                break
        else:
            under = _list_under_key(output)
            if under is not None:
                found.append(
                    Proposal(
                        "sources_keys",
                        under[0],
                        f"{name!r} holds its documents under output.{under[0]}",
                    )
                )
                items = under[1]
    elif isinstance(output, list):
        items = output
    if not isinstance(items, list) or not items:
        return found
    text = document_text_key(items)
    if text is not None and text not in rules.text_keys:
        found.append(
            Proposal("text_keys", text, f"the documents of {name!r} hold their text under {text}")
        )
    return found


def _llm_looking(observation: Observation, rules: MappingRules) -> bool:
    if observation.get("type") in _NOT_LLM_TYPES:
        return False
    metadata = decode(observation.get("metadata"))
    modelled = isinstance(metadata, Mapping) and any(k in metadata for k in _MODEL_KEYS)
    if not modelled and not _LLM_NAME.search(as_str(observation.get("name")) or ""):
        return False
    text, _ = answer_of(observation.get("output"), rules)
    if text and text.strip():
        return True
    output = decode(observation.get("output"))
    return isinstance(output, Mapping) and text_key(output) is not None


def _not_an_answer(text: str) -> bool:
    """A text the checks would refute as an answer: an object's name or repr, or a whole
    response dumped as JSON."""
    return is_object_name(text) or isinstance(decode(text), Mapping | list)


def _shown(observation: Observation, prompt: str | None) -> bool:
    """The documents an observation's output holds are in the prompt (or it is masked)."""
    if prompt is None:
        return True
    output = decode(observation.get("output"))
    items = output if isinstance(output, list) else None
    if isinstance(output, Mapping):
        under = _list_under_key(output)
        items = under[1] if under is not None else None
    key = document_text_key(items) if isinstance(items, list) else None
    if key is None or not isinstance(items, list):
        return False
    texts = [str(_strings(item).get(key, "")) for item in items]
    return any(at is not None for at in positions(texts, prompt))


def _answer_proposal(observation: Observation) -> Proposal | None:
    output = decode(observation.get("output"))
    if isinstance(output, list):
        output = next((item for item in output if isinstance(item, Mapping)), None)
    if not isinstance(output, Mapping):
        return None
    key = text_key(output)
    if key is None or _not_an_answer(output[key]):
        return None
    name = as_str(observation.get("name")) or "(unnamed)"
    return Proposal(
        "answer_keys", key, f"the generation {name!r} holds its answer under output.{key}"
    )


def proposals(
    observations: Sequence[Observation], result: Explained, rules: MappingRules
) -> list[Proposal]:
    """What [mapping] values would read this trace better (nothing when none would)."""
    outcome = result.result
    if not isinstance(outcome, Skip):
        return _refinements(observations, result, outcome.question, outcome.sources, rules)
    reason = outcome.reason
    if reason == "no_generation":
        return _generation_proposals(observations, rules)
    if reason == "no_answer_text":
        return _answer_key_proposals(observations, result, rules)
    if reason == "malformed_sources":
        return _retriever_proposals(observations, result, rules)
    if reason in ("citations_without_sources", "sources_unverified"):
        return _shown_source_proposals(observations, result, rules, reason)
    return []


def _answer_generation(
    observations: Sequence[Observation], result: Explained
) -> Observation | None:
    """The generation the trace's answer was read from (or None)."""
    step = last_step(result, "answer")
    return _by_id(observations, step.observation_id if step else None)


def _generation_proposals(
    observations: Sequence[Observation], rules: MappingRules
) -> list[Proposal]:
    """no_generation: the latest LLM-looking observation's name, as a generation name."""
    candidates = [o for o in observations if _llm_looking(o, rules)]
    if not candidates:
        return []
    chosen = max(candidates, key=_start)
    name = as_str(chosen.get("name"))
    if name is None:
        return []
    return [
        Proposal(
            "generation_names",
            name,
            f"{name!r} ({chosen.get('type')}) looks like the LLM call but is no GENERATION",
        )
    ]


def _answer_key_proposals(
    observations: Sequence[Observation], result: Explained, rules: MappingRules
) -> list[Proposal]:
    """no_answer_text: the key the generation's output holds its answer under."""
    generation = _answer_generation(observations, result)
    answer = _answer_proposal(generation) if generation is not None else None
    return [answer] if answer is not None and answer.value not in rules.answer_keys else []


def _retriever_proposals(
    observations: Sequence[Observation], result: Explained, rules: MappingRules
) -> list[Proposal]:
    """malformed_sources: keys that read the documents of a retriever already passed over."""
    # Every retriever passed over, the latest first: the first one a key reads
    # whose documents the answer's prompt does not refute.
    generation = _answer_generation(observations, result)
    prompt = prompt_text(generation.get("input")) if generation is not None else None
    for step in result.steps:
        observation = _by_id(observations, step.observation_id)
        if step.part == "sources" and observation is not None and _shown(observation, prompt):
            documents = _document_proposals(observation, rules)
            if documents:
                return documents
    return []


def _shown_source_proposals(
    observations: Sequence[Observation], result: Explained, rules: MappingRules, reason: str
) -> list[Proposal]:
    """citations_without_sources, sources_unverified: the latest observation before the
    generation whose documents its prompt shows, read by keys or named a retriever."""
    generation = _answer_generation(observations, result)
    if generation is None:
        return []
    prompt = prompt_text(generation.get("input"))
    ordered = tree_order(observations)
    before = ordered[: next(i for i, o in enumerate(ordered) if o is generation)]
    for observation in reversed(before):
        if not _shown(observation, prompt):
            continue  # never proposed: the prompt would refute it
        documents = _document_proposals(observation, rules)
        if documents:
            return documents
        name = as_str(observation.get("name"))
        if reason == "sources_unverified" and rules.retriever_names and name:
            return [
                Proposal(
                    "retriever_names",
                    name,
                    f"the answer's prompt shows the documents of {name!r}",
                )
            ]
    return []


# Score keys in other words or languages: proposed when a document holds a number under one.
_SCORE_WORDS = re.compile(
    r"^(?:similarity|relevance|rank(?:ing)?_?score|cohere_?score|confidence|分数|得分|相关度|相似度)$",
    re.IGNORECASE,
)


def _flat(item: Mapping[str, Any]) -> dict[str, Any]:
    """A document's keys with its metadata's (where the mapping looks too)."""
    inner = item.get("metadata") or item.get("meta")
    return {**(inner if isinstance(inner, Mapping) else {}), **item}


def _known_score_key(items: Sequence[Mapping[str, Any]]) -> str | None:
    """A key every document holds a number under whose name says it is a score."""
    keys = None
    for item in items:
        these = {
            k
            for k, v in _flat(item).items()
            if isinstance(k, str)
            and _SCORE_WORDS.match(k)
            and isinstance(v, int | float)
            and not isinstance(v, bool)
        }
        keys = these if keys is None else keys & these
    return sorted(keys)[0] if keys else None


def _raw_documents(
    observations: Sequence[Observation],
    result: Explained,
    sources: Sequence[Any],
    rules: MappingRules,
) -> tuple[str, list[Mapping[str, Any]]] | None:
    """The list of objects the record's sources were read from, wherever it sits (an
    observation's output, a tool result in the answer's prompt), and its holder's name."""
    texts = {normalised(s.text) for s in sources}
    if not texts:
        return None
    places: list[tuple[str, Any]] = [
        (as_str(o.get("name")) or "(unnamed)", unwrapped_text(o.get("output")))
        for o in observations
    ]
    generation = _answer_generation(observations, result)
    if generation is not None:
        name = as_str(generation.get("name")) or "(unnamed)"
        places += [
            (f"{name}'s {where}", unwrapped_text(p))
            for where, p in tool_results_in(generation.get("input"))
        ]
    for name, value in places:
        for items, _, _ in document_lists(value, rules):
            read = {normalised(s.text) for s in to_sources(items, rules)}
            if read == texts and all(isinstance(i, Mapping) for i in items):
                return name, items
    return None


def _refinements(
    observations: Sequence[Observation],
    result: Explained,
    question: str,
    sources: Sequence[Any],
    rules: MappingRules,
) -> list[Proposal]:
    """A scored trace read short: an empty question, sources without scores or ids."""
    found: list[Proposal] = []
    question_step = last_step(result, "question")
    root = _by_id(observations, question_step.observation_id if question_step else None)
    if not question.strip() and root is not None:
        value = decode(root.get("input"))
        key = text_key(value) if isinstance(value, Mapping) else None
        if key is not None and key not in rules.question_keys:
            found.append(
                Proposal("question_keys", key, f"the root holds its question under input.{key}")
            )
    held = _raw_documents(observations, result, sources, rules)
    if held is None:
        return found
    name, items = held
    if all(s.score is None for s in sources):
        key = _number_key([_flat(i) for i in items], None) or _known_score_key(items)
        if key is not None and key not in rules.score_keys:
            found.append(
                Proposal("score_keys", key, f"the documents of {name!r} hold a score under {key}")
            )
    if all(s.chunk_id is None for s in sources):
        key = _number_key(items, "id")
        if key is not None and key not in rules.chunk_id_keys:
            found.append(
                Proposal("chunk_id_keys", key, f"the documents of {name!r} hold an id under {key}")
            )
    return found


def refuted(observations: Sequence[Observation], result: Explained) -> str | None:
    """Why a record the content checks would refute is wrong, or None when none does: an
    answer that is not the text the model generated (an object's name, a response dumped
    whole, another observation's text), a source that holds the answer itself or a tool
    call's arguments, sources the answer's prompt contradicts. A proposal that makes one
    is never shown (docs/explain.md#observer-discover)."""
    record = result.result
    if isinstance(record, Skip):
        return None
    if result.provenance is not None and result.provenance.sources_check == "none":
        return "the answer's prompt shows none of its sources"
    generation = _answer_generation(observations, result)
    if generation is None:
        return None
    if _not_an_answer(record.answer):
        return "its answer is an object's name or a whole response, not a text"
    said = normalised(" ".join(_generated(decode(generation.get("output")), 0)))
    answer = normalised(record.answer)
    if answer not in said:
        return "its answer is not the text the model generated"
    prompt = prompt_text(generation.get("input"))
    if prompt is not None and len(answer) >= 20 and answer in prompt:
        return "its answer is the model's prompt, not its completion"
    calls = {
        normalised(a)
        for o in observations
        for a in tool_call_arguments(decode(o.get("output")))
        if a.strip()
    }
    for source in record.sources:
        text = normalised(source.text)
        if len(answer) >= 20 and answer[:60] in text:
            return "a source holds the answer itself"
        if text in calls:
            return "a source is a tool call's arguments"
    return None


# Keys of a completion whose values the model did not write: ids, names, the model's name,
# bookkeeping, and tool calls (their arguments are no answer).
_NOT_WRITTEN = _NOT_TEXT_KEYS | {
    "created",
    "system_fingerprint",
    "usage",
    "tool_calls",
    "function_call",
    "toolName",
    "input",
    "arguments",
}


def _generated(value: Any, depth: int) -> list[str]:
    """The texts a completion holds that the model wrote (not its ids, model or calls)."""
    if depth > 12:
        return []
    if isinstance(value, str):
        inner = decode(value)
        return _generated(inner, depth + 1) if isinstance(inner, Mapping | list) else [value]
    if isinstance(value, Mapping):
        return [
            text
            for key, inner in value.items()
            if isinstance(key, str) and key not in _NOT_WRITTEN and not key.lower().endswith("id")
            for text in _generated(inner, depth + 1)
        ]
    if isinstance(value, list):
        return [text for inner in value for text in _generated(inner, depth + 1)]
    return []
