"""Langfuse as it really is (docs/daemon.md, docs/scores.md): each finding of issue 15
against the service-like fake, with the real SDK client. Each of these failed before its
fix."""

from __future__ import annotations

import copy
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from observer import app
from observer.mapping import MappingRules
from observer.model import ScoreEvent
from observer.pipeline import Pipeline
from observer.signals import SignalParams
from observer.sources.clock import ServerClock
from observer.state import State
from observer.telemetry.metrics import Metrics
from observer.times import iso, parse_time
from tests.daemon_helpers import (
    after,
    configure,
    demo_counts,
    demo_observations,
    once,
    packed_traces,
)
from tests.fakes.langfuse_server import SERVICE_LIKE, FakeLangfuse

DEMO = demo_counts()


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse(behaviour=SERVICE_LIKE) as server:
        yield server


def live_by_trace(fake: FakeLangfuse) -> dict[str, dict[str, list[dict[str, Any]]]]:
    return fake.scores_by_trace()


def doubles(fake: FakeLangfuse) -> list[tuple[str, str]]:
    return [
        (trace_id, name)
        for trace_id, names in live_by_trace(fake).items()
        for name, scores in names.items()
        if len(scores) > 1
    ]


def answer_trace() -> list[dict[str, Any]]:
    """One demo trace that scores, with numbers in its answer."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in demo_observations():
        by_trace.setdefault(observation["traceId"], []).append(observation)
    for observations in by_trace.values():
        names = {o["name"] for o in observations}
        answer = next((o for o in observations if o["name"] == "answer"), None)
        if {"retrieval", "answer"} <= names and answer and any(c.isdigit() for c in str(answer)):
            return copy.deepcopy(observations)
    raise AssertionError("no demo trace with an answer")


def test_short_and_empty_continuation_pages_lose_no_trace(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.empty_page_share, fake.cut_page_share = 0.4, 0.5
    fake.add_observations(demo_observations())
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__PAGE_LIMIT="20")
    now = after(demo_observations())
    result = once(settings, tmp_path / "s.sqlite", now)
    assert result.exit_code == 0, result.error
    assert result.passed is not None and result.passed.scored == DEMO.scored
    assert len(fake.live_scores()) == DEMO.scores
    state = State(tmp_path / "s.sqlite")
    assert state.watermark() == now - timedelta(seconds=settings.source.settle_s)
    state.close()


def test_observer_clock_an_hour_ahead_still_scores_recent_traces(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Langfuse's clock is the reference: a host an hour ahead loses nothing."""
    fake.clock = lambda: datetime.now(UTC) - timedelta(hours=1)  # this host: an hour ahead
    langfuse_now = fake.clock()
    fake.add_observations(packed_traces(langfuse_now - timedelta(minutes=10), 1.0))
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__LOOKBACK_S="3600")
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    try:
        first = app.run_once(parts)
        assert first.exit_code == 0, first.error
        assert first.passed is not None and first.passed.scored == DEMO.scored
        watermark = parts.state.watermark()
        assert watermark is not None and watermark <= fake.clock()
        assert abs(parts.metrics.value("observer_clock_skew_seconds") + 3600) < 5
    finally:
        parts.state.close()
    later = packed_traces(fake.clock() - timedelta(seconds=200), 0.5, tag="later")
    fake.add_observations(later, delay_s=0)
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    try:
        second = app.run_once(parts)
        assert second.passed is not None and second.passed.scored == DEMO.scored
    finally:
        parts.state.close()
    assert doubles(fake) == []


def test_a_client_clock_in_2099_does_not_hold_the_watermark(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trace = answer_trace()
    trace[-1]["endTime"] = "2099-01-01T00:00:00.000Z"
    fake.add_observations(trace, delay_s=0)
    settings = configure(monkeypatch, fake)
    now = after(trace)
    result = once(settings, tmp_path / "s.sqlite", now)
    assert result.passed is not None and result.passed.scored == 1
    state = State(tmp_path / "s.sqlite")
    assert state.watermark() == now - timedelta(seconds=settings.source.settle_s)
    state.close()


def second_turn(trace: list[dict[str, Any]], shift: timedelta, answer: str) -> list[dict[str, Any]]:
    """The trace's own observations again, as a second top-level subtree `shift` later."""
    turn = []
    for observation in copy.deepcopy(trace):
        observation["id"] = "2" + str(observation["id"])[1:]
        parent = observation.get("parentObservationId")
        observation["parentObservationId"] = "2" + parent[1:] if parent else None
        for key in ("startTime", "endTime", "updatedAt"):
            moment = parse_time(observation.get(key))
            if moment is not None:
                observation[key] = iso(moment + shift)
        if observation["name"] == "answer":
            observation["output"] = answer
        turn.append(observation)
    return turn


def test_a_trace_with_two_roots_straddling_a_page_is_one_record(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trace = answer_trace()
    both = trace + second_turn(trace, timedelta(seconds=40), "It is 42 days [1].")
    fake.add_observations(both)
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__PAGE_LIMIT="3")
    now = after(both)
    first = once(settings, tmp_path / "s.sqlite", now)
    assert first.passed is not None and first.passed.scored == 1
    posts = len(fake.score_posts)
    second = once(settings, tmp_path / "s.sqlite", now + timedelta(seconds=30))
    assert second.passed is not None
    assert second.passed.scored == second.passed.rescored == 0
    assert len(fake.score_posts) == posts  # not re-pushed on every pass
    assert doubles(fake) == []
    trace_id = trace[0]["traceId"]
    earliest = min(o["startTime"] for o in trace if o.get("isRootObservation"))
    for score in fake.live_scores(trace_id):
        assert score["timestamp"].replace("+00:00", "Z").startswith(earliest[:23])


def test_a_second_turn_settling_does_not_hold_the_watermark_at_the_first(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """While a later turn settles, the watermark waits at that turn, not at the first
    turn's root far below it: else it stops as long as second turns keep coming."""
    trace = answer_trace()
    trace_id = trace[0]["traceId"]
    fake.add_observations(trace, delay_s=0)
    settings = configure(monkeypatch, fake)
    now = after(trace)
    assert once(settings, tmp_path / "s.sqlite", now).exit_code == 0
    state = State(tmp_path / "s.sqlite")
    first_mark = state.watermark()
    state.close()
    assert first_mark is not None
    root = min(t for o in trace if o.get("isRootObservation") and (t := parse_time(o["startTime"])))
    turn = second_turn(trace, now + timedelta(seconds=30) - root, "It is 42 days [1].")
    fake.add_observations(turn, delay_s=0)
    settling = after(turn, seconds=5)
    result = once(settings, tmp_path / "s.sqlite", settling)
    assert result.passed is not None and result.passed.unsettled == 1
    state = State(tmp_path / "s.sqlite")
    held = state.watermark()
    state.close()
    assert held is not None and held > first_mark
    turn_root = min(parse_time(o["startTime"]) for o in turn if o.get("isRootObservation"))
    assert held <= turn_root  # the next pass still reads the settling turn
    done = once(settings, tmp_path / "s.sqlite", settling + timedelta(seconds=60))
    assert done.passed is not None and done.passed.rescored == 1
    answers = {o["id"] for o in turn if o["name"] == "answer"}
    assert {s["observationId"] for s in fake.live_scores(trace_id)} == answers
    assert doubles(fake) == []


def test_a_late_generation_updates_the_one_score_set_and_deletes_what_no_longer_applies(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trace = answer_trace()
    trace_id = trace[0]["traceId"]
    fake.add_observations(trace)
    settings = configure(monkeypatch, fake)
    now = after(trace)
    assert once(settings, tmp_path / "s.sqlite", now).exit_code == 0
    before = {s["name"] for s in fake.live_scores(trace_id)}
    assert "numeric_grounding" in before
    answer = next(o for o in trace if o["name"] == "answer")
    late = copy.deepcopy(answer)
    late["id"] = "f" * 16
    moment = parse_time(answer["startTime"])
    assert moment is not None
    late["startTime"] = late["endTime"] = iso(moment + timedelta(seconds=5))
    late["output"] = "Please ask the support team [1]."  # no numbers any more
    fake.add_observations([late])
    result = once(settings, tmp_path / "s.sqlite", now + timedelta(seconds=60))
    assert result.passed is not None and result.passed.rescored == 1
    live = {s["name"]: s for s in fake.live_scores(trace_id)}
    assert "numeric_grounding" not in live  # deleted, not left beside the new set
    assert {s["observationId"] for s in live.values()} == {late["id"]}
    assert doubles(fake) == []


def _score(trace_id: str, name: str) -> ScoreEvent:
    return ScoreEvent(
        id=f"{trace_id}-{name}",
        trace_id=trace_id,
        observation_id=None,
        name=name,
        value=1.0,
        data_type="NUMERIC",
        comment="",
        timestamp="2026-11-30T00:00:00.000Z",
        environment=None,
    )


def test_the_outbox_size_is_true_for_every_process_on_the_file(tmp_path: Path) -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    daemon, backfill = State(tmp_path / "s.sqlite", max_outbox=100), State(tmp_path / "s.sqlite")
    try:
        backfill.record_trace("t1", "f1", now, [_score("t1", "a"), _score("t1", "b")], now)
        assert daemon.outbox_size() == 2
        daemon.acknowledge([_score("t1", "a")])
        assert backfill.outbox_size() == daemon.outbox_size() == 1
    finally:
        daemon.close()
        backfill.close()


def test_backfill_waits_for_room_in_the_outbox_and_scores_every_trace(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.add_observations(demo_observations())
    fake.post_latency_s = 0.05  # slow score posts: the outbox fills while the pass runs
    settings = configure(
        monkeypatch, fake, OBSERVER_SINK__MAX_OUTBOX="100", OBSERVER_SINK__BATCH_SIZE="20"
    )
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    start = min(parse_time(o["startTime"]) for o in demo_observations())
    assert start is not None
    try:
        result = app.backfill(
            parts, start - timedelta(minutes=1), after(demo_observations()), timedelta(hours=6)
        )
    finally:
        parts.state.close()
    assert result.exit_code == 0, result.error
    assert result.passed is not None and result.passed.deferred == 0
    assert {s["traceId"] for s in fake.live_scores()} >= set()
    assert len(fake.live_scores()) == DEMO.scores


class ListSource:
    def __init__(self, observations: list[dict[str, Any]], page: int = 500) -> None:
        self.observations, self.page = observations, page

    def pages(
        self, start: datetime, end: datetime, trace_id: str | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        for offset in range(0, len(self.observations), self.page):
            yield self.observations[offset : offset + self.page]


def test_a_huge_trace_is_counted_while_reading_not_buffered(tmp_path: Path) -> None:
    start = datetime(2026, 11, 30, tzinfo=UTC)
    huge = [
        {
            "id": f"{i:016x}",
            "traceId": "h" * 32,
            "type": "SPAN",
            "name": "step",
            "startTime": iso(start + timedelta(seconds=60) - timedelta(microseconds=i)),
            "output": "x" * 200,
        }
        for i in range(60_000)
    ]
    huge.append(
        {"id": "r" * 16, "traceId": "h" * 32, "isRootObservation": True, "startTime": iso(start)}
    )
    state = State(tmp_path / "s.sqlite")
    pipeline = Pipeline(
        ListSource(huge),
        state,
        Metrics(),
        SignalParams(),
        MappingRules(max_observations=1000),
        lookback_s=86400,
    )
    tracemalloc.start()
    result = pipeline.poll(start + timedelta(hours=1))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    state.close()
    assert result.skip_reasons == {"too_large": 1}
    # 60,000 observation dicts held at once would be tens of MB; a counter is not.
    assert peak < 8_000_000, peak


def test_the_server_clock_is_langfuses_date_header() -> None:
    local = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    clock = ServerClock(local=lambda: local, monotonic=lambda: 1000.0)
    assert not clock.known and clock.now() == local
    for _ in range(3):  # answers that agree (observer.sources.clock: the quorum)
        clock.observe("Tue, 01 Dec 2026 11:00:00 GMT", 1000.0, 1000.0)
    assert clock.known
    assert abs(clock.offset_s + 3600 - 0.5) < 0.01
    assert abs((clock.now() - (local - timedelta(hours=1))).total_seconds()) < 1
    clock.observe("not a date", 1000.0, 1000.0)  # unreadable headers change nothing
    assert abs(clock.offset_s + 3600 - 0.5) < 0.01


@pytest.mark.parametrize(
    ("metadata", "slow"),
    [
        ({"scope.name": "langfuse-sdk", "scope.version": "4.2.0"}, "langfuse-python 4.2.0"),
        ({"scope.name": "langfuse-sdk", "scope.version": "4.7.0"}, None),
        ({"scope.name": "langfuse-sdk", "scope.version": "5.2.0"}, None),
        (
            {
                "scope.name": "langfuse-sdk",
                "scope.version": "5.3.1",
                "resourceAttributes.telemetry.sdk.language": "nodejs",
            },
            "langfuse-js 5.3.1",
        ),
        ({"scope": {"name": "langfuse-sdk", "version": "3.1.0"}}, "langfuse-python 3.1.0"),
        ({"scope.name": "observer"}, None),
        ({"scope.name": "langfuse-sdk", "scope.version": "not-a-version"}, None),
        (None, None),
    ],
)
def test_slow_ingestion_is_told_from_the_sdk_in_the_metadata(
    metadata: Any, slow: str | None
) -> None:
    from observer.sources.ingestion import slow_ingestion

    assert slow_ingestion(metadata) == slow


def test_a_trace_from_an_old_sdk_widens_the_sweeps_to_the_documented_delay(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trace = answer_trace()
    root = next(o for o in trace if o.get("isRootObservation"))
    root["metadata"] = {
        **(root.get("metadata") or {}),
        "scope.name": "langfuse-sdk",
        "scope.version": "4.2.0",
    }
    fake.add_observations(trace)
    settings = configure(monkeypatch, fake)
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    try:
        app.run_once(parts, after(trace))
        assert parts.pipeline.slow_sdk == "langfuse-python 4.2.0"
        assert parts.pipeline.overlap >= timedelta(minutes=15)
        assert parts.metrics.value("observer_slow_ingestion_traces_total") == 1
    finally:
        parts.state.close()
