"""The canary's file and figures (observer.judge.canary): hand-worked runs, the errors a
person gets for a file that is no canary, and properties of agreement and flip rate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.judge.canary import CanaryError, Case, figures, read_cases
from observer.model import RagRecord, Source

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "canary.jsonl"


def line(trace_id: str = "c1", label: Any = "faithful", **extra: Any) -> bytes:
    obj = {
        "trace_id": trace_id,
        "question": "How long is the refund window?",
        "answer": "14 days. [1]",
        "sources": [{"chunk_id": "r#1", "text": "Refunds within 14 days."}],
        "label": label,
        **extra,
    }
    return json.dumps(obj).encode()


def case(key: str, unfaithful: bool) -> Case:
    record = RagRecord(key, "q", "a", (Source("text", "s#1"),))
    return Case(record, unfaithful)


def test_the_shipped_example_reads_as_twelve_cases_in_two_languages() -> None:
    cases = read_cases(EXAMPLE.read_bytes().splitlines(), str(EXAMPLE))
    assert len(cases) == 12
    assert sum(c.unfaithful for c in cases) == 6
    keys = [c.key for c in cases]
    assert sum(k.startswith("canary-en-") for k in keys) == 6
    assert sum(k.startswith("canary-zh-") for k in keys) == 6
    assert all(c.why for c in cases)  # a disagreement says what the case is about


def test_a_case_keeps_its_label_and_why_out_of_the_record() -> None:
    (found,) = read_cases([line(label="unfaithful", why="30, not 14"), b"  "], "c.jsonl")
    assert found.unfaithful is True and found.why == "30, not 14"
    assert found.record.trace_id == "c1" and found.record.answer == "14 days. [1]"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([b"{"], "c.jsonl: line 1: invalid JSON"),
        ([b"[1, 2]"], "c.jsonl: line 1: expected a JSON object"),
        ([line(label=None)], 'line 1: "label" must be "faithful" or "unfaithful", got None'),
        ([line(label="yes")], "got 'yes'"),
        ([line(why=3)], 'line 1: "why" must be a string'),
        ([b"", line(answer=None)], "c.jsonl: line 2: answer"),
        ([line("a"), line("b"), line("a")], "line 3: trace_id 'a' again (first on line 1)"),
        ([b"", b"\n"], "c.jsonl: no case in the file"),
    ],
)
def test_a_file_that_is_no_canary_names_its_line_and_problem(
    lines: list[bytes], message: str
) -> None:
    with pytest.raises(CanaryError) as raised:
        read_cases(lines, "c.jsonl")
    assert message in str(raised.value)


def test_a_run_against_its_labels_worked_by_hand() -> None:
    # Labels: a, b unfaithful; c, d, e faithful.  The judge: a unfaithful, b faithful (a
    # miss), c unfaithful (a false alarm), d faithful, e no verdict.
    cases = [case("a", True), case("b", True), case("c", False), case("d", False), case("e", False)]
    found = figures(cases, {"a": True, "b": False, "c": True, "d": False, "e": None})
    assert (found.cases, found.judged, found.no_verdict) == (5, 4, 1)
    assert found.agreement == pytest.approx(2 / 4)
    # p_o = 2/4; judge unfaithful 2/4, labels unfaithful 2/4: p_e = 1/2 -> kappa 0.
    assert found.kappa == pytest.approx(0.0)
    assert found.disagreements == ("b", "c")
    assert found.flip_rate is None and found.flips == ()  # no run before


def test_the_flip_rate_counts_only_cases_judged_in_both_runs() -> None:
    cases = [case(k, False) for k in "abcd"]
    previous = {"a": False, "b": False, "c": True}  # d had no verdict then
    found = figures(cases, {"a": True, "b": False, "c": None, "d": False}, previous)
    # Both runs judged a and b; a changed.
    assert found.flip_rate == pytest.approx(1 / 2) and found.flips == ("a",)


def test_no_verdict_at_all_gives_no_figure_not_zero() -> None:
    found = figures([case("a", True)], {"a": None}, {"a": True})
    assert found.agreement is None and found.kappa is None and found.flip_rate is None


def test_the_json_says_what_each_disagreement_was_labelled_and_why() -> None:
    cases = [Case(case("a", True).record, True, "the source says 14")]
    out = figures(cases, {"a": False}).as_dict(cases)
    assert out["disagreements"] == [
        {"trace_id": "a", "label": "unfaithful", "why": "the source says 14"}
    ]
    assert set(out) == {
        "cases", "judged", "agreement", "kappa", "flip_rate", "disagreements", "flips"
    }  # fmt: skip


labels = st.lists(st.booleans(), min_size=1, max_size=40)


@given(labels)
def test_a_judge_that_sees_every_label_agrees_fully_and_never_flips(truth: list[bool]) -> None:
    cases = [case(f"c{i}", u) for i, u in enumerate(truth)]
    verdicts: dict[str, bool | None] = {c.key: c.unfaithful for c in cases}
    found = figures(cases, verdicts, {c.key: c.unfaithful for c in cases})
    assert found.agreement == 1.0 and found.flip_rate == 0.0 and found.disagreements == ()


@given(labels, st.lists(st.booleans(), min_size=40, max_size=40))
def test_flipping_every_verdict_flips_the_agreement_and_every_case(
    truth: list[bool], said: list[bool]
) -> None:
    cases = [case(f"c{i}", u) for i, u in enumerate(truth)]
    before = {c.key: said[i] for i, c in enumerate(cases)}
    after: dict[str, bool | None] = {k: not v for k, v in before.items()}
    first, second = figures(cases, before), figures(cases, after, before)
    assert first.agreement is not None and second.agreement is not None
    assert second.agreement == pytest.approx(1 - first.agreement)
    assert second.flip_rate == 1.0 and len(second.flips) == len(cases)
