"""docs/scores.md: which scores, their types, ids, timestamps and comments."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from observer.model import RagRecord, ScoreEvent, Source
from observer.scores import SCORE_ID_NAMESPACE, score_events, score_id
from observer.signals import SignalParams, compute

PARAMS = SignalParams()


def record(answer: str, scores: tuple[float, ...] = (0.9, 0.3), **kw: object) -> RagRecord:
    return RagRecord(
        trace_id="trace-a",
        question="q",
        answer=answer,
        sources=tuple(
            Source(text=f"Source {i}: 120 requests.", score=s) for i, s in enumerate(scores)
        ),
        observation_id="gen-1",
        timestamp="2026-11-20T08:30:01.100Z",
        environment="production",
        **kw,  # type: ignore[arg-type]
    )


def events(rec: RagRecord) -> dict[str, ScoreEvent]:
    return {e.name: e for e in score_events(rec, compute(rec, PARAMS), PARAMS)}


def test_all_signal_scores_with_types_and_values() -> None:
    rec = record("The limit is 120 requests [1]. It resets hourly [7].")
    got = events(rec)
    assert list(got) == [
        "confidence",
        "citation_coverage",
        "rerank_top1",
        "crag_grade",
        "ungrounded",
        "confidence_band",
        "invalid_citations",
        "numeric_grounding",
        "abstained",
        "over_refusal",
        "over_citation",
    ]
    kinds = {name: (e.data_type, e.value) for name, e in got.items()}
    assert kinds["crag_grade"] == ("CATEGORICAL", "HIGH")
    assert kinds["ungrounded"] == ("BOOLEAN", 0.0)
    assert kinds["confidence_band"][0] == "CATEGORICAL"
    assert kinds["citation_coverage"] == ("NUMERIC", 0.5)
    assert kinds["invalid_citations"] == ("NUMERIC", 1.0)
    assert kinds["numeric_grounding"] == ("NUMERIC", 1.0)
    assert kinds["abstained"] == ("BOOLEAN", 0.0)
    assert kinds["over_refusal"] == ("BOOLEAN", 0.0)
    assert kinds["over_citation"] == ("NUMERIC", 0.0)


def test_comments_explain_the_value() -> None:
    got = events(record("The limit is 120 requests [1]. It resets hourly [7]."))
    assert got["citation_coverage"].comment == "1/2 substantive sentences cited; ghost refs [7]"
    assert got["invalid_citations"].comment == "ghost refs [7] with 2 sources"
    assert got["crag_grade"].comment == "HIGH: top1 0.90 >= high 0.65"


def test_conditional_scores_are_left_out() -> None:
    got = events(record("Ok [1]."))  # nothing substantive, no numbers
    assert "citation_coverage" not in got
    assert "numeric_grounding" not in got
    assert "confidence" in got


def test_ids_are_deterministic_and_timestamps_fixed() -> None:
    rec = record("The limit is 120 requests [1].")
    first = score_events(rec, compute(rec, PARAMS), PARAMS)
    again = score_events(rec, compute(rec, PARAMS), PARAMS)
    assert [e.id for e in first] == [e.id for e in again]
    assert len({e.id for e in first}) == len(first)
    assert {e.timestamp for e in first} == {"2026-11-20T08:30:01.100Z"}
    assert {e.observation_id for e in first} == {"gen-1"}
    assert first[0].id == score_id("trace-a", "confidence")
    assert score_id("trace-a", "confidence") != score_id("trace-b", "confidence")


def test_ungrounded_is_boolean_one() -> None:
    got = events(record("This answer cites nothing at all.", scores=(0.1,)))
    assert got["ungrounded"].value == 1.0
    assert got["crag_grade"].value == "LOW"


def with_docs(answer: str, docs: tuple[str | None, ...]) -> RagRecord:
    return RagRecord(
        trace_id="trace-a",
        question="q",
        answer=answer,
        sources=tuple(Source(text="Text.", score=0.8, doc_id=d) for d in docs),
        observation_id="gen-1",
        timestamp="2026-11-20T08:30:01.100Z",
    )


def test_citation_concentration_score_and_comment() -> None:
    answer = " ".join(f"Sentence {n} states a fact [{r}]." for n, r in enumerate("11211"))
    got = events(with_docs(answer, ("handbook-v3", "faq")))
    score = got["citation_concentration"]
    assert (score.data_type, score.value) == ("NUMERIC", 0.8)
    assert score.comment == '4/5 cited sentences rest on doc "handbook-v3" alone; 2 documents cited'
    assert score.id == score_id("trace-a", "citation_concentration")
    assert list(got)[-4] == "citation_concentration"  # then abstained, over_refusal ...


def test_citation_concentration_singular_comment() -> None:
    got = events(with_docs("One fact stated here [1]. Another fact here [1].", ("kb",)))
    assert got["citation_concentration"].comment == (
        '2/2 cited sentences rest on doc "kb" alone; 1 document cited'
    )


def test_citation_concentration_only_when_computed() -> None:
    assert "citation_concentration" not in events(with_docs("One fact stated here [1].", ("kb",)))
    no_docs = with_docs("One fact stated here [1]. Another fact here [2].", (None, None))
    assert "citation_concentration" not in events(no_docs)


# -- refusals and over-citation (docs/scores.md, docs/signals.md#abstention-and-over-citation) --


def test_an_over_refusal_and_its_comments() -> None:
    got = events(record("Sorry, I couldn't find anything about it.", scores=(0.88, 0.57)))
    assert "citation_coverage" not in got and "numeric_grounding" not in got
    assert (got["abstained"].value, got["over_refusal"].value) == (1.0, 1.0)
    assert got["abstained"].comment == 'a refusal ("i couldnt find"): no coverage computed'
    assert got["over_refusal"].comment == ("a refusal with HIGH retrieval (top1 0.88 >= high 0.65)")
    assert got["confidence"].comment == "a refusal, nothing to cover; rerank top1 0.88"
    assert (got["ungrounded"].value, got["ungrounded"].comment) == (
        0.0,
        "not ungrounded (a refusal)",
    )


def test_a_refusal_with_low_retrieval_is_no_over_refusal() -> None:
    got = events(record("抱歉，知识库中没有找到相关信息。", scores=(0.2,)))
    assert (got["abstained"].value, got["over_refusal"].value) == (1.0, 0.0)
    assert got["over_refusal"].comment == "a refusal with LOW retrieval (top1 0.20)"


def test_over_refusal_is_not_written_without_retrieval_scores() -> None:
    rec = RagRecord(trace_id="t", question="q", answer="I don't know.", sources=())
    got = events(rec)
    assert got["abstained"].value == 1.0 and "over_refusal" not in got


def test_over_citation_counts_and_says_the_limit() -> None:
    answer = "One fact here [1][2][3][4]. Two facts here [1-5]. Three [1]."
    got = events(record(answer, scores=(0.9,) * 5))
    assert (got["over_citation"].value, got["over_citation"].comment) == (
        2.0,
        "2 sentences cite more than 3 sources",
    )
    one = events(record("One fact here [1][2][3][4].", scores=(0.9,) * 4))["over_citation"]
    assert one.comment == "1 sentence cites more than 3 sources"
    none = events(record("One fact here [1].", scores=(0.9,)))["over_citation"]
    assert (none.value, none.comment) == (0.0, "no sentence cites more than 3 sources")


@given(st.text(), st.text())
def test_a_score_id_is_the_uuid5_of_its_trace_and_name(trace_id: str, name: str) -> None:
    """Score ids are idempotence keys across versions: exactly uuid5's, whatever the text."""
    expected = uuid.uuid5(SCORE_ID_NAMESPACE, f"{trace_id}\x1f\x1f{name}")
    assert score_id(trace_id, name) == str(expected)
