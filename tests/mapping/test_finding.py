"""Content finds the documents wherever the trace holds them, and a trace that shows
retrieval is never an answer without evidence (docs/trace-convention.md#checked-by-content,
docs/signals.md#unknown-is-not-zero).

Hand-made traces of the shapes the captured libraries do not all produce: a proxy's
callback alone (the passages numbered in the user message), tool results as text blocks,
in Anthropic's blocks, an instrumentation's placeholder in place of the completion, a tool
whose output holds no documents.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from observer.mapping import MappingRules, Skip, explain_trace, read_trace
from observer.model import RagRecord
from observer.signals import SignalParams, compute

from .test_convention import obs

RULES = MappingRules()
REFUNDS = "Refunds are processed within 5 business days of approval."
CARDS = "Card refunds can take another 3 days to appear on a statement."
ANSWER = "Refunds take 5 business days [1]. Card refunds take 3 more days [2]."


def root(**fields: Any) -> dict[str, Any]:
    return obs("root", "SPAN", "00.000", isRootObservation=True, name="agent", **fields)


def generation(
    messages: list[dict[str, Any]], output: Any = ANSWER, id_: str = "gen"
) -> dict[str, Any]:
    return obs(
        id_,
        "GENERATION",
        "01.000",
        parentObservationId="root",
        input=json.dumps(messages),
        output=output,
    )


def read(observations: list[dict[str, Any]]) -> tuple[RagRecord | Skip, Any]:
    found = read_trace("t1", observations, RULES)
    return found.result, found.provenance


PROXY_TEMPLATES = [
    pytest.param(
        f"Answer from the sources.\n\nSources:\n[1] {REFUNDS}\n[2] {CARDS}\n\n"
        "Question: How long do refunds take?",
        "How long do refunds take?",
        "cut",
        id="labelled",
    ),
    pytest.param(
        f"Context:\n[1] {REFUNDS}\n[2] {CARDS}\n\nHow long do refunds take?",
        "How long do refunds take?",
        "cut",
        id="a_line_that_asks",
    ),
    pytest.param(
        f"[1] {REFUNDS}\n[2] {CARDS}\n\nTell me about refunds. And about cards.",
        "",
        "unverified",
        id="cannot_tell",
    ),
]


@pytest.mark.parametrize(("user", "question", "check"), PROXY_TEMPLATES)
def test_a_proxys_callback_alone_scores_the_passages_without_inventing_scores(
    user: str, question: str, check: str
) -> None:
    """An LLM proxy's callback: one generation, retrieval not traced, the passages and the
    question in one user message."""
    trace = [
        obs(
            "gen",
            "GENERATION",
            "00.000",
            isRootObservation=True,
            input=json.dumps(
                [{"role": "system", "content": "Cite as [n]."}, {"role": "user", "content": user}]
            ),
            output=ANSWER,
        )
    ]
    record, provenance = read(trace)
    assert isinstance(record, RagRecord), record
    assert [s.text for s in record.sources] == [REFUNDS, CARDS]
    assert (record.question, provenance.question_check) == (question, check)
    assert provenance.scores == "not_recorded"
    signals = compute(record, SignalParams())
    assert signals.citations.coverage == 1.0
    assert (signals.rerank_top1, signals.crag, signals.confidence, signals.band) == (
        None,
        None,
        None,
        None,
    )


def test_a_tool_result_of_passages_in_one_text_block_is_the_sources() -> None:
    """LangChain's retriever tool joins the documents' texts with blank lines."""
    block = f"{REFUNDS}\n\n{CARDS}"
    trace = [
        root(input="How long do refunds take?"),
        obs("tool", "TOOL", "00.500", parentObservationId="root", name="search", output=block),
        generation(
            [
                {"role": "user", "content": "How long do refunds take?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "function": {"name": "search"}}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": block},
            ]
        ),
    ]
    record, provenance = read(trace)
    assert isinstance(record, RagRecord), record
    assert [s.text for s in record.sources] == [REFUNDS, CARDS]
    assert provenance.sources_check == "all" and provenance.scores == "not_recorded"


def test_documents_in_anthropic_tool_result_blocks_keep_their_ids_and_scores() -> None:
    docs = [
        {"id": "kb-1", "text": REFUNDS, "relevance_score": 0.91},
        {"id": "kb-2", "text": CARDS, "relevance_score": 0.78},
    ]
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": json.dumps(docs)}],
    }
    trace = [
        root(input="How long do refunds take?"),
        generation(
            [
                {"role": "user", "content": "How long do refunds take?"},
                {"role": "user", "content": [result]},
            ]
        ),
    ]
    record, _ = read(trace)
    assert isinstance(record, RagRecord), record
    assert [(s.chunk_id, s.score) for s in record.sources] == [("kb-1", 0.91), ("kb-2", 0.78)]
    assert record.question == "How long do refunds take?"


@pytest.mark.parametrize("role", ["tool", "function"])
def test_a_tool_message_whose_role_is_written_as_json_escapes_is_read(role: str) -> None:
    """A prompt's text is looked at for the words a tool result is told by before its
    messages are walked; a JSON writer may escape any letter of them (`\\u0074ool`)."""
    docs = [{"id": "kb-1", "text": REFUNDS, "score": 0.9}, {"id": "kb-2", "text": CARDS}]
    messages = [
        {"role": "user", "content": "How long do refunds take?"},
        {"role": role, "content": json.dumps(docs)},
    ]
    escaped = "".join(f"\\u{ord(c):04x}" for c in role)
    written = json.dumps(messages).replace(f'"{role}"', f'"{escaped}"')
    assert role not in written.replace(REFUNDS, "").replace(CARDS, "")
    trace = [root(input="How long do refunds take?"), generation(messages)]
    trace[1]["input"] = written
    record, provenance = read(trace)
    assert isinstance(record, RagRecord), record
    assert [(s.chunk_id, s.score) for s in record.sources] == [("kb-1", 0.9), ("kb-2", None)]
    assert provenance.sources == f"gen input: a {role} message, documents as JSON (result)"


@pytest.mark.parametrize("shape", ["json_string_in_json", "python_repr"])
def test_a_tools_output_encoded_as_text_is_read(shape: str) -> None:
    docs = [
        {"chunk_id": "kb-1", "text": REFUNDS, "score": 0.8},
        {"chunk_id": "kb-2", "text": CARDS, "score": 0.4},
    ]
    output = json.dumps(json.dumps(docs)) if shape == "json_string_in_json" else repr(docs)
    trace = [
        root(input="How long do refunds take?"),
        obs("tool", "TOOL", "00.500", parentObservationId="root", name="search", output=output),
        generation(
            [{"role": "user", "content": f"How long do refunds take?\n\n{REFUNDS}\n{CARDS}"}]
        ),
    ]
    record, provenance = read(trace)
    assert isinstance(record, RagRecord), record
    assert [(s.chunk_id, s.score) for s in record.sources] == [("kb-1", 0.8), ("kb-2", 0.4)]
    assert provenance.scores == "recorded"


def test_a_placeholder_instead_of_the_completion_is_no_answer() -> None:
    """OpenLIT records 'Function called with tools' as the completion of every call that
    offered tools, the final answer's included: the answer is not in the trace."""
    placeholder = "Function called with tools"
    asked = [{"role": "user", "content": "How long do refunds take?"}]
    trace = [
        root(input="How long do refunds take?"),
        generation(asked, placeholder, "gen1"),
        obs("tool", "TOOL", "01.200", parentObservationId="root", name="search", output=REFUNDS),
        {
            **generation([*asked, {"role": "tool", "content": REFUNDS}], placeholder, "gen2"),
            "startTime": "2026-11-20T08:30:01.500Z",
        },
    ]
    record, _ = read(trace)
    assert isinstance(record, Skip) and record.reason == "no_final_answer", record
    assert "placeholder" in record.detail


def test_the_same_text_from_two_calls_asked_different_things_is_a_placeholder() -> None:
    asked = [{"role": "user", "content": "How long do refunds take?"}]
    trace = [
        root(input="How long do refunds take?"),
        generation(asked, "Calling tools.", "gen1"),
        {
            **generation([*asked, {"role": "tool", "content": REFUNDS}], "Calling tools.", "gen2"),
            "startTime": "2026-11-20T08:30:01.500Z",
        },
    ]
    record, _ = read(trace)
    assert isinstance(record, Skip) and record.reason == "no_final_answer"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [("Refunds take 5 days.", "sources_not_found"), (ANSWER, "citations_without_sources")],
)
def test_retrieval_that_left_no_documents_is_a_skip_naming_where_observer_looked(
    answer: str, reason: str
) -> None:
    """A tool ran, but its output is no list of documents and no text observer reads as
    passages: never an answer without evidence."""
    trace = [
        root(input="How long do refunds take?"),
        obs(
            "tool",
            "TOOL",
            "00.500",
            parentObservationId="root",
            name="search",
            output='{"hits": 2}',
        ),
        generation([{"role": "user", "content": "How long do refunds take?"}], answer),
    ]
    record, _ = read(trace)
    assert isinstance(record, Skip) and record.reason == reason, record
    assert "TOOL search" in record.detail and "looked in" in record.detail


def test_an_answer_without_any_sign_of_retrieval_has_no_evidence() -> None:
    trace = [
        root(input="Hi"),
        generation([{"role": "user", "content": "Hi"}], "Hello, how can I help?"),
    ]
    record, provenance = read(trace)
    assert isinstance(record, RagRecord) and record.sources == ()
    assert provenance.scores == "no_sources"
    signals = compute(record, SignalParams())
    assert (signals.rerank_top1, signals.crag and signals.crag.reason) == (0.0, "no_evidence")


def test_a_list_the_prompt_shows_is_found_whatever_its_place_in_the_tree() -> None:
    """An untyped retriever span that ended in the same millisecond as the generation and
    sorts after it: the prompt shows its documents, so they are the sources."""
    docs = [
        {"id": "kb-1", "content": REFUNDS, "rerank_score": 0.9},
        {"id": "kb-2", "content": CARDS, "rerank_score": 0.5},
    ]
    same = {"startTime": "2026-11-20T08:30:01.000Z", "endTime": "2026-11-20T08:30:01.000Z"}
    trace = [
        root(input='{"args": [], "kwargs": {"question": "How long do refunds take?"}}'),
        {
            **generation(
                [{"role": "user", "content": f"[1] {REFUNDS}\n[2] {CARDS}\nHow long?"}], id_="a-gen"
            ),
            **same,
        },
        {
            **obs(
                "z-retrieve", "SPAN", "01.000", parentObservationId="root", output=json.dumps(docs)
            ),
            **same,
        },
    ]
    explained = explain_trace("t1", trace, RULES)
    record = explained.result
    assert isinstance(record, RagRecord), record
    assert [(s.chunk_id, s.score) for s in record.sources] == [("kb-1", 0.9), ("kb-2", 0.5)]
    assert explained.provenance is not None and explained.provenance.sources_check == "all"
