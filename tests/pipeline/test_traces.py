"""One trace through the daemon: prepared without I/O, recorded once, outcome counted."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from observer.mapping import MappingRules
from observer.pipeline import PassResult
from observer.pipeline.traces import Outcome, Recording, TraceRecorder, last_activity
from observer.signals import SignalParams
from observer.state import State, StateError
from observer.telemetry.metrics import Metrics
from observer.times import parse_time
from tests.daemon_helpers import demo_observations

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def demo_traces() -> dict[str, list[dict[str, Any]]]:
    traces: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for observation in demo_observations():
        traces[observation["traceId"]].append(observation)
    return traces


def root_start(observations: list[dict[str, Any]]) -> datetime:
    moment = parse_time(next(o for o in observations if o.get("isRootObservation"))["startTime"])
    assert moment is not None
    return moment


def recorder(state: State, metrics: Metrics) -> TraceRecorder:
    return TraceRecorder(state, metrics, SignalParams(), MappingRules())


def test_scored_once_then_unchanged(tmp_path: Path) -> None:
    state, metrics = State(tmp_path / "s.sqlite"), Metrics()
    traces = recorder(state, metrics)
    trace_id, observations = next(
        (t, o) for t, o in demo_traces().items() if any(x["name"] == "answer" for x in o)
    )
    try:
        outcomes = []
        for _ in range(2):
            known = state.fingerprints([trace_id]).get(trace_id)
            prepared = traces.prepare(trace_id, observations, known, NOW)
            outcomes.append(traces.record(trace_id, prepared, root_start(observations), known, NOW))
    finally:
        state.close()
    first, second = outcomes
    assert first.kind == "scored" and first.scores > 0 and not first.holds
    assert second == Outcome("unchanged")
    assert metrics.value("observer_traces_total", outcome="scored") == 1


def test_a_skip_is_recorded_and_counted_once_but_reported_every_pass(tmp_path: Path) -> None:
    state, metrics = State(tmp_path / "s.sqlite"), Metrics()
    traces = recorder(state, metrics)
    observations = [
        {"traceId": "t" * 32, "id": "r", "isRootObservation": True, "type": "SPAN",
         "startTime": "2026-11-28T10:00:00Z"}
    ]  # fmt: skip
    try:
        outcomes = []
        for _ in range(2):
            known = state.fingerprints(["t" * 32]).get("t" * 32)
            prepared = traces.prepare("t" * 32, observations, known, NOW)
            outcomes.append(traces.record("t" * 32, prepared, NOW, known, NOW))
    finally:
        state.close()
    assert outcomes == [Outcome("skipped", reason="no_generation")] * 2
    assert str(outcomes[0]) == "skipped:no_generation"
    assert metrics.value("observer_trace_skips_total", reason="no_generation") == 1


def test_a_trace_still_changing_waits(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    traces = recorder(state, Metrics())
    trace_id, observations = next(iter(demo_traces().items()))
    latest = max(parse_time(o["startTime"]) for o in observations)  # type: ignore[type-var]
    try:
        prepared = traces.prepare(trace_id, observations, None, latest + timedelta(seconds=5))
        outcome = traces.record(trace_id, prepared, root_start(observations), None, NOW)
    finally:
        state.close()
    assert outcome == Outcome("unsettled") and outcome.holds


@pytest.mark.parametrize(
    ("outcome", "counted", "held"),
    [
        (Outcome("scored", scores=8), {"scored": 1, "scores": 8}, False),
        (Outcome("rescored", scores=3), {"rescored": 1, "scores": 3}, False),
        (Outcome("unchanged"), {"unchanged": 1}, False),
        (Outcome("skipped", reason="no_generation"), {"skipped": 1}, False),
        (Outcome("unsettled"), {"unsettled": 1}, True),
        (Outcome("deferred"), {"deferred": 1}, True),
    ],
)
def test_a_pass_counts_every_outcome(outcome: Outcome, counted: dict[str, int], held: bool) -> None:
    result = PassResult(NOW, NOW)
    root = NOW - timedelta(minutes=5)
    result.count(outcome, root)
    for name in ("scored", "rescored", "unchanged", "skipped", "unsettled", "deferred", "scores"):
        assert getattr(result, name) == counted.get(name, 0), name
    assert result.hold == (root if held else None)
    assert result.skip_reasons == ({outcome.reason: 1} if outcome.reason else {})


def answer_trace() -> tuple[str, list[dict[str, Any]]]:
    return next((t, o) for t, o in demo_traces().items() if any(x["name"] == "answer" for x in o))


def unreadable(observations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same trace after an instrumentation upgrade: an answer the mapping cannot read."""
    return [
        {**o, "output": {"parts": [{"kind": "text"}]}} if o.get("type") == "GENERATION" else o
        for o in observations
    ]


def test_an_answer_looking_skip_gets_a_history_row_with_its_reason(tmp_path: Path) -> None:
    state, metrics = State(tmp_path / "s.sqlite"), Metrics()
    traces = recorder(state, metrics)
    trace_id, observations = answer_trace()
    root = root_start(observations)
    try:
        prepared = traces.prepare(trace_id, unreadable(observations), None, NOW, root)
        outcome = traces.record(trace_id, prepared, root, None, NOW)
        (row,) = state.history.rows(0, NOW.timestamp())
    finally:
        state.close()
    assert outcome == Outcome("skipped", reason="no_answer_text")
    assert row.values == {"skipped": True, "skip_reason": "no_answer_text"}
    assert (row.trace_id, row.at, row.query_type) == (trace_id, root.timestamp(), "none")
    root_observation = next(o for o in observations if o.get("isRootObservation"))
    assert row.environment == root_observation.get("environment", "default")
    assert row.project_id == root_observation.get("projectId")


def test_a_skip_that_is_no_answer_gets_no_row(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    traces = recorder(state, Metrics())
    observations = [
        {"traceId": "t" * 32, "id": "r", "isRootObservation": True, "type": "SPAN",
         "startTime": "2026-11-28T10:00:00Z"}
    ]  # fmt: skip
    try:
        prepared = traces.prepare("t" * 32, observations, None, NOW)
        assert traces.record("t" * 32, prepared, NOW, None, NOW).reason == "no_generation"
        assert state.history.rows(0, NOW.timestamp() + 1) == []
    finally:
        state.close()


def test_a_scored_row_says_not_skipped_and_a_later_skip_replaces_it(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    traces = recorder(state, Metrics())
    trace_id, observations = answer_trace()
    root = root_start(observations)
    try:
        prepared = traces.prepare(trace_id, observations, None, NOW, root)
        traces.record(trace_id, prepared, root, None, NOW)
        (scored,) = state.history.rows(0, NOW.timestamp())
        known = state.fingerprint(trace_id)
        changed = traces.prepare(trace_id, unreadable(observations), known, NOW, root)
        traces.record(trace_id, changed, root, known, NOW)
        (skipped,) = state.history.rows(0, NOW.timestamp())
    finally:
        state.close()
    assert scored.values["skipped"] is False and "ungrounded" in scored.values
    assert skipped.values == {"skipped": True, "skip_reason": "no_answer_text"}


def test_the_scores_carry_the_traces_last_activity_to_the_outbox(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite")
    traces = recorder(state, Metrics())
    trace_id, observations = answer_trace()
    root = root_start(observations)
    try:
        prepared = traces.prepare(trace_id, observations, None, NOW, root)
        assert prepared.last_activity == last_activity(observations, NOW)
        assert prepared.last_activity is not None
        traces.record(trace_id, prepared, root, None, NOW)
        queued = [p.score for p in state.due(NOW.timestamp(), 1000)]
        assert state.acknowledge(queued) == [(trace_id, prepared.last_activity.timestamp())]
    finally:
        state.close()


# -- many traces with one commit (`record_many`: the event path's settling step) -----------


def prepared_all(
    traces: TraceRecorder, state: State, chosen: dict[str, list[dict[str, Any]]]
) -> list[Recording]:
    known = state.fingerprints(list(chosen))
    items: list[Recording] = []
    for trace_id, observations in chosen.items():
        root = root_start(observations)
        prepared = traces.prepare(trace_id, observations, known.get(trace_id), NOW, root)
        items.append((trace_id, prepared, root, known.get(trace_id), None))
    return items


def contents(state: State) -> tuple[list[tuple[str, bytes]], dict[str, str], list[Any]]:
    queued = [(p.score.id, orjson.dumps(p.score)) for p in state.due(NOW.timestamp(), 10_000)]
    traces = sorted(demo_traces())
    return queued, state.fingerprints(traces), state.history.rows(0, NOW.timestamp() + 1)


def test_many_traces_recorded_at_once_come_out_as_recorded_one_by_one(tmp_path: Path) -> None:
    """Every demo trace (answers and skips): the same outcomes, scores in the same order,
    fingerprints and history rows, the same counts; with one commit instead of one each."""
    one, many = State(tmp_path / "one.sqlite"), State(tmp_path / "many.sqlite")
    one_metrics, many_metrics = Metrics(), Metrics()
    alone, together = recorder(one, one_metrics), recorder(many, many_metrics)
    try:
        singly = [
            alone.record(trace_id, prepared, root, known, NOW, latest)
            for trace_id, prepared, root, known, latest in prepared_all(alone, one, demo_traces())
        ]
        statements: list[str] = []
        many._db.set_trace_callback(statements.append)
        at_once = together.record_many(prepared_all(together, many, demo_traces()), NOW)
        many._db.set_trace_callback(None)
        assert at_once == singly
        assert {o.kind for o in singly} == {"scored", "skipped"}
        assert [s for s in statements if s.strip().upper() == "COMMIT"] == ["COMMIT"]
        assert contents(many) == contents(one)
        for outcome in ("scored", "skipped"):
            assert many_metrics.value("observer_traces_total", outcome=outcome) == (
                one_metrics.value("observer_traces_total", outcome=outcome)
            )
    finally:
        one.close()
        many.close()


class SamplingJudge:
    """The judge as the recorder sees it (`JudgeGate`), sampling the traces it is given:
    each sample's write marks the state file; what the recorder does with it is noted."""

    def __init__(self, sampled: set[str]) -> None:
        self.sampled = sampled
        self.taken: list[str] = []  # queued after the trace's commit
        self.given_back: list[str] = []  # released: the trace's write failed

    def reservation(self, record: Any, signals: Any, findings: Any, basis: str) -> Any:
        from observer.judge.service import Reservation

        if record.trace_id not in self.sampled:
            return None

        def write(db: Any) -> None:
            db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (record.trace_id, basis))

        return Reservation(record.trace_id, write)  # its sample: the trace id, for the notes

    def queued(self, reservation: Any) -> None:
        self.taken.append(reservation.sample)

    def release(self, reservation: Any) -> None:
        self.given_back.append(reservation.sample)


@pytest.mark.parametrize("refused", ["sampled", "batched"])
def test_the_file_failing_mid_batch_loses_nothing_doubles_nothing_gives_back_the_sample(
    tmp_path: Path, refused: str
) -> None:
    """Six answers, the third sampled by the judge (written first, alone); the file
    refuses the third's write or the fifth's (a trigger's abort, as a full disk refuses):
    StateError, nothing of the batch written, the sample given back if its write failed
    and queued only once committed. Recorded again: each trace scored once in all."""
    import sqlite3

    answers = {t: o for t, o in demo_traces().items() if any(x["name"] == "answer" for x in o)}
    chosen = dict(list(answers.items())[:6])
    ids = list(chosen)
    sampled, broken = ids[2], ids[2] if refused == "sampled" else ids[4]
    state, metrics = State(tmp_path / "s.sqlite"), Metrics()
    judge = SamplingJudge({sampled})
    traces = TraceRecorder(state, metrics, SignalParams(), MappingRules(), judge=judge)
    with sqlite3.connect(tmp_path / "s.sqlite") as other:
        other.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON traces WHEN NEW.trace_id = '{broken}' "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    other.close()
    try:
        with pytest.raises(StateError, match="refused"):
            traces.record_many(prepared_all(traces, state, chosen), NOW)
        first = set(state.fingerprints(ids))
        if refused == "sampled":
            assert (first, judge.given_back, judge.taken) == (set(), [sampled], [])
        else:  # the sample's own transaction committed before the batch failed
            assert (first, judge.given_back, judge.taken) == ({sampled}, [], [sampled])
        assert {p.score.trace_id for p in state.due(NOW.timestamp(), 1000)} == first
        assert len(state.history.rows(0, NOW.timestamp() + 1)) == len(first)
        with sqlite3.connect(tmp_path / "s.sqlite") as other:
            other.execute("DROP TRIGGER refuse")
        other.close()
        again = traces.record_many(prepared_all(traces, state, chosen), NOW)
        assert all(isinstance(o, Outcome) for o in again)
        assert set(state.fingerprints(ids)) == set(ids)
        assert judge.taken == [sampled]
        assert state._file.get_meta(sampled) is not None  # the sample's write, once
        assert metrics.value("observer_traces_total", outcome="scored") == 6
        clean = State(tmp_path / "clean.sqlite")  # what a run without the failure leaves
        try:
            recorder(clean, Metrics()).record_many(prepared_all(traces, clean, chosen), NOW)
            (queued, fingerprints, rows), (want_queued, want_fingerprints, want_rows) = (
                contents(state),
                contents(clean),
            )  # the sampled trace went first: the same, in another order
            assert sorted(queued) == sorted(want_queued) and fingerprints == want_fingerprints
            assert sorted(map(repr, rows)) == sorted(map(repr, want_rows))
        finally:
            clean.close()
    finally:
        state.close()
