"""docs/trace-convention.md, the default trace convention, rule by rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from observer.app import demo_traces_path
from observer.mapping import MappingRules, Skip, map_trace
from observer.model import RagRecord
from observer.records import parse_record

ROOT = Path(__file__).resolve().parents[2]
RULES = MappingRules()


def obs(id_: str, type_: str, start: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": id_,
        "traceId": "t1",
        "type": type_,
        "startTime": f"2026-11-20T08:30:{start}Z",
        "environment": "production",
        "isRootObservation": False,
        **fields,
    }


def trace(
    answer_output: Any = "An answer [1].",
    sources_output: Any = '[{"text": "Evidence."}]',
    root_input: Any = '{"question": "Why?"}',
    root_meta: Any = None,
    gen_meta: Any = None,
    **root_fields: Any,
) -> list[dict[str, Any]]:
    observations = [
        obs(
            "root",
            root_fields.pop("type", "SPAN"),
            "00.000",
            isRootObservation=True,
            name=root_fields.pop("name", "rag-query"),
            input=root_input,
            metadata=root_meta or {},
            **root_fields,
        ),
        obs("gen", "GENERATION", "01.100", output=answer_output, metadata=gen_meta or {}),
    ]
    if sources_output is not None:
        observations.append(obs("ret", "RETRIEVER", "00.600", output=sources_output))
    return observations


def mapped(observations: list[dict[str, Any]], rules: MappingRules = RULES) -> RagRecord:
    result = map_trace("t1", observations, rules)
    assert isinstance(result, RagRecord), result
    return result


@pytest.mark.parametrize(
    ("root_input", "question"),
    [
        ('{"question": "Why?"}', "Why?"),
        ('{"query": "How?"}', "How?"),
        ('{"input": "What?", "question": null}', "What?"),
        ('{"message": "Hi"}', "Hi"),
        ("plain text question", "plain text question"),
        ('"a JSON string"', "a JSON string"),
        ('[{"role": "system", "content": "x"}, {"role": "user", "content": "Last?"}]', "Last?"),
        (None, ""),
    ],
    ids=["question", "query", "input", "message", "raw_text", "json_string", "chat", "none"],
)
def test_question_from_the_root_input(root_input: Any, question: str) -> None:
    assert mapped(trace(root_input=root_input)).question == question


@pytest.mark.parametrize(
    ("output", "answer"),
    [
        ("Plain answer [1].", "Plain answer [1]."),
        ('{"content": "From content"}', "From content"),
        ('{"text": "From text"}', "From text"),
        ('{"answer": "From answer"}', "From answer"),
        ('{"role": "assistant", "content": "Chat message"}', "Chat message"),
        (
            '[{"role": "assistant", "content": "First"}, '
            '{"role": "assistant", "content": "Second"}]',
            "First",
        ),
        ('{"choices": [{"message": {"role": "assistant", "content": "Choice"}}]}', "Choice"),
        ('{"role": "assistant", "content": [{"type": "text", "text": "Parts"}]}', "Parts"),
        ("42", "42"),
        ("true", "true"),
        ("3.5", "3.5"),
        ('"quoted"', "quoted"),
        ({"content": "already decoded"}, "already decoded"),
    ],
    ids=[
        "string",
        "content",
        "text",
        "answer",
        "chat",
        "chat_list",
        "choices",
        "parts",
        "number",
        "boolean",
        "decimal",
        "json_string",
        "object",
    ],
)
def test_answer_from_the_generation_output(output: Any, answer: str) -> None:
    assert mapped(trace(answer_output=output)).answer == answer


def test_latest_generation_is_the_answer() -> None:
    observations = trace(answer_output="Final answer.")
    observations.append(obs("rewrite", "GENERATION", "00.300", output="rewritten query"))
    record = mapped(observations)
    assert (record.answer, record.observation_id) == ("Final answer.", "gen")
    assert record.timestamp == "2026-11-20T08:30:01.100Z"


@pytest.mark.parametrize(
    "output",
    [
        '[{"text": "A", "chunk_id": "c1", "score": 0.9}]',
        '{"documents": [{"text": "A", "chunk_id": "c1", "score": 0.9}]}',
        '{"sources": [{"content": "A", "id": "c1", "rerank_score": 0.9}]}',
        '{"chunks": [{"text": "A", "chunk_id": "c1", "relevance_score": "0.9"}]}',
        '{"nodes": [{"text": "A", "id": "c1", "score": 0.9}]}',
        '[{"page_content": "A", "metadata": {"chunk_id": "c1", "relevance_score": 0.9}}]',
    ],
    ids=["list", "documents", "sources_content", "chunks_string_score", "nodes", "langchain"],
)
def test_sources_shapes(output: str) -> None:
    (source,) = mapped(trace(sources_output=output)).sources
    assert (source.text, source.chunk_id, source.score) == ("A", "c1", 0.9)


def test_source_fields_from_item_then_metadata() -> None:
    output = json.dumps(
        [
            {
                "page_content": "A",
                "metadata": {"doc_id": "d1", "title": "T", "text_hash": "ab", "origin": "web"},
            }
        ]
    )
    (source,) = mapped(trace(sources_output=output)).sources
    assert (source.doc_id, source.title, source.text_hash, source.origin) == (
        "d1",
        "T",
        "ab",
        "web",
    )


def test_last_retriever_before_the_generation_gives_the_numbered_sources() -> None:
    observations = trace(sources_output='[{"text": "raw 1"}, {"text": "raw 2"}]')
    observations.append(obs("rerank", "RETRIEVER", "00.900", output='[{"text": "reranked"}]'))
    observations.append(obs("late", "RETRIEVER", "02.000", output='[{"text": "after the answer"}]'))
    assert [s.text for s in mapped(observations).sources] == ["reranked"]


def test_no_retriever_is_a_valid_fallback_answer() -> None:
    fallback = trace(answer_output="I could not find that in the docs.", sources_output=None)
    assert mapped(fallback).sources == ()


def test_an_answer_citing_n_with_no_retrieval_at_all_is_skipped_not_scored_as_ghosts() -> None:
    """Most likely observer did not find the sources: never silently wrong."""
    result = map_trace("t1", trace(answer_output="It is 30 days [1].", sources_output=None), RULES)
    assert isinstance(result, Skip) and result.reason == "citations_without_sources"


def test_a_retrieval_that_found_nothing_makes_its_citations_real_ghosts() -> None:
    record = mapped(trace(answer_output="It is 30 days [1].", sources_output="[]"))
    assert record.sources == ()


def _with(*extra: dict[str, Any], answer: str = "It is 30 days [1].") -> list[dict[str, Any]]:
    return trace(answer_output=answer, sources_output=None) + list(extra)


DOCS = [{"text": "Refunds take 30 days.", "id": "c1", "score": 0.9}]
RAW = [{"text": "raw candidate", "id": "r1", "score": 0.2}, {"text": "other", "id": "r2"}]


@pytest.mark.parametrize(
    ("extra", "texts"),
    [
        ((obs("fn", "SPAN", "00.600", name="retrieve", output=json.dumps(DOCS)),), ["Refunds"]),
        ((obs("tool", "TOOL", "00.600", output=json.dumps({"documents": DOCS})),), ["Refunds"]),
        (
            (
                obs("ret", "RETRIEVER", "00.500", output=json.dumps({"documents": RAW})),
                obs(
                    "rank", "SPAN", "00.700", name="ranker", output=json.dumps({"documents": DOCS})
                ),
            ),
            ["Refunds"],
        ),
        (
            (
                obs("ret", "RETRIEVER", "00.500", output=json.dumps(DOCS)),
                obs("prompt", "SPAN", "00.700", output='{"prompt": "Answer from [1]"}'),
                obs("msgs", "SPAN", "00.800", output='[{"role": "user", "content": "hi"}]'),
            ),
            ["Refunds"],
        ),
        (
            (
                obs("ret", "RETRIEVER", "00.500", output=json.dumps(DOCS)),
                obs("after", "SPAN", "02.000", output=json.dumps(RAW)),
            ),
            ["Refunds"],
        ),
        (
            (
                obs(
                    "hay",
                    "SPAN",
                    "00.600",
                    output=json.dumps({"documents": [{"content": "Refunds", "meta": {"id": "h"}}]}),
                ),
            ),
            ["Refunds"],
        ),
    ],
    ids=[
        "untyped_function",
        "tool",
        "ranker_after_retriever",
        "later_spans_without_documents",
        "list_after_the_answer",
        "haystack_meta",
    ],
)
def test_sources_are_the_last_document_list_before_the_answer_whatever_its_type(
    extra: tuple[dict[str, Any], ...], texts: list[str]
) -> None:
    record = mapped(_with(*extra))
    assert [s.text.split()[0] for s in record.sources] == texts


def test_haystack_documents_read_their_fields_from_meta() -> None:
    item = {"content": "A", "score": 0.7, "meta": {"chunk_id": "c9", "doc_id": "d", "title": "T"}}
    record = mapped(_with(obs("rank", "SPAN", "00.600", output=json.dumps({"documents": [item]}))))
    (source,) = record.sources
    assert (source.chunk_id, source.doc_id, source.title, source.score) == ("c9", "d", "T", 0.7)


OPENINFERENCE = {
    "attributes.retrieval.documents.1.document.content": "Second chunk.",
    "attributes.retrieval.documents.1.document.id": "n2",
    "attributes.retrieval.documents.1.document.score": "0.4",
    "attributes.retrieval.documents.0.document.content": "First chunk.",
    "attributes.retrieval.documents.0.document.id": "n1",
    "attributes.retrieval.documents.0.document.score": 0.8,
    "attributes.retrieval.documents.0.document.metadata": '{"file_name": "refunds.md"}',
}


@pytest.mark.parametrize(
    "metadata",
    [
        OPENINFERENCE,
        {"attributes": {k.removeprefix("attributes."): v for k, v in OPENINFERENCE.items()}},
    ],
    ids=["flattened", "nested"],
)
def test_openinference_documents_in_metadata_are_the_sources(metadata: dict[str, Any]) -> None:
    """LlamaIndex through OpenInference: the output is repr text, the documents are
    the retrieval attributes, in index order."""
    retriever = obs(
        "ret",
        "RETRIEVER",
        "00.600",
        output='{"nodes": "[NodeWithScore(node=TextNode(...)), ...]"}',
        metadata=metadata,
    )
    record = mapped(_with(retriever))
    assert [(s.text, s.chunk_id, s.score) for s in record.sources] == [
        ("First chunk.", "n1", 0.8),
        ("Second chunk.", "n2", 0.4),
    ]
    assert record.sources[0].doc_id == "refunds.md"


@pytest.mark.parametrize(
    ("root_input", "question"),
    [
        ('{"args": ["What is the refund window?"], "kwargs": {}}', "What is the refund window?"),
        ('{"args": [], "kwargs": {"query": "From kwargs?"}}', "From kwargs?"),
        ('{"args": [{"self": 1}, 3, "Third?"], "kwargs": {"top_k": 3}}', "Third?"),
        ('{"retriever": {"query": "Haystack?"}, "prompt_builder": {}}', "Haystack?"),
        (
            '[{"role": "user", "parts": [{"type": "text", "content": "GenAI?"}]}]',
            "GenAI?",
        ),
        ('{"messages": [{"role": "user", "content": "In messages?"}]}', "In messages?"),
    ],
    ids=[
        "observe_args",
        "observe_kwargs",
        "observe_first_string",
        "by_component",
        "genai",
        "messages",
    ],
)
def test_question_shapes_of_the_instrumentations(root_input: str, question: str) -> None:
    assert mapped(trace(root_input=root_input)).question == question


def test_the_question_comes_from_the_earliest_root() -> None:
    observations = trace()
    later = obs("root2", "SPAN", "00.500", isRootObservation=True, input='{"question": "Later?"}')
    observations.insert(0, later)
    assert mapped(observations).question == "Why?"


@pytest.mark.parametrize(
    ("output", "answer"),
    [
        (
            '[{"role": "assistant", "parts": [{"type": "text", "content": "Joined "}, '
            '{"type": "text", "content": "parts [1]."}]}]',
            "Joined parts [1].",
        ),
        (
            '[{"role": "assistant", "parts": [{"type": "tool_call", "name": "search"}]}, '
            '{"role": "assistant", "parts": [{"type": "text", "content": "After the tool."}]}]',
            "After the tool.",
        ),
    ],
    ids=["genai_text_parts", "genai_after_a_tool_call"],
)
def test_genai_output_messages_are_answers(output: str, answer: str) -> None:
    assert mapped(trace(answer_output=output)).answer == answer


def test_explain_names_the_observation_and_rule_behind_each_part() -> None:
    from observer.mapping import explain_trace

    observations = _with(
        obs("ret", "RETRIEVER", "00.500", name="bm25", output=json.dumps({"documents": RAW})),
        obs("rank", "SPAN", "00.700", name="ranker", output=json.dumps({"documents": DOCS})),
    )
    explained = explain_trace("t1", observations, RULES)
    assert isinstance(explained.result, RagRecord)
    by_part = {step.part: step for step in explained.steps}
    assert (by_part["sources"].name, by_part["sources"].rule) == (
        "ranker",
        "output.documents: 1 document",
    )
    assert (by_part["answer"].observation_id, by_part["question"].rule) == ("gen", "input.question")
    assert explained.result == map_trace("t1", observations, RULES)


def test_explain_says_where_a_skip_stopped() -> None:
    from observer.mapping import explain_trace

    explained = explain_trace("t1", trace(answer_output='{"tool_calls": []}'), RULES)
    assert isinstance(explained.result, Skip)
    assert [s.part for s in explained.steps][-2:] == ["answer", "skip"]
    assert explained.steps[-2].observation_id == "gen"


@pytest.mark.parametrize(
    ("meta_on", "meta"),
    [
        (
            "root",
            {
                "query_type": "howto",
                "needs_fallback": "true",
                "low_confidence": False,
                "rerank_scores": "[0.9, 0.1]",
                "crag_grade": "HIGH",
                "context": "[1] ctx",
            },
        ),
        (
            "generation",
            {
                "query_type": '"howto"',
                "needs_fallback": True,
                "low_confidence": "false",
                "rerank_scores": [0.9, 0.1],
                "crag_grade": "HIGH",
                "context": "[1] ctx",
            },
        ),
    ],
)
def test_flags_from_metadata_decoded(meta_on: str, meta: dict[str, Any]) -> None:
    kwargs = {"root_meta": meta} if meta_on == "root" else {"gen_meta": meta}
    record = mapped(trace(**kwargs))
    assert record.query_type == "howto"
    assert record.needs_fallback is True
    assert record.low_confidence is False
    assert record.rerank_scores == (0.9, 0.1)
    assert record.app_crag_grade == "HIGH"
    assert record.context == "[1] ctx"


def test_sdk_metadata_keys_are_ignored_and_environment_defaults() -> None:
    observations = trace(
        root_meta={"resourceAttributes": {"service.name": "rag"}, "scope": {"name": "langfuse-sdk"}}
    )
    for observation in observations:
        observation.pop("environment")
    assert mapped(observations).environment == "default"


@pytest.mark.parametrize("bad_id", [{"span": "ret"}, ["ret"], {}, []])
def test_an_observation_id_that_is_an_object_or_a_list_is_a_named_skip(bad_id: Any) -> None:
    # Ids are matched (the tree, nested retrievers): an unhashable one once reached the
    # catch-all as `mapping_error`; it is the trace that is malformed, and the skip says where.
    observations = trace()
    observations[2]["id"] = bad_id
    observations[2]["name"] = "search"
    result = map_trace("t1", observations, RULES)
    assert result == Skip(
        "malformed_observation_id",
        f"observation 3 of 3 (RETRIEVER search): its id is a {type(bad_id).__name__}, not a text",
    )
    # Only an object or a list: a number is an id as_str reads, as before.
    observations[2]["id"] = 7
    assert isinstance(map_trace("t1", observations, RULES), RagRecord)


@pytest.mark.parametrize(
    ("observations", "reason"),
    [
        ([obs("root", "SPAN", "00.000", isRootObservation=True, name="health")], "no_generation"),
        (trace(sources_output='"not a list"'), "malformed_sources"),
        (trace(sources_output='["text only"]'), "malformed_sources"),
        (trace(sources_output='{"hits": []}'), "malformed_sources"),
        (trace(sources_output='[{"title": "no text"}]'), "malformed_sources"),
        (trace(answer_output=None), "no_answer_text"),
        (trace(answer_output="   "), "no_answer_text"),
        (trace(answer_output='{"tool_calls": []}'), "no_answer_text"),
        (trace(environment="langfuse-llm-as-a-judge"), "judge_environment"),
        (trace(name="observer.poll"), "own_trace"),
        (trace(root_meta={"scope": {"name": "observer"}}), "own_trace"),
        (trace(root_meta={"scope.name": "observer", "scope.version": "0.1"}), "own_trace"),
        (trace()[1:], "no_root"),
    ],
    ids=[
        "no_generation",
        "string_output",
        "list_of_strings",
        "object_without_list",
        "item_without_text",
        "null_answer",
        "blank_answer",
        "no_text_key",
        "judge_env",
        "own_name",
        "own_scope",
        "own_scope_flattened",
        "no_root",
    ],
)
def test_skip_reasons(observations: list[dict[str, Any]], reason: str) -> None:
    result = map_trace("t1", observations, RULES)
    assert isinstance(result, Skip)
    assert result.reason == reason


def test_strange_input_is_a_skip_never_a_crash() -> None:
    observations = trace()
    observations[1]["startTime"] = {"not": "a time"}
    observations[2]["output"] = object()
    result = map_trace("t1", observations, RULES)
    assert isinstance(result, RagRecord | Skip)


def test_filters_by_environment_name_and_tags() -> None:
    rules = MappingRules(environments=("staging",))
    assert map_trace("t1", trace(), rules) == Skip("filtered_environment", "production")
    assert isinstance(
        map_trace("t1", trace(traceName="chat"), MappingRules(trace_names=("rag-query",))), Skip
    )
    assert isinstance(map_trace("t1", trace(tags=["rag"]), MappingRules(tags=("rag",))), RagRecord)
    assert isinstance(map_trace("t1", trace(tags=["x"]), MappingRules(tags=("rag",))), Skip)


def test_declared_names_pick_the_observations() -> None:
    observations = trace(answer_output="Not this one.")
    observations.append(obs("final", "SPAN", "00.800", name="final-answer", output="This one."))
    observations.append(obs("docs", "SPAN", "00.700", name="search", output='[{"text": "S"}]'))
    rules = MappingRules(generation_names=("final-answer",), retriever_names=("search",))
    record = mapped(observations, rules)
    assert (record.answer, [s.text for s in record.sources]) == ("This one.", ["S"])


def test_hook_builds_the_record() -> None:
    def hook(observations: list[dict[str, Any]]) -> dict[str, Any]:
        return {"question": "q", "answer": f"{len(observations)} observations", "sources": []}

    record = mapped(trace(), MappingRules(hook=hook))
    assert (record.trace_id, record.answer) == ("t1", "3 observations")


@pytest.mark.parametrize(
    ("hook", "reason"),
    [
        (lambda o: None, "hook_skipped"),
        (lambda o: 1 / 0, "hook_error"),
        (lambda o: {"answer": 3}, "hook_invalid"),
        (lambda o: "text", "hook_invalid"),
    ],
    ids=["none", "raises", "bad_record", "wrong_type"],
)
def test_hook_failures_are_skips(hook: Any, reason: str) -> None:
    result = map_trace("t1", trace(), MappingRules(hook=hook))
    assert isinstance(result, Skip) and result.reason == reason


def test_bundled_demo_traces_map_back_to_the_example_records() -> None:
    """The demo data is the examples, shaped like Langfuse: every shape decodes the same."""
    import hashlib

    records = {
        hashlib.sha256(r.trace_id.encode()).hexdigest()[:32]: r
        for r in (parse_record(line) for line in (ROOT / "examples/records.jsonl").open("rb"))
    }
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for line in demo_traces_path().read_text().splitlines():
        observation = json.loads(line)
        by_trace.setdefault(observation["traceId"], []).append(observation)
    matched = 0
    for trace_id, observations in by_trace.items():
        expected = records.get(trace_id)
        if expected is None:
            continue
        got = map_trace(trace_id, observations, RULES)
        assert isinstance(got, RagRecord), (expected.trace_id, got)
        assert (got.question, got.answer) == (expected.question, expected.answer)
        assert [(s.text, s.score, s.chunk_id) for s in got.sources] == [
            (s.text, s.score, s.chunk_id) for s in expected.sources
        ]
        assert (got.needs_fallback, got.low_confidence, got.query_type, got.rerank_scores) == (
            expected.needs_fallback,
            expected.low_confidence,
            expected.query_type,
            expected.rerank_scores,
        )
        matched += 1
    assert matched == len(records) == 74


SMALL = MappingRules(max_answer_chars=50, max_sources=3, max_observations=10)


@pytest.mark.parametrize(
    ("observations", "detail"),
    [
        (trace(answer_output="x" * 51), "answer of 51 characters (limits.max_answer_chars 50)"),
        (
            trace(sources_output=json.dumps([{"text": f"s{i}"} for i in range(4)])),
            "4 sources (limits.max_sources 3)",
        ),
        (
            trace() + [obs(f"span{i}", "SPAN", "00.700") for i in range(8)],
            "11 observations (limits.max_observations_per_trace 10)",
        ),
    ],
    ids=["answer", "sources", "observations"],
)
def test_past_a_limit_a_trace_is_skipped_as_too_large(
    observations: list[dict[str, Any]], detail: str
) -> None:
    assert map_trace("t1", observations, SMALL) == Skip("too_large", detail)


def test_at_the_limits_a_trace_is_scored() -> None:
    at_limit = trace(
        answer_output="y" * 50, sources_output=json.dumps([{"text": f"s{i}"} for i in range(3)])
    )
    assert len(mapped(at_limit, SMALL).sources) == 3


def test_an_openinference_reranker_gives_its_kept_documents_not_its_candidates() -> None:
    """LlamaIndex: the retriever's documents are the candidates; the reranker span's
    `reranker.output_documents` are what the model saw."""
    candidates = {
        f"attributes.retrieval.documents.{i}.document.{k}": v
        for i in range(3)
        for k, v in (("content", f"Candidate {i}."), ("id", f"c{i}"), ("score", 0.5))
    }
    rerank = {
        "attributes.reranker.input_documents.0.document.content": "Candidate 0.",
        "attributes.reranker.output_documents.0.document.content": "Kept.",
        "attributes.reranker.output_documents.0.document.id": "c2",
        "attributes.reranker.output_documents.0.document.score": 0.91,
    }
    outer = obs("ret", "RETRIEVER", "00.300", output='["<NodeWithScore ...>"]', metadata=candidates)
    inner = obs(
        "inner", "RETRIEVER", "00.400", output='["<NodeWithScore ...>"]', parentObservationId="ret"
    )
    ranker = obs("rank", "SPAN", "00.600", output='["<NodeWithScore ...>"]', metadata=rerank)
    record = mapped(_with(outer, inner, ranker))
    assert [(s.text, s.chunk_id, s.score) for s in record.sources] == [("Kept.", "c2", 0.91)]
    # Without the reranker, the inner retriever's text output is passed over for the
    # documents of the outer one it is nested in; never for a step before it.
    assert [s.chunk_id for s in mapped(_with(outer, inner)).sources] == ["c0", "c1", "c2"]
    sibling = dict(inner, parentObservationId=None)
    assert map_trace("t1", _with(outer, sibling), RULES) == Skip(
        "malformed_sources", "source 1 is a str, not an object"
    )
    assert map_trace("t1", _with(inner), RULES) == Skip(
        "malformed_sources", "source 1 is a str, not an object"
    )


def test_the_question_is_the_last_user_message_with_text() -> None:
    """pydantic-ai: a tool's result comes back as a user message with no text part."""
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": "How long do refunds take?"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "name": "search"}]},
        {"role": "user", "parts": [{"type": "tool_call_response", "result": "..."}]},
    ]
    assert mapped(trace(root_input=json.dumps(messages))).question == "How long do refunds take?"
