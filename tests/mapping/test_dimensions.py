"""The dimensions of a record (docs/trace-convention.md#dimensions): the trace's name,
release and version, the answering generation's model and prompt, read from the v2 field
groups observer asks for
(`basic`: version; `trace_context`: release, traceName; `model`: model; `prompt`:
promptName, promptVersion).

The traces are the instrumentation fixtures (tests/instrumentations), given the values the
`model` and `prompt` groups and a release would add, as the API returns them: release is
the trace's, on every observation; model and prompt on the generations only.
"""

from __future__ import annotations

from typing import Any

import pytest

from observer.mapping import MappingRules, Skip, map_trace
from observer.model import RagRecord
from observer.records import parse_record
from tests.instrumentations.test_instrumentations import APPS, EXPECTED, observations

RELEASE = "2026.12.03-rc2"


def refunds(app: str) -> tuple[str, str, list[dict[str, Any]]]:
    """(trace id, the answering generation's id, the observations) of the app's refunds trace."""
    expected = next(e for e in EXPECTED["apps"][app]["traces"] if e["scenario"] == "refunds")
    trace_id = expected["trace_id"]
    found = [dict(o) for o in observations(app) if o["traceId"] == trace_id]
    return trace_id, expected["observation_id"], found


def with_groups(found: list[dict[str, Any]], answering: str, **root: Any) -> list[dict[str, Any]]:
    """Every generation with a model and a prompt (the answering one its own), the release
    on every observation, `root`'s keys on the root."""
    out = []
    for observation in found:
        observation = {**observation, "release": RELEASE}
        observation.setdefault("model", None)
        if observation["type"] == "GENERATION":
            mine = observation["id"] == answering
            observation["model"] = "gpt-4o-mini" if mine else "gpt-4o-mini-tools"
            observation["promptName"] = "rag-answer" if mine else "tool-router"
            observation["promptVersion"] = 3 if mine else 9
        if observation.get("isRootObservation"):
            observation.update(root)
        out.append(observation)
    return out


def record_of(trace_id: str, found: list[dict[str, Any]]) -> RagRecord:
    record = map_trace(trace_id, found, MappingRules())
    assert not isinstance(record, Skip), record
    return record


@pytest.mark.parametrize("app", ["sdk_typed", "langchain", "pydantic_ai", "llamaindex", "dspy"])
def test_a_trace_with_release_version_model_and_prompt_yields_them(app: str) -> None:
    trace_id, answering, found = refunds(app)
    record = record_of(trace_id, with_groups(found, answering, version="v7"))
    root = next(o for o in found if o.get("isRootObservation"))
    assert record.observation_id == answering
    assert (record.trace_name, record.release, record.version) == (
        root["traceName"],
        RELEASE,
        "v7",
    )
    # The answering generation's, not another generation's of the same trace.
    assert (record.model, record.prompt_name, record.prompt_version) == (
        "gpt-4o-mini",
        "rag-answer",
        3,
    )


@pytest.mark.parametrize("app", APPS)
def test_every_fixture_maps_with_its_trace_name_and_model_and_nothing_invented(app: str) -> None:
    """The fixtures carry the model and prompt groups as Langfuse stores them (the converter,
    observer.otlp.spans): every library's generation names its model; no app set a release,
    a version or a managed prompt, and none is invented."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in observations(app):
        by_trace.setdefault(observation["traceId"], []).append(observation)
    for expected in EXPECTED["apps"][app]["traces"]:
        found = by_trace[expected["trace_id"]]
        record = record_of(expected["trace_id"], found)
        root = next(o for o in found if o.get("isRootObservation"))
        generation = next(o for o in found if o["id"] == record.observation_id)
        assert record.trace_name == root["traceName"]
        # Only what the trace holds (Mastra records its own version as the observations').
        held = (
            root.get("release") or generation.get("release"),
            root.get("version") or generation.get("version"),
            generation.get("model") or root.get("model"),
            generation.get("promptName") or root.get("promptName"),
        )
        assert (record.release, record.version, record.model, record.prompt_name) == held


@pytest.mark.parametrize(
    ("generation", "root", "expected"),
    [
        # The root's when the generation has none.
        ({"model": None}, {"model": "gpt-4o"}, {"model": "gpt-4o"}),
        ({"model": ""}, {}, {"model": None}),
        # The version beside the name that was read; a version without a name is no prompt.
        (
            {"promptName": None, "promptVersion": 4},
            {"promptName": "root-prompt", "promptVersion": 2},
            {"prompt_name": "root-prompt", "prompt_version": 2},
        ),
        (
            {"promptName": None, "promptVersion": 4},
            {},
            {"prompt_name": None, "prompt_version": None},
        ),
        ({"promptVersion": "5"}, {}, {"prompt_version": 5}),
        ({"promptVersion": True}, {}, {"prompt_version": None}),
        # The trace's release and version are the root's first, else the generation's.
        ({"version": "gen-v"}, {"version": None}, {"version": "gen-v"}),
        ({"version": "gen-v"}, {"version": "root-v"}, {"version": "root-v"}),
        ({"release": "gen-r"}, {"release": None}, {"release": "gen-r"}),
    ],
)
def test_where_each_dimension_comes_from(
    generation: dict[str, Any], root: dict[str, Any], expected: dict[str, Any]
) -> None:
    trace_id, answering, found = refunds("sdk_typed")
    found = with_groups(found, answering, **root)
    for observation in found:
        if observation["id"] == answering:
            observation.update(generation)
    record = record_of(trace_id, found)
    assert {key: getattr(record, key) for key in expected} == expected


def test_records_jsonl_takes_the_dimensions() -> None:
    record = parse_record(
        '{"trace_id": "t", "question": "q", "answer": "a", "sources": [], '
        '"trace_name": "rag-query", "release": "r1", "version": "v7", "model": "gpt-4o", '
        '"prompt_name": "rag-answer", "prompt_version": 3}'
    )
    assert (record.release, record.model, record.prompt_name, record.prompt_version) == (
        "r1",
        "gpt-4o",
        "rag-answer",
        3,
    )
    assert (
        parse_record('{"trace_id": "t", "question": "q", "answer": "a", "sources": []}').model
        is None
    )
