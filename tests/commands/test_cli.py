"""`observer score` and `observer config show` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from observer.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "records.jsonl"


def record(trace_id: str, answer: str, scores: tuple[float, ...] = (0.9, 0.4)) -> str:
    sources = [
        {"text": f"Source {i} says the limit is 120 requests.", "score": s}
        for i, s in enumerate(scores)
    ]
    return json.dumps(
        {"trace_id": trace_id, "question": "q?", "answer": answer, "sources": sources}
    )


GOOD_A = record("a", "The limit is 120 requests per minute [1]. Hope this helps!")
GOOD_B = record("b", "Nobody knows why the sky is green today.")


def run(args: list[str], stdin: str | bytes | None = None) -> Result:
    return CliRunner().invoke(main, args, input=stdin)


def lines_of(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_score_writes_one_object_per_record_in_input_order(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(f"{GOOD_A}\n{GOOD_B}\n")
    result = run(["score", str(path)])
    assert result.exit_code == 0, result.output
    out = lines_of(result.stdout)
    assert [o["trace_id"] for o in out] == ["a", "b"]
    first = out[0]
    assert first["valid_refs"] == [1]
    assert first["coverage"] == 1.0
    assert first["crag_grade"] == "HIGH"
    assert first["band"] == "HIGH"
    assert first["sentences"][1] == {
        "text": "Hope this helps!",
        "refs": [],
        "substantive": False,
        "cited": False,
    }
    assert out[1]["coverage"] == 0.0


def test_score_output_has_exactly_the_documented_keys(tmp_path: Path) -> None:
    result = run(["score", "-"], stdin=GOOD_A + "\n")
    assert set(lines_of(result.stdout)[0]) == {
        "trace_id",
        "valid_refs",
        "invalid_refs",
        "substantive_sentences",
        "cited_sentences",
        "coverage",
        "coverage_computed",
        "scores_recorded",
        "rerank_top1",
        "crag_grade",
        "crag_reason",
        "confidence",
        "band",
        "needs_fallback",
        "low_confidence",
        "ungrounded",
        "numeric_grounding",
        "unsupported_numbers",
        "cited_docs",
        "citation_concentration",
        "abstained",
        "over_refusal",
        "over_citation",
        "sentences",
    }


@pytest.mark.parametrize("args", [["score"], ["score", "-"]], ids=["default", "dash"])
def test_score_reads_stdin(args: list[str]) -> None:
    result = run(args, stdin=f"{GOOD_A}\n{GOOD_B}\n")
    assert result.exit_code == 0
    assert [o["trace_id"] for o in lines_of(result.stdout)] == ["a", "b"]


def test_bad_lines_reported_on_stderr_and_skipped() -> None:
    stdin = "\n".join([GOOD_A, "{not json", "", '{"trace_id": "x"}', "[1, 2]", GOOD_B]) + "\n"
    result = run(["score"], stdin=stdin)
    assert result.exit_code == 0
    assert [o["trace_id"] for o in lines_of(result.stdout)] == ["a", "b"]
    errors = lines_of(result.stderr)
    assert [e["line"] for e in errors] == [2, 4, 5]
    assert "invalid JSON" in str(errors[0]["error"])
    # The position within the bad line is its column, never a second "line".
    assert errors[0]["column"] == 2 and " line " not in str(errors[0]["error"])
    assert "column" not in errors[1]
    assert "answer: Field required" in str(errors[1]["error"])
    assert "expected a JSON object" in str(errors[2]["error"])


def test_identical_errors_are_reported_once_with_a_count() -> None:
    missing = json.dumps({"trace_id": "x", "question": "q?", "answer": "a"})
    stdin = "\n".join([missing, GOOD_A, missing, "{not json", missing, GOOD_B]) + "\n"
    result = run(["score"], stdin=stdin)
    assert result.exit_code == 0
    assert [o["trace_id"] for o in lines_of(result.stdout)] == ["a", "b"]
    assert lines_of(result.stderr) == [
        {"line": 1, "error": "sources: Field required"},
        {"line": 4, "column": 2, "error": "invalid JSON: key must be a string"},
        {"error": "sources: Field required", "more_lines": 2, "last_line": 5},
    ]


DEMO_TRACES = ROOT / "observer" / "data" / "demo_traces.jsonl"


def test_a_file_of_langfuse_observations_exits_2_naming_the_commands_that_read_it() -> None:
    result = run(["score", str(DEMO_TRACES)])
    assert result.exit_code == 2
    assert result.stdout == ""
    first_trace = json.loads(DEMO_TRACES.read_text().splitlines()[0])["traceId"]
    assert result.stderr.splitlines() == [
        f"observer: {DEMO_TRACES}: line 1 is a Langfuse observation (traceId, type, "
        "startTime), not a RagRecord (trace_id, question, answer, sources).",
        "  What observer makes of a file of observations:",
        f"    observer discover --file {DEMO_TRACES}",
        f"    observer explain {first_trace} --file {DEMO_TRACES}",
    ]
    # The commands it names read that file.
    assert run(["discover", "--file", str(DEMO_TRACES)]).exit_code == 0
    assert run(["explain", first_trace, "--file", str(DEMO_TRACES)]).exit_code == 0


@pytest.mark.parametrize(
    "first_line",
    [
        {"id": "o1", "traceId": "t1", "type": "SPAN", "startTime": "2026-01-01T00:00:00Z"},
        {"data": [{"id": "o1", "traceId": "t1", "type": "SPAN", "startTime": "2026-01-01"}]},
    ],
    ids=["observation", "api-page"],
)
def test_observations_on_stdin_exit_2(first_line: dict[str, object]) -> None:
    result = run(["score"], stdin=json.dumps(first_line) + "\n" + GOOD_A + "\n")
    assert result.exit_code == 2
    assert "observer discover --file FILE" in result.stderr
    assert result.stdout == ""


def test_an_observation_after_records_is_a_bad_line_saying_so() -> None:
    observation = {"traceId": "t1", "type": "SPAN", "startTime": "2026-01-01T00:00:00Z"}
    result = run(["score"], stdin=f"{GOOD_A}\n{json.dumps(observation)}\n")
    assert result.exit_code == 0
    assert lines_of(result.stderr) == [
        {"line": 2, "error": "a Langfuse observation, not a RagRecord"}
    ]


def test_strict_exits_1_when_any_line_is_bad_and_still_scores_the_rest() -> None:
    result = run(["score", "--strict"], stdin=f"{GOOD_A}\nnope\n")
    assert result.exit_code == 1
    assert [o["trace_id"] for o in lines_of(result.stdout)] == ["a"]


def test_strict_exits_0_on_clean_input() -> None:
    assert run(["score", "--strict"], stdin=f"{GOOD_A}\n").exit_code == 0


def test_invalid_utf8_is_a_bad_line_not_a_crash() -> None:
    result = run(["score"], stdin=b'{"trace_id": "\xff"}\n' + GOOD_B.encode() + b"\n")
    assert result.exit_code == 0
    assert [o["trace_id"] for o in lines_of(result.stdout)] == ["b"]
    assert lines_of(result.stderr)[0]["line"] == 1


def test_missing_input_file_is_a_usage_error(tmp_path: Path) -> None:
    result = run(["score", str(tmp_path / "absent.jsonl")])
    assert result.exit_code == 2
    assert "absent.jsonl" in result.stderr


def test_summary_prints_a_table_instead_of_json() -> None:
    bad = record("c", "This claims something [7] that nothing supports at all.", (0.1,))
    result = run(["score", "--summary"], stdin=f"{GOOD_A}\n{GOOD_B}\n{bad}\nbroken\n")
    assert result.exit_code == 0
    out = result.stdout
    assert not out.lstrip().startswith("{")
    assert "records scored" in out and "│ 3 " in out
    assert "bad lines (skipped)" in out
    assert "ghost references" in out and "1 in 1 (33%) record " in out
    assert "ungrounded answers" in out and "1 (33%)" in out
    assert "HIGH 2 (67%)" in out


def test_examples_all_parse_and_cover_every_grade_and_band() -> None:
    result = run(["score", "--strict", str(EXAMPLES)])
    assert result.exit_code == 0, result.stderr
    out = lines_of(result.stdout)
    assert len(out) >= 60
    assert {o["crag_grade"] for o in out} == {"HIGH", "AMBIGUOUS", "LOW", None}
    assert {o["band"] for o in out} == {"HIGH", "MEDIUM", "LOW", None}
    # Sources without any retrieval score: the score signals unknown, never 0 or LOW.
    unknown = [o for o in out if not o["scores_recorded"]]
    assert unknown and all(
        o["rerank_top1"] is None and o["confidence"] is None and o["crag_grade"] is None
        for o in unknown
    )
    assert any(o["invalid_refs"] for o in out)
    assert any(o["ungrounded"] for o in out)
    assert any(o["needs_fallback"] for o in out)
    assert any(o["unsupported_numbers"] for o in out)
    assert any(not o["coverage_computed"] for o in out)


def test_config_file_changes_the_signals(tmp_path: Path) -> None:
    config = tmp_path / "observer.toml"
    config.write_text("[crag]\nhigh = 0.95\n")
    default = lines_of(run(["score"], stdin=GOOD_A + "\n").stdout)[0]
    tuned = lines_of(run(["score", "--config", str(config)], stdin=GOOD_A + "\n").stdout)[0]
    assert default["crag_grade"] == "HIGH"
    assert tuned["crag_grade"] == "HIGH"  # gray zone, clear winner over 0.4
    assert tuned["crag_reason"] == "gray_clear_winner"


def test_bad_config_exits_2_with_the_key_named(tmp_path: Path) -> None:
    config = tmp_path / "observer.toml"
    config.write_text("[crag]\nhigh = 'very'\n")
    result = run(["score", "--config", str(config)], stdin=GOOD_A + "\n")
    assert result.exit_code == 2
    assert "crag.high" in result.stderr
    assert result.stdout == ""


def test_config_show_prints_effective_toml_with_secret_masked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-very-secret")
    monkeypatch.setenv("OBSERVER_SIGNALS__MIN_CHARS", "12")
    result = run(["config", "show"])
    assert result.exit_code == 0
    assert "sk-lf-very-secret" not in result.output
    assert 'secret_key = "********"' in result.stdout
    assert "min_chars = 12" in result.stdout
    # What it prints is a config file observer reads back.
    saved = tmp_path / "shown.toml"
    saved.write_text(result.stdout.replace('secret_key = "********"\n', ""))
    again = run(["config", "show", "--config", str(saved)])
    assert again.exit_code == 0
    assert "min_chars = 12" in again.stdout


def test_console_script_runs_end_to_end() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "observer", "score", "-"],
        input=(GOOD_A + "\n").encode(),
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["trace_id"] == "a"


def test_broken_pipe_is_not_an_error() -> None:
    many = "\n".join([GOOD_A] * 5000) + "\n"
    proc = subprocess.run(
        f"{sys.executable} -m observer score - | head -n 1",
        shell=True,
        input=many.encode(),
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0
    assert b"Traceback" not in proc.stderr
