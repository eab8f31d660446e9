"""`observer explain`: one trace, from the fake Langfuse or a file, rule by rule."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from observer.app.explain import by_trace, explain
from observer.cli import main
from observer.config import Settings
from observer.mapping.convention import map_trace
from observer.mapping.rules import Skip
from observer.scores import score_events
from observer.signals import compute
from observer.views.explain import explanation_json
from tests.daemon_helpers import configure, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse

DEMO = by_trace(demo_observations())
SCORED = "90e770a3222d9952115f31794b0f9b07"  # rag-query: question, answer, two sources
EMPTY = next(t for t, o in DEMO.items() if any(x["name"] == "rag-query-empty-answer" for x in o))


def run(args: list[str]) -> Result:
    return CliRunner().invoke(main, args)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        server.add_observations(demo_observations())
        configure(monkeypatch, server)
        yield server


@pytest.fixture
def demo_file(tmp_path: Path) -> Path:
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(demo_observations()))
    return path


def test_a_scored_trace_names_its_rules_its_record_and_every_score_with_its_comment(
    fake: FakeLangfuse,
) -> None:
    result = run(["explain", SCORED])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith(f"trace {SCORED}: 4 observations, scored")
    # Which observation gave each part, and by which rule.
    assert (
        "answer    answer (GENERATION, 5c82878563aaa54c): the generation; output[0]: a chat" in out
    )
    assert "sources   rerank (RETRIEVER, 7d7e9ca3d1817221): output: 2 documents" in out
    assert "question  rag-query (CHAIN, ad450163539c4d42): input.message" in out
    assert "flags     rag-query (CHAIN, ad450163539c4d42): metadata.query_type of the root" in out
    assert "question  Which sample dataset ships with the sandbox workspace?" in out
    assert "[1] chunk kb-sandbox#c2, doc sandbox, score 0.88, title Sandbox sample data:" in out
    assert "[2] chunk kb-sandbox#c3" in out
    # Every score the daemon pushes for it, with the daemon's own comments.
    settings = Settings()
    record = map_trace(SCORED, DEMO[SCORED], settings.mapping_rules())
    assert not isinstance(record, Skip)
    params = settings.signal_params()
    scores = score_events(record, compute(record, params), params)
    assert len(scores) >= 8
    listed = out.split("\nscores (on observation 5c82878563aaa54c", 1)[1].splitlines()[1:]
    assert len(listed) == len(scores)
    for score, line in zip(scores, listed, strict=True):
        assert line.split()[0] == score.name
        assert line.rstrip().endswith(score.comment), line
    assert "confidence              0.88       coverage 1.00 x rerank top1 0.88 = 0.88" in out


def test_a_skipped_trace_says_why_and_where_it_stopped(fake: FakeLangfuse) -> None:
    result = run(["explain", EMPTY])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "SKIPPED no_answer_text" in out
    assert "  answer    answer (GENERATION, " in out and "): no output" in out
    assert "skipped: no_answer_text (generation output holds no text)" in out
    assert "stopped at answer (GENERATION, " in out and "reading the answer" in out
    assert "scores (" not in out


def test_json_is_the_same_explanation_from_langfuse_and_from_a_file(
    fake: FakeLangfuse, demo_file: Path
) -> None:
    settings = Settings()
    expected = explanation_json(
        explain(SCORED, DEMO[SCORED], settings.mapping_rules(), settings.signal_params())
    )
    from_langfuse = run(["explain", SCORED, "--json"])
    from_file = run(["explain", SCORED, "--json", "--file", str(demo_file)])
    assert from_langfuse.exit_code == 0 and from_file.exit_code == 0, from_langfuse.output
    assert json.loads(from_langfuse.stdout) == expected == json.loads(from_file.stdout)
    assert expected["outcome"] == "scored"
    assert [s["part"] for s in expected["steps"]] == [
        "root",
        "answer",
        "sources",
        "check",
        "question",
        "flags",
    ]
    assert {s["name"] for s in expected["scores"]} >= {"confidence", "crag_grade", "ungrounded"}
    assert all(s["comment"] for s in expected["scores"])
    assert expected["record"]["sources"][0]["chunk_id"] == "kb-sandbox#c2"


def test_json_of_a_skip_names_the_observation_it_stopped_at(demo_file: Path) -> None:
    result = run(["explain", EMPTY, "--json", "--file", str(demo_file)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["outcome"] == "skipped" and out["record"] is None and out["scores"] == []
    assert out["skip"]["reason"] == "no_answer_text"
    assert out["skip"]["stopped_at"]["type"] == "GENERATION"
    assert out["steps"][-1]["part"] == "skip"


def _as_json_lines(observations: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(o) + "\n" for o in observations)


@pytest.mark.parametrize(
    "shape",
    [
        lambda obs: json.dumps(obs),
        _as_json_lines,
        lambda obs: json.dumps({"data": obs, "meta": {"cursor": None}}),
        lambda obs: json.dumps({"observations": obs}),
        lambda obs: json.dumps({"data": obs[:3]}) + "\n" + json.dumps({"data": obs[3:]}) + "\n",
    ],
    ids=["json-list", "json-lines", "api-page", "observations", "pages-as-lines"],
)
def test_every_file_shape_gives_the_same_explanation(tmp_path: Path, shape: Any) -> None:
    path = tmp_path / "trace.json"
    path.write_text(shape(DEMO[SCORED] + DEMO[EMPTY]))
    result = run(["explain", SCORED, "--json", "--file", str(path)])
    assert result.exit_code == 0, result.output
    settings = Settings()
    assert json.loads(result.stdout) == explanation_json(
        explain(SCORED, DEMO[SCORED], settings.mapping_rules(), settings.signal_params())
    )


def test_an_unknown_trace_exits_1_saying_where_it_looked(fake: FakeLangfuse) -> None:
    result = run(["explain", "0" * 32, "--since", "2d"])
    assert result.exit_code == 1
    assert f"trace {'0' * 32} not found in Langfuse at {fake.url}" in result.stderr
    assert "widen --since" in result.stderr


def test_a_trace_not_in_the_file_exits_1_naming_the_file(demo_file: Path) -> None:
    result = run(["explain", "nope", "--file", str(demo_file)])
    assert result.exit_code == 1
    assert f"trace nope is not in {demo_file} (it holds " in result.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json\n", "line 1 is not JSON"),
        ('{"rows": []}', "without `observations` or `data`"),
        ("[1, 2]", "item 1 is a int, not an object"),
        ('[{"id": "a", "type": "SPAN"}]', "item 1 has no traceId"),
        ("[]", "holds no observations"),
        ("42", "holds a JSON int"),
    ],
)
def test_a_bad_file_exits_2_naming_it(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    result = run(["explain", "x", "--file", str(path)])
    assert result.exit_code == 2
    assert str(path) in result.stderr and message in result.stderr


def test_a_missing_file_exits_2(tmp_path: Path) -> None:
    result = run(["explain", "x", "--file", str(tmp_path / "none.json")])
    assert result.exit_code == 2
    assert "none.json: no such file" in result.stderr


def test_an_unreachable_langfuse_exits_3(fake: FakeLangfuse) -> None:
    fake.stop()
    result = run(["explain", SCORED])
    assert result.exit_code == 3
    assert f"{fake.url}/api/public/health: ConnectError" in result.stderr  # what it tried


def test_wrong_keys_exit_4(fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-wrong")
    result = run(["explain", SCORED])
    assert result.exit_code == 4
    assert "sk-lf-wrong" not in result.output


def test_no_keys_exit_2() -> None:
    result = run(["explain", SCORED])
    assert result.exit_code == 2
    assert "LANGFUSE_PUBLIC_KEY" in result.stderr


def test_a_bad_since_is_a_usage_error(fake: FakeLangfuse) -> None:
    result = run(["explain", SCORED, "--since", "yesterday"])
    assert result.exit_code == 2
    assert "not a duration or an ISO-8601 time" in result.output
