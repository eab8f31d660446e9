"""RagRecord at the edge (docs/trace-convention.md): valid records parse, bad ones name it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from observer.model import RagRecord, Source
from observer.records import RecordError, parse_record, record_from_obj

MINIMAL: dict[str, Any] = {
    "trace_id": "t-1",
    "question": "What is the capital of France?",
    "answer": "Paris is the capital of France [1].",
    "sources": [{"text": "Paris is the capital and largest city of France."}],
}


def _with(**changes: Any) -> dict[str, Any]:
    return {**MINIMAL, **changes}


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in MINIMAL.items() if k != key}


def test_minimal_record() -> None:
    record = parse_record(json.dumps(MINIMAL))
    assert record == RagRecord(
        trace_id="t-1",
        question="What is the capital of France?",
        answer="Paris is the capital of France [1].",
        sources=(Source(text="Paris is the capital and largest city of France."),),
    )
    assert record.sources[0].origin == "kb"
    assert record.rerank_scores is None
    assert record.needs_fallback is None
    assert record.low_confidence is None


def test_full_record() -> None:
    obj = _with(
        observation_id="obs-1",
        timestamp="2024-05-01T12:00:00+00:00",
        environment="production",
        rerank_scores=[0.9, 0.2],
        needs_fallback=False,
        low_confidence=True,
        query_type="faq",
        context="[1] Paris is the capital.",
        sources=[
            {
                "chunk_id": "c1",
                "doc_id": "d1",
                "title": "France",
                "text": "Paris is the capital.",
                "score": 0.9,
                "text_hash": "ab" * 32,
                "origin": "web",
            }
        ],
    )
    record = parse_record(json.dumps(obj))
    assert record.rerank_scores == (0.9, 0.2)
    assert record.sources[0].origin == "web"
    assert record.sources[0].score == 0.9
    assert (record.needs_fallback, record.low_confidence) == (False, True)


def test_bytes_line() -> None:
    assert parse_record(json.dumps(MINIMAL).encode()).trace_id == "t-1"


def test_record_from_obj_same_as_line() -> None:
    assert record_from_obj(MINIMAL) == parse_record(json.dumps(MINIMAL))


# (id, object, the field the message must name)
BAD_FIELD_CASES = [
    ("missing_trace_id", _without("trace_id"), "trace_id"),
    ("missing_question", _without("question"), "question"),
    ("missing_answer", _without("answer"), "answer"),
    ("missing_sources", _without("sources"), "sources"),
    ("missing_source_text", _with(sources=[{"score": 0.5}]), "sources[0].text"),
    ("trace_id_not_string", _with(trace_id=123), "trace_id"),
    ("answer_not_string", _with(answer=["Paris"]), "answer"),
    ("sources_not_list", _with(sources="Paris is the capital."), "sources"),
    ("source_not_object", _with(sources=["Paris is the capital."]), "sources[0]"),
    ("score_not_number", _with(sources=[{"text": "a", "score": "high"}]), "sources[0].score"),
    ("rerank_not_list", _with(rerank_scores=0.9), "rerank_scores"),
    ("flag_not_bool", _with(needs_fallback="sometimes"), "needs_fallback"),
    ("bad_origin", _with(sources=[{"text": "a", "origin": "api"}]), "sources[0].origin"),
    ("bad_timestamp", _with(timestamp="yesterday"), "timestamp"),
    ("timestamp_not_string", _with(timestamp=["2024-05-01"]), "timestamp"),
    (
        "second_source_bad",
        _with(sources=[{"text": "a"}, {"text": "b", "score": "x"}]),
        "sources[1].score",
    ),
]


def _named(error: pytest.ExceptionInfo[RecordError], field: str) -> bool:
    """The message has a problem about exactly `field` ("sources[0].score: ...")."""
    return any(p.startswith(f"{field}:") for p in str(error.value).split("; "))


@pytest.mark.parametrize(
    ("obj", "field"),
    [pytest.param(o, f, id=case_id) for case_id, o, f in BAD_FIELD_CASES],
)
def test_bad_field_named_in_line(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(RecordError) as raised:
        parse_record(json.dumps(obj))
    assert _named(raised, field), str(raised.value)


@pytest.mark.parametrize(
    ("obj", "field"),
    [pytest.param(o, f, id=case_id) for case_id, o, f in BAD_FIELD_CASES],
)
def test_bad_field_named_in_obj(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(RecordError) as raised:
        record_from_obj(obj)
    assert _named(raised, field), str(raised.value)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        pytest.param(
            '{"trace_id": "t", "question": "q", "answer": "a",'
            ' "sources": [{"text": "s", "score": NaN}]}',
            "sources[0].score",
            id="nan_source_score",
        ),
        pytest.param(
            '{"trace_id": "t", "question": "q", "answer": "a",'
            ' "sources": [{"text": "s", "score": Infinity}]}',
            "sources[0].score",
            id="infinite_source_score",
        ),
        pytest.param(
            '{"trace_id": "t", "question": "q", "answer": "a",'
            ' "sources": [], "rerank_scores": [0.5, NaN]}',
            "rerank_scores[1]",
            id="nan_rerank_score",
        ),
    ],
)
def test_non_finite_scores_rejected(line: str, field: str) -> None:
    with pytest.raises(RecordError) as raised:
        parse_record(line)
    assert _named(raised, field), str(raised.value)


@pytest.mark.parametrize(
    "score",
    [pytest.param(float("nan"), id="nan"), pytest.param(float("inf"), id="inf")],
)
def test_non_finite_score_rejected_from_obj(score: float) -> None:
    with pytest.raises(RecordError) as raised:
        record_from_obj(_with(sources=[{"text": "s", "score": score}]))
    assert _named(raised, "sources[0].score"), str(raised.value)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("[1, 2]", id="array"),
        pytest.param('"a record"', id="string"),
        pytest.param("42", id="number"),
        pytest.param("null", id="null"),
    ],
)
def test_not_an_object(line: str) -> None:
    with pytest.raises(RecordError, match="object"):
        parse_record(line)


@pytest.mark.parametrize("obj", [pytest.param([MINIMAL], id="list"), pytest.param("x", id="str")])
def test_obj_not_an_object(obj: object) -> None:
    with pytest.raises(RecordError, match="object"):
        record_from_obj(obj)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param('{"trace_id": ', id="truncated"),
        pytest.param("not json at all", id="text"),
        pytest.param("", id="empty"),
        pytest.param("{'trace_id': 't'}", id="single_quotes"),
    ],
)
def test_invalid_json(line: str) -> None:
    with pytest.raises(RecordError, match="invalid JSON"):
        parse_record(line)


def test_record_error_is_value_error() -> None:
    assert issubclass(RecordError, ValueError)
