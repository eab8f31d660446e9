"""One strange trace never stops a pass, nor every pass after it (issue 43, findings 1 and 5).

A skipped trace whose environment held a lone surrogate, a trace id with one, a
`promptVersion` of 2^70: each failed later than the mapping, in every pass, for
ever (the watermark never passed them; `run --once` exited 1 with a traceback).
Now what enters a pass is cleaned at the edge, any unexpected error skips only
its trace as `internal_error` (counted, fingerprinted, the pass goes on), and a
trace past its work budget is skipped as `too_costly` and not worked on again.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from observer import app
from observer.config import Settings
from observer.mapping.convention import MappingRules
from observer.model import RagRecord, Signals
from observer.pipeline import Pipeline
from observer.signals import SignalParams
from observer.state import State
from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import configure
from tests.fakes.langfuse_server import FakeLangfuse
from tests.redteam.inputs import attack
from tests.test_hostile import START, ListSource, trace

NOW = START + timedelta(days=1)


def with_fields(observations: list[dict[str, Any]], **fields: Any) -> list[dict[str, Any]]:
    return [{**o, **fields} for o in observations]


CASES = {
    "a skipped trace whose environment holds a lone surrogate": (
        with_fields(trace("t", answer=None), environment="prod\ud800"),
        "t",
    ),
    "a trace id holding a lone surrogate": (trace("t\ud800"), "t\ufffd"),
    "a promptVersion of 2^70": (
        with_fields(trace("t"), promptName="answer", promptVersion=2**70),
        "t",
    ),
    "a metadata key and value with lone surrogates": (
        trace("t", metadata={"query_type\udc00": "\ud800", "n": 2**80}),
        "t",
    ),
}


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse.kind() as server:
        yield server


@pytest.mark.parametrize(("observations", "trace_id"), CASES.values(), ids=CASES.keys())
def test_a_strange_trace_is_accounted_for_and_the_next_run_goes_on(
    observations: list[dict[str, Any]],
    trace_id: str,
    fake: FakeLangfuse,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Through Langfuse's JSON (a lone surrogate escaped, as JSON.stringify writes it) and
    the real SDK client: `run --once` exits 0 twice, the watermark passes the trace."""
    fake.add_observations(observations)
    settings = configure(monkeypatch, fake)
    for _ in range(2):  # the second run reads it again in its sweep
        parts = app.build(settings, state_path=tmp_path / "s.sqlite")
        try:
            result = app.run_once(parts, START + timedelta(minutes=2))
            assert result.exit_code == 0, result.error
            assert result.passed is not None and result.passed.traces == 1, result.passed
            assert parts.state.watermark() is not None
            assert parts.state.watermark() > START  # type: ignore[operator]
            assert trace_id in parts.state.fingerprints([trace_id])
        finally:
            parts.state.close()


def pipeline(directory: Path, source: ListSource, **options: Any) -> Pipeline:
    return Pipeline(
        source,
        State(directory / "s.sqlite"),
        options.pop("metrics", Metrics()),
        SignalParams(),
        MappingRules(),
        lookback_s=2 * 86400,
        **options,
    )


def test_an_unexpected_error_in_one_trace_skips_it_alone_and_once(tmp_path: Path) -> None:
    def strange(record: RagRecord, _signals: Signals) -> None:
        if record.trace_id == "bad":
            raise KeyError("a bug met by this trace only")

    observations = trace("good-1") + trace("bad", offset_s=1) + trace("good-2", offset_s=2)
    metrics = Metrics()
    run = pipeline(tmp_path, ListSource(observations), metrics=metrics, on_signals=strange)
    try:
        first = run.process_window(START - timedelta(hours=1), NOW, NOW)
        assert (first.scored, first.skip_reasons) == (2, {"internal_error": 1})
        assert run.state.fingerprints(["bad"])["bad"].startswith("skip:internal_error:")
        second = run.process_window(START - timedelta(hours=1), NOW, NOW)
        assert (second.unchanged, second.skip_reasons) == (2, {"internal_error": 1})
        # Counted once: the second pass knew it by its fingerprint.
        assert metrics.value("observer_trace_skips_total", reason="internal_error") == 1
    finally:
        run.state.close()


def test_a_trace_past_its_work_budget_is_skipped_as_too_costly_and_not_worked_on_again(
    tmp_path: Path,
) -> None:
    costly = trace("costly", answer=attack("[1] A fact. "))
    metrics = Metrics()
    source = ListSource(costly + trace("cheap", offset_s=5))
    run = pipeline(tmp_path, source, metrics=metrics, max_trace_cpu_s=1e-6)
    try:
        first = run.process_window(START - timedelta(hours=1), NOW, NOW)
        assert first.skip_reasons == {"too_costly": 2}
        worked = metrics.value("observer_trace_work_seconds_count")
        assert worked == 2
        second = run.process_window(START - timedelta(hours=1), NOW, NOW)
        assert second.skip_reasons == {"too_costly": 2}
        assert metrics.value("observer_trace_work_seconds_count") == worked  # not again
        # A trace that changed is a new input: worked on again.
        source.observations = [*costly, *with_fields(trace("cheap", offset_s=5), updatedAt="x")]
        run.process_window(START - timedelta(hours=1), NOW, NOW)
        assert metrics.value("observer_trace_work_seconds_count") == worked + 1
    finally:
        run.state.close()


def test_within_its_budget_the_longest_answer_is_scored(tmp_path: Path) -> None:
    """The default budget is far above what the longest answer observer takes costs."""
    budget = Settings().limits.max_trace_cpu_s
    source = ListSource(trace("long", answer=attack("[1] A fact. ")))
    run = pipeline(tmp_path, source, max_trace_cpu_s=budget)
    try:
        result = run.process_window(START - timedelta(hours=1), NOW, NOW)
    finally:
        run.state.close()
    assert result.scored == 1, result
