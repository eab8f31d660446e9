"""docs/scores.md: which scores, their types, ids, timestamps and comments."""

from __future__ import annotations

from observer.model import RagRecord, ScoreEvent, Source
from observer.scores import score_events, score_id
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
    ]
    kinds = {name: (e.data_type, e.value) for name, e in got.items()}
    assert kinds["crag_grade"] == ("CATEGORICAL", "HIGH")
    assert kinds["ungrounded"] == ("BOOLEAN", 0.0)
    assert kinds["confidence_band"][0] == "CATEGORICAL"
    assert kinds["citation_coverage"] == ("NUMERIC", 0.5)
    assert kinds["invalid_citations"] == ("NUMERIC", 1.0)
    assert kinds["numeric_grounding"] == ("NUMERIC", 1.0)


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
    assert list(got)[-1] == "citation_concentration"


def test_citation_concentration_singular_comment() -> None:
    got = events(with_docs("One fact stated here [1]. Another fact here [1].", ("kb",)))
    assert got["citation_concentration"].comment == (
        '2/2 cited sentences rest on doc "kb" alone; 1 document cited'
    )


def test_citation_concentration_only_when_computed() -> None:
    assert "citation_concentration" not in events(with_docs("One fact stated here [1].", ("kb",)))
    no_docs = with_docs("One fact stated here [1]. Another fact here [2].", (None, None))
    assert "citation_concentration" not in events(no_docs)
