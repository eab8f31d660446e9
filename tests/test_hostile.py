"""Hostile input never crashes a pass: every trace is scored or skipped with a reason.

Observations come as Langfuse's API would hand them to the poller (already
decoded JSON: any text, lone surrogates included), through the real pipeline,
state and dispatcher.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from observer import app
from observer.config import Settings
from observer.sinks.jsonl import JsonlScoreSink
from tests.budget import scaled

START = datetime(2026, 11, 20, 8, 30, tzinfo=UTC)


class ListSource:
    """The observation source protocol over a list in memory (newest first, one page)."""

    def __init__(self, observations: list[dict[str, Any]]) -> None:
        self.observations = observations

    def pages(self, start: datetime, end: datetime) -> Iterator[list[dict[str, Any]]]:
        yield list(reversed(self.observations))


def trace(
    trace_id: str,
    *,
    question: Any = '{"question": "Why?"}',
    answer: Any = "A grounded fact [1].",
    sources: Any = None,
    metadata: Any = None,
    offset_s: float = 0.0,
) -> list[dict[str, Any]]:
    def at(seconds: float) -> str:
        return (START + timedelta(seconds=offset_s + seconds)).isoformat()

    return [
        {"id": f"{trace_id}-r", "traceId": trace_id, "type": "SPAN", "isRootObservation": True,
         "startTime": at(0), "input": question, "metadata": metadata or {}},
        {"id": f"{trace_id}-s", "traceId": trace_id, "type": "RETRIEVER", "startTime": at(0.2),
         "output": sources if sources is not None else [{"text": "A grounded fact."}]},
        {"id": f"{trace_id}-g", "traceId": trace_id, "type": "GENERATION", "startTime": at(0.5),
         "output": answer, "metadata": metadata or {}},
    ]  # fmt: skip


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"x": value}
    return value


def one_pass(observations: list[dict[str, Any]], directory: Path) -> app.PassResult:
    settings = Settings()
    parts = app.build(
        settings,
        state_path=directory / "s.sqlite",
        source=ListSource(observations),
        sink=JsonlScoreSink(directory / "scores.jsonl"),
    )
    try:
        now = START + timedelta(days=1)
        return parts.pipeline.process_window(START - timedelta(hours=1), now, now)
    finally:
        parts.dispatcher.flush(5)
        parts.state.close()


CASES = {
    "lone_surrogate_answer": (trace("t", answer="Fact \ud800 here [1]."), "scored"),
    "lone_surrogate_question": (trace("t", question="why \udfff?"), "scored"),
    "lone_surrogate_source": (trace("t", sources=[{"text": "x \ud83d y", "chunk_id": "\udc00"}]),
                              "scored"),
    "lone_surrogate_metadata": (trace("t", metadata={"query_type": "\ud800", "context": "\udc01"}),
                                "scored"),
    "nan_and_infinite_scores": (trace("t", sources=[{"text": "A fact.", "score": float("nan")},
                                                    {"text": "B.", "score": float("inf")}]),
                                "scored"),
    "huge_and_negative_scores": (trace("t", sources=[{"text": "A fact.", "score": 1e308},
                                                     {"text": "B.", "score": -1e308}]), "scored"),
    "rerank_scores_nonsense": (trace("t", metadata={"rerank_scores": "[1e999, -1, NaN]"}),
                               "scored"),
    "deeply_nested_metadata": (trace("t", metadata={"context": deep(3000)}), "scored"),
    "deeply_nested_json_question": (trace("t", question="[" * 5000 + "]" * 5000), "scored"),
    "ten_thousand_sources": (trace("t", sources=[{"text": f"s{i}"} for i in range(10_000)]),
                             "too_large"),
    "five_megabyte_answer": (trace("t", answer="A fact [1]. " * 450_000), "too_large"),
    "answer_is_a_number": (trace("t", answer=42), "scored"),
    "sources_not_a_list": (trace("t", sources={"documents": "nope"}), "malformed_sources"),
}  # fmt: skip


@pytest.mark.parametrize(("observations", "outcome"), CASES.values(), ids=CASES.keys())
def test_a_hostile_trace_is_scored_or_skipped_never_a_crash(
    observations: list[dict[str, Any]], outcome: str, tmp_path: Path
) -> None:
    result = one_pass(observations, tmp_path)
    if outcome == "scored":
        assert result.scored == 1, result
        lines = (tmp_path / "scores.jsonl").read_text(errors="replace").splitlines()
        assert lines and all(json.loads(line)["traceId"] == "t" for line in lines)
    else:
        assert result.skip_reasons == {outcome: 1}, result


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(alphabet=st.characters(codec=None), max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=15,
)  # fmt: skip


# A fifth of the profile's examples: each is a whole pass over up to five traces.
@settings(scaled(0.2))
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "question": json_values,
                "answer": json_values,
                "sources": json_values,
                "metadata": st.dictionaries(st.text(max_size=12), json_values, max_size=4),
            }
        ),
        min_size=1,
        max_size=5,
    )
)
def test_any_mix_of_strange_traces_is_accounted_for(traces: list[dict[str, Any]]) -> None:
    observations = [
        o
        for n, fields in enumerate(traces)
        for o in trace(f"t{n}", offset_s=n, **{k: v for k, v in fields.items() if v is not None})
    ]
    with tempfile.TemporaryDirectory() as scratch:
        result = one_pass(observations, Path(scratch))
    assert result.scored + result.skipped == len(traces), result
    assert "mapping_error" not in result.skip_reasons, result
