"""What the mapping is told and what it tells: its rules, a skip, the trail, the provenance.

`MappingRules` is the `[mapping]` section as the pure code reads it (docs/configuration.md).
A `Skip` is a trace not scored and why (a counted, logged reason); a `Step` one rule the
mapping applied, kept only when someone asks (`observer explain`, `observer discover`);
`Provenance` where each part of a record came from and whether its content confirmed it
(docs/trace-convention.md#checked-by-content).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from observer.mapping.decode import as_str
from observer.model import quick_init

Observation = Mapping[str, Any]


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
    question_keys: tuple[str, ...] = ("question", "query", "input", "message", "task")
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


def note(trail: Trail | None, part: str, rule: str, observation: Observation | None = None) -> None:
    """Write a step down, when someone keeps a trail (the daemon's path keeps none)."""
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
QUESTION_ASKED = "asked"  # as the rules read it
QUESTION_CUT = "cut"  # the user message also held the passages: cut out of it
QUESTION_UNVERIFIED = "unverified"  # passages and question could not be told apart: left empty
SCORES_RECORDED = "recorded"  # retrieval scores: the score signals are computed
SCORES_NOT_RECORDED = "not_recorded"  # sources without any score: score signals unknown
SCORES_NO_SOURCES = "no_sources"  # no evidence at all: the worst values, known


@quick_init  # built per trace (observer.model)
@dataclass(frozen=True, slots=True)
class Provenance:
    """Where each part of a record came from, and whether its content confirmed it."""

    question: str = ""
    answer: str = ""
    answer_check: str = ANSWER_NO_ROOT_OUTPUT
    sources: str = ""
    sources_check: str = CHECK_NO_RETRIEVAL
    trace_name: str = ""
    question_check: str = QUESTION_ASKED
    scores: str = SCORES_NO_SOURCES
