"""The record checked by content: each shape of the issue's table, by hand.

What is checked is docs/trace-convention.md#checked-by-content.

Each trace is the smallest one that shows the shape, in the Observations API v2's rows;
each test says what a person reading the trace expects and what the provenance says.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from observer.mapping.convention import explain_trace, read_trace
from observer.mapping.evidence import prompt_passages, reduced
from observer.mapping.rules import MappingRules, Skip
from observer.model import RagRecord
from observer.signals import SignalParams, compute
from observer.telemetry.metrics import Metrics

T0 = "2026-12-01T10:00:00.000Z"


def at(ms: int) -> str:
    return f"2026-12-01T10:00:{ms // 1000:02d}.{ms % 1000:03d}Z"


def row(oid: str, kind: str, name: str, start: int, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": oid,
        "traceId": "t",
        "type": kind,
        "name": name,
        "startTime": at(start),
        "endTime": at(start + 5),
        "parentObservationId": "root",
        "isRootObservation": False,
        "metadata": {},
    }
    for key, value in fields.items():
        base[key] = value if key in ("parentObservationId", "metadata") else _json(value)
    return base


def _json(value: Any) -> Any:
    return value if value is None or isinstance(value, str) else json.dumps(value)


def root(**fields: Any) -> dict[str, Any]:
    base = row("root", "CHAIN", "app", 0, **fields)
    base.update(isRootObservation=True, parentObservationId=None, endTime=at(900))
    return base


TEXTS = {
    f"c{i}": f"Chunk number {i} says the refund window is {i + 10} days long." for i in range(6)
}
QUESTION = "How long is the refund window?"


def doc(chunk: str, **metadata: Any) -> dict[str, Any]:
    return {"id": chunk, "page_content": TEXTS[chunk], "metadata": metadata}


def prompt(chunks: list[str], question: str = QUESTION) -> list[dict[str, str]]:
    numbered = "\n".join(f"[{n}] {TEXTS[c]}" for n, c in enumerate(chunks, 1))
    return [
        {"role": "system", "content": "Answer from the sources; cite them as [n]."},
        {"role": "user", "content": f"Sources:\n{numbered}\n\nQuestion: {question}"},
    ]


ANSWER = "The window is 13 days [1]. It can be 10 days too [2]."
CANDIDATES = ["c0", "c1", "c2", "c3", "c4", "c5"]
KEPT = ["c3", "c0", "c5", "c1"]  # the cross-encoder's order
RERANK = {"c3": 0.91, "c0": 0.55, "c5": 0.3, "c1": 0.21}


def graph_trace(*, generation_input: Any = None, masked: bool = False) -> list[dict[str, Any]]:
    """LangChain's RAG tutorial as a graph: 6 candidates, then a rerank keeping 4, both
    written to the state's `context`; the documents keep the first stage's `score`."""
    candidates = [doc(c, score=0.8 - i / 20) for i, c in enumerate(CANDIDATES)]
    kept = [doc(c, score=0.5, relevance_score=RERANK[c]) for c in KEPT]
    if generation_input is None and not masked:
        generation_input = prompt(KEPT)
    return [
        root(input={"question": QUESTION}, output={"question": QUESTION, "answer": ANSWER}),
        row("n1", "CHAIN", "retrieve", 10, output={"context": candidates}),
        row("n2", "CHAIN", "rerank", 20, output={"context": kept}),
        row("n3", "CHAIN", "generate", 30, output={"answer": ANSWER}),
        row(
            "g",
            "GENERATION",
            "ChatOpenAI",
            31,
            parentObservationId="n3",
            input=generation_input,
            output={"role": "assistant", "content": ANSWER},
        ),
    ]


def record(observations: list[dict[str, Any]], rules: MappingRules | None = None) -> RagRecord:
    result = read_trace("t", observations, rules or MappingRules()).result
    assert isinstance(result, RagRecord), result
    return result


def test_the_sources_are_the_list_the_prompt_shows_with_the_rerankers_scores() -> None:
    read = read_trace("t", graph_trace(), MappingRules())
    assert isinstance(read.result, RagRecord)
    assert [s.chunk_id for s in read.result.sources] == KEPT
    assert [s.score for s in read.result.sources] == [RERANK[c] for c in KEPT]
    assert read.provenance is not None and read.provenance.sources_check == "all"
    assert read.provenance.sources == "rerank output.context"
    signals = compute(read.result, SignalParams())
    assert signals.rerank_top1 == 0.91


def test_numbered_by_where_the_prompt_shows_each_text() -> None:
    shown = ["c5", "c3", "c1", "c0"]
    got = record(graph_trace(generation_input=prompt(shown)))
    assert [s.chunk_id for s in got.sources] == shown


def test_a_masked_prompt_leaves_the_choice_to_the_rules() -> None:
    read = read_trace("t", graph_trace(masked=True), MappingRules())
    assert isinstance(read.result, RagRecord)
    assert [s.chunk_id for s in read.result.sources] == KEPT  # the last list before it
    assert read.provenance is not None and read.provenance.sources_check == "not_recorded"


def test_a_prompt_showing_none_of_the_lists_is_skipped_naming_them() -> None:
    other = [{"role": "user", "content": "Sources:\n[1] Something else entirely.\n\n" + QUESTION}]
    read = read_trace("t", graph_trace(generation_input=other), MappingRules())
    assert isinstance(read.result, Skip) and read.result.reason == "sources_unverified"
    assert "retrieve output.context (6)" in read.result.detail
    assert "rerank output.context (4)" in read.result.detail
    assert "mapping.verify_sources = false" in read.result.detail
    # The escape hatch: a prompt recorded without its documents, the rules decide.
    lenient = record(graph_trace(generation_input=other), MappingRules(verify_sources=False))
    assert [s.chunk_id for s in lenient.sources] == KEPT


def test_a_configured_retriever_the_prompt_contradicts_is_skipped() -> None:
    rules = MappingRules(retriever_names=("retrieve", "rerank"))
    assert [s.chunk_id for s in record(graph_trace(), rules).sources] == KEPT
    only = MappingRules(retriever_names=("retrieve",))
    result = read_trace("t", graph_trace(), only).result
    assert isinstance(result, Skip) and result.reason == "sources_unverified"


COMPLETION = (
    "[[ ## reasoning ## ]]\nThe sources say so.\n\n[[ ## response ## ]]\n"
    f"{ANSWER}\n\n[[ ## completed ## ]]"
)


@pytest.mark.parametrize(
    ("root_output", "check"),
    [
        ({"reasoning": "The sources say so.", "response": ANSWER}, "confirmed"),
        (None, "no_root_output"),
    ],
    ids=["root-returns-the-response", "no-root-output"],
)
def test_a_structured_completion_is_reduced_to_what_the_app_returns(
    root_output: Any, check: str
) -> None:
    observations = graph_trace()
    observations[0]["output"] = _json(root_output)
    observations[-1]["output"] = json.dumps([COMPLETION])
    read = read_trace("t", observations, MappingRules())
    assert isinstance(read.result, RagRecord)
    assert read.result.answer == ANSWER
    assert read.provenance is not None and read.provenance.answer_check == check
    assert compute(read.result, SignalParams()).citations.coverage == 1.0


def test_the_root_returning_part_of_the_generation_is_the_answer() -> None:
    observations = graph_trace()
    observations[-1]["output"] = json.dumps({"content": f"Answer: {ANSWER}\n\n(model v3)"})
    observations[0]["output"] = json.dumps(ANSWER)
    assert record(observations).answer == ANSWER


@pytest.mark.parametrize(
    ("root_input", "expected"),
    [
        (None, QUESTION),  # an agent workflow's root without input
        ({"args": ["OpenAI", QUESTION], "kwargs": {}}, QUESTION),  # a client passed first
        ({"args": ["<openai.OpenAI object at 0x7f3a2b>", QUESTION], "kwargs": {}}, QUESTION),
        ({"args": [QUESTION], "kwargs": {}}, QUESTION),
        ("Kubernetes", "Kubernetes"),  # one word, but the only text: still the question
    ],
)
def test_the_question_is_what_the_user_asked(root_input: Any, expected: str) -> None:
    observations = graph_trace()
    observations[0]["input"] = _json(root_input)
    observations[-1]["input"] = json.dumps(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    )
    got = read_trace("t", observations, MappingRules(verify_sources=False)).result
    assert isinstance(got, RagRecord) and got.question == expected


@pytest.mark.parametrize(
    "key",
    [
        "traceloop.association.properties.query_type",
        "attributes.traceloop.association.properties.query_type",
        "langfuse.trace.metadata.query_type",
    ],
)
def test_vendor_prefixed_metadata_is_read_as_the_bare_key(key: str) -> None:
    observations = graph_trace()
    observations[0]["metadata"] = {key: "billing"}
    assert record(observations).query_type == "billing"


def test_the_bare_key_wins_over_a_prefixed_one() -> None:
    observations = graph_trace()
    observations[0]["metadata"] = {"query_type": "howto", "x.query_type": "billing"}
    assert record(observations).query_type == "howto"


def test_untraced_retrieval_reads_the_prompts_passages() -> None:
    observations = [
        root(input=QUESTION, output=ANSWER),
        row("g", "GENERATION", "llm", 10, input=prompt(["c2", "c4"]), output=ANSWER),
    ]
    read = read_trace("t", observations, MappingRules())
    assert isinstance(read.result, RagRecord)
    assert [s.text for s in read.result.sources] == [TEXTS["c2"], TEXTS["c4"]]
    assert all(s.chunk_id is None for s in read.result.sources)
    assert read.provenance is not None and read.provenance.sources_check == "prompt_passages"


def test_documents_in_an_unread_shape_are_not_replaced_by_the_prompts_passages() -> None:
    unread = [{"uid": c, "body": TEXTS[c]} for c in ("c2", "c4")]
    observations = [
        root(input=QUESTION, output=ANSWER),
        row("s", "SPAN", "search", 5, output=unread),
        row("g", "GENERATION", "llm", 10, input=prompt(["c2", "c4"]), output=ANSWER),
    ]
    result = read_trace("t", observations, MappingRules()).result
    assert isinstance(result, Skip) and result.reason == "citations_without_sources"


def test_documents_as_parallel_columns() -> None:
    columns = {"passages": [TEXTS[c] for c in KEPT], "pids": KEPT, "scores": [0.9, 0.5, 0.4, 0.1]}
    observations = graph_trace()
    observations[2]["output"] = json.dumps(columns)
    got = record(observations)
    assert [(s.chunk_id, s.score) for s in got.sources] == list(
        zip(KEPT, [0.9, 0.5, 0.4, 0.1], strict=True)
    )


def test_camel_case_keys_are_read() -> None:
    kept = [{"id": c, "pageContent": TEXTS[c], "relevanceScore": RERANK[c]} for c in KEPT]
    observations = graph_trace()
    observations[2]["output"] = json.dumps({"context": kept})
    assert [s.score for s in record(observations).sources] == [RERANK[c] for c in KEPT]


def test_explain_says_the_check_and_the_override() -> None:
    observations = graph_trace()
    observations[2]["type"] = "SPAN"
    # A retriever after the rerank holding the candidates again: the rules would take it.
    observations.insert(
        3, row("late", "RETRIEVER", "retriever", 25, output=[doc(c) for c in CANDIDATES])
    )
    explained = explain_trace("t", observations, MappingRules())
    assert isinstance(explained.result, RagRecord)
    assert [s.chunk_id for s in explained.result.sources] == KEPT
    checks = [s.rule for s in explained.steps if s.part == "check"]
    assert checks == [
        "sources overridden by content: the prompt shows output.context (4 of 4 texts)"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Sources:\n[1] Alpha.\n[2] Beta\n\nQuestion: x", ["Alpha.", "Beta"]),
        ("[1] «one»\n[2] «two»", ["one", "two"]),
        ("===== Document 1 =====\nfoo\n===== Document 2 =====\nbar", ["foo", "bar"]),
        ("Source 1: a\nSource 2: b", ["a", "b"]),
        ("Cite as [n]. [2] is not first.", []),
        ("no passages at all", []),
    ],
)
def test_prompt_passages(text: str, expected: list[str]) -> None:
    assert prompt_passages(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (COMPLETION, ANSWER),
        ("[[ ## reasoning ## ]]\nr\n\n[[ ## answer ## ]]\nA [1].", "A [1]."),
        ('{"answer": "A [1].", "confidence": 0.9}', "A [1]."),
        ("Plain text [1].", None),
    ],
)
def test_envelopes(text: str, expected: str | None) -> None:
    found = reduced(text)
    assert (found[0] if found else None) == expected


def test_the_provenance_metric_caps_trace_names() -> None:
    metrics = Metrics(max_trace_names=2)
    for name in ("a", "b", "c", "d"):
        metrics.count_provenance(name, "all", "confirmed", "recorded")
    names = {
        sample.labels["trace_name"]
        for family in metrics.registry.collect()
        if family.name == "observer_trace_provenance"
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert names == {"a", "b", "other"}
