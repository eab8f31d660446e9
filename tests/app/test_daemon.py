"""The daemon against a fake Langfuse over real HTTP, with the real SDK client.

Every trace scored right, exactly once; nothing lost through 5xx, 429,
outages and restarts; every skip counted.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from observer import app
from observer.telemetry.metrics import Metrics
from observer.times import parse_time
from tests.daemon_helpers import (
    after,
    configure,
    demo_counts,
    demo_observations,
    expected_signals,
    once,
)
from tests.fakes.langfuse_server import OBSERVATIONS_PATH, FakeLangfuse

DEMO = demo_counts()
SCORED_TRACES = DEMO.scored
SCORES_PER_PASS = DEMO.scores


@pytest.fixture
def fake() -> Any:
    with FakeLangfuse() as server:
        yield server


@pytest.fixture
def loaded(fake: FakeLangfuse) -> FakeLangfuse:
    fake.add_observations(demo_observations())
    return fake


# Score names and the `observer score` keys of the signals that rest on retrieval scores.
SCORE_SIGNALS = (
    ("confidence", "confidence"),
    ("rerank_top1", "rerank_top1"),
    ("crag_grade", "crag_grade"),
    ("confidence_band", "band"),
    ("ungrounded", "ungrounded"),
)


def by_trace(scores: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    grouped: dict[str, dict[str, Any]] = {}
    for score in scores:
        grouped.setdefault(score["traceId"], {})[score["name"]] = score
    return grouped


def test_full_pass_scores_every_trace_right(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    observations = demo_observations()
    settings = configure(monkeypatch, loaded)
    result = once(settings, tmp_path / "state.sqlite", after(observations))
    assert result.exit_code == 0, result.error
    assert result.passed is not None
    assert result.passed.scored == SCORED_TRACES
    assert result.passed.skip_reasons == {
        "judge_environment": 1,
        "malformed_sources": 1,
        "no_answer_text": 1,
        "no_generation": 1,
        "own_trace": 1,
    }
    assert len(loaded.scores) == SCORES_PER_PASS
    assert loaded.duplicates() == []

    generations = {
        o["traceId"]: o for o in observations if o["type"] == "GENERATION" and o["name"] == "answer"
    }
    roots = {o["traceId"]: o for o in observations if o.get("isRootObservation")}
    scored = by_trace(loaded.scores)
    expected = expected_signals()
    assert set(expected) <= set(scored)
    for trace_id, want in expected.items():
        got = scored[trace_id]
        # Unknown score signals (docs/signals.md#unknown-is-not-zero) are not posted.
        for name, key in SCORE_SIGNALS:
            assert (name in got) == (want[key] is not None), (trace_id, name)
        if want["confidence"] is not None:
            assert got["confidence"]["value"] == pytest.approx(want["confidence"])
            assert got["rerank_top1"]["value"] == pytest.approx(want["rerank_top1"])
            assert got["crag_grade"]["value"] == want["crag_grade"]
        if want["band"] is not None:
            assert got["confidence_band"]["value"] == want["band"]
        if want["ungrounded"] is not None:
            assert got["ungrounded"]["value"] == (1 if want["ungrounded"] else 0)
        assert got["invalid_citations"]["value"] == len(want["invalid_refs"])
        assert ("citation_coverage" in got) == want["coverage_computed"]
        if want["coverage_computed"]:
            assert got["citation_coverage"]["value"] == pytest.approx(want["coverage"])
        assert ("numeric_grounding" in got) == (want["numeric_grounding"] is not None)
        generation = generations[trace_id]
        root = roots[trace_id]
        for score in got.values():
            assert score["observationId"] == generation["id"]
            # The trace's earliest root: fixed for its life, not the generation's
            # (docs/scores.md#ids-and-timestamps).
            assert score["timestamp"].replace("+00:00", "Z").startswith(root["startTime"][:23])
            assert score["environment"] == generation["environment"]
            assert score["comment"]
    skipped = {
        "325ef377735d3c794bda884be1d06ba6",
        "5242a5d4fa9006521d920dabdbcf8abe",
        "f4dc38744f796cd7085fd507c7d55af4",
        "e16bb509ad6903499e58ba5c1f3e238b",
        "2cc1746a1424dfec6a8e2f80c442b860",
    }
    assert not skipped & set(scored)


def test_second_pass_pushes_nothing(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, loaded)
    now = after(demo_observations())
    assert once(settings, tmp_path / "s.sqlite", now).exit_code == 0
    posts = len(loaded.score_posts)
    second = once(settings, tmp_path / "s.sqlite", now + timedelta(seconds=30))
    assert second.exit_code == 0
    assert second.passed is not None
    # The second pass re-reads only the overlap window before the watermark.
    assert second.passed.scored == second.passed.rescored == 0
    assert second.passed.unchanged >= 1
    assert len(loaded.score_posts) == posts


def test_fresh_state_gives_the_same_ids_and_timestamps(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, loaded)
    now = after(demo_observations())
    once(settings, tmp_path / "a.sqlite", now)
    first = {(s["id"], s["timestamp"]) for s in loaded.scores}
    once(settings, tmp_path / "b.sqlite", now)
    assert {(s["id"], s["timestamp"]) for s in loaded.scores} == first
    assert len(loaded.scores) == SCORES_PER_PASS
    assert loaded.duplicates() == []
    assert sum(len(p) for p in loaded.score_posts) == 2 * SCORES_PER_PASS


def test_late_observation_rescores_its_trace_under_the_same_ids(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    observations = demo_observations()
    trace_id = next(o["traceId"] for o in observations if o["name"] == "answer")
    answer = next(o for o in observations if o["traceId"] == trace_id and o["name"] == "answer")
    # First the trace arrives without its answer: not scored yet.
    fake.add_observations(o for o in observations if o is not answer)
    settings = configure(monkeypatch, fake)
    now = after(observations)
    first = once(settings, tmp_path / "s.sqlite", now)
    assert first.passed is not None and first.passed.skip_reasons.get("no_generation") == 2
    assert trace_id not in by_trace(fake.scores)
    # The answer lands later: the next pass (overlap window) scores the trace.
    fake.add_observations([answer])
    second = once(settings, tmp_path / "s.sqlite", now + timedelta(seconds=30))
    assert second.passed is not None and second.passed.scored == 1
    ids = {s["name"]: s["id"] for s in by_trace(fake.scores)[trace_id].values()}
    # Then the app rewrites the answer: re-scored, same ids, values updated, no duplicate.
    changed = copy.deepcopy(answer)
    changed["output"] = "A different answer with no citations at all."
    changed["updatedAt"] = changed["endTime"]
    fake.add_observations([changed])
    third = once(settings, tmp_path / "s.sqlite", now + timedelta(seconds=60))
    assert third.passed is not None and third.passed.rescored == 1
    rescored = by_trace(fake.scores)[trace_id]
    assert {n: s["id"] for n, s in rescored.items() if n in ids} == {
        n: i for n, i in ids.items() if n in rescored
    }
    assert rescored["citation_coverage"]["value"] == 0.0
    assert fake.duplicates() == []


def test_unsettled_trace_waits_and_holds_the_watermark(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    observations = demo_observations()
    fake.add_observations(observations)
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__SETTLE_S="600")
    newest = max(observations, key=lambda o: o["updatedAt"])
    # "now" is five minutes after the newest activity: that trace is still settling.
    from observer.times import parse_time

    now = parse_time(newest["updatedAt"])
    assert now is not None
    first = once(settings, tmp_path / "s.sqlite", now + timedelta(seconds=300))
    assert first.passed is not None and first.passed.unsettled >= 1
    assert newest["traceId"] not in by_trace(fake.scores)
    later = once(settings, tmp_path / "s.sqlite", now + timedelta(seconds=900))
    assert later.passed is not None and later.passed.scored == first.passed.unsettled
    assert newest["traceId"] in by_trace(fake.scores)


def test_5xx_and_429_while_reading_lose_nothing(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, loaded, OBSERVER_SOURCE__MAX_ATTEMPTS="4")
    loaded.fail_next(500, count=2, path_prefix="/api/public/v2/observations")
    loaded.fail_next(429, count=1, retry_after=0.3, path_prefix="/api/public/v2/observations")
    result = once(settings, tmp_path / "s.sqlite", after(demo_observations()))
    assert result.exit_code == 0, result.error
    assert len(loaded.scores) == SCORES_PER_PASS
    statuses = [r.status for r in loaded.requests if r.path.endswith("/observations")]
    assert statuses[:3] == [500, 500, 429] and statuses[3] == 200
    waited = [r.time for r in loaded.requests if r.path.endswith("/observations")]
    assert waited[3] - waited[2] >= 0.3  # Retry-After honoured


def test_score_push_failures_are_retried_and_lose_nothing(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, loaded)
    loaded.fail_next(503, count=2, path_prefix="/api/public/scores")
    loaded.fail_next(429, count=1, retry_after=0.2, path_prefix="/api/public/scores")
    result = once(settings, tmp_path / "s.sqlite", after(demo_observations()))
    assert result.exit_code == 0, result.error
    assert len(loaded.scores) == SCORES_PER_PASS
    assert loaded.duplicates() == []


def test_outage_keeps_scores_for_the_next_run(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, loaded, OBSERVER_RUN__SHUTDOWN_GRACE_S="1")
    now = after(demo_observations())
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    passed = parts.pipeline.poll(now)  # read while Langfuse is up
    loaded.stop()  # then it goes down before the scores are pushed
    assert parts.dispatcher.flush(1.0) is False
    assert parts.state.outbox_size() == passed.scores == SCORES_PER_PASS
    parts.state.close()
    loaded.start()
    again = once(settings, tmp_path / "s.sqlite", now + timedelta(seconds=30))
    assert again.exit_code == 0, again.error
    assert again.passed is not None and again.passed.scored == 0
    assert len(loaded.scores) == SCORES_PER_PASS
    assert loaded.duplicates() == []


def test_restart_after_an_outage_delivers_what_the_outbox_holds(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The failed process's backoffs are its own: a new one sends every queued score."""
    settings = configure(
        monkeypatch, loaded, OBSERVER_RUN__SHUTDOWN_GRACE_S="2", OBSERVER_SINK__MAX_BACKOFF_S="300"
    )
    now = after(demo_observations())
    loaded.fail_next(500, count=1000, path_prefix="/api/public/scores")
    first = once(settings, tmp_path / "s.sqlite", now)
    assert first.exit_code == 3
    assert first.error is not None and "did not accept" in first.error and "500" in first.error
    assert loaded.scores == []
    loaded.clear_failures()  # Langfuse is back
    again = once(settings, tmp_path / "s.sqlite", now + timedelta(seconds=30))
    assert again.exit_code == 0, again.error
    assert len(loaded.scores) == SCORES_PER_PASS
    assert loaded.duplicates() == []


def test_a_retry_after_of_the_last_process_does_not_hold_back_the_next(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, loaded, OBSERVER_RUN__SHUTDOWN_GRACE_S="2")
    now = after(demo_observations())
    loaded.fail_next(429, count=1, retry_after=3600, path_prefix="/api/public/scores")
    first = once(settings, tmp_path / "s.sqlite", now)
    assert first.exit_code == 3 and first.error is not None
    # Langfuse said wait an hour: nothing more is sent by that process.
    assert f"{SCORES_PER_PASS:,} scores kept in the outbox" in first.error
    # The next process sends them all; its grace only bounds a hang (it returns once the
    # outbox is empty), as two seconds did not on a busy machine.
    settings = configure(monkeypatch, loaded, OBSERVER_RUN__SHUTDOWN_GRACE_S="60")
    again = once(settings, tmp_path / "s.sqlite", now + timedelta(seconds=30))
    assert again.exit_code == 0, again.error
    assert len(loaded.scores) == SCORES_PER_PASS
    assert loaded.duplicates() == []


def test_a_429_pauses_every_batch_for_its_retry_after(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Retry-After holds the whole sink: no burst of posts Langfuse will refuse anyway."""
    # A hundred scores a POST (the cap), so that the pass takes several posts.
    settings = configure(
        monkeypatch, loaded, OBSERVER_RUN__SHUTDOWN_GRACE_S="5", OBSERVER_SINK__BATCH_SIZE="100"
    )
    loaded.fail_next(429, count=1, retry_after=1.0, path_prefix="/api/public/scores")
    result = once(settings, tmp_path / "s.sqlite", after(demo_observations()))
    assert result.exit_code == 0, result.error
    posts = [r.time for r in loaded.requests if r.path.endswith("/scores")]
    assert len(posts) > 2
    assert posts[1] - posts[0] >= 0.9  # the second post waited out the first one's 429
    assert len(loaded.scores) == SCORES_PER_PASS and loaded.duplicates() == []


def test_rejected_score_is_dropped_and_counted_the_rest_delivered(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, loaded)
    loaded.reject_next_scores(2)
    metrics = Metrics()
    parts = app.build(settings, state_path=tmp_path / "s.sqlite", metrics=metrics)
    result = app.run_once(parts, after(demo_observations()))
    parts.state.close()
    assert result.exit_code == 0
    assert metrics.value("observer_scores_dropped_total", reason="rejected") == 2
    assert len(loaded.scores) == SCORES_PER_PASS - 2
    # No judge configured: every scored trace is counted as a `disabled` decision.
    assert metrics.value("observer_judge_decisions_total", decision="disabled") == SCORED_TRACES


def test_unreachable_langfuse_exits_3_with_the_reason(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__MAX_ATTEMPTS="1")
    fake.stop()
    result = once(settings, tmp_path / "s.sqlite", after(demo_observations()))
    assert result.exit_code == 3
    assert result.error is not None and "ConnectError" in result.error


def test_rejected_keys_exit_4(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, fake)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-wrong")
    from observer.config import load_settings

    settings = load_settings()
    result = once(settings, tmp_path / "s.sqlite", after(demo_observations()))
    assert result.exit_code == 4
    assert result.error is not None and "rejected the keys" in result.error
    assert "sk-lf-wrong" not in result.error


def test_skips_are_counted_once_per_trace(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, loaded)
    metrics = Metrics()
    now = after(demo_observations())
    for offset in (0, 30):
        parts = app.build(settings, state_path=tmp_path / "s.sqlite", metrics=metrics)
        app.run_once(parts, now + timedelta(seconds=offset))
        parts.state.close()
    reasons = [
        "judge_environment",
        "malformed_sources",
        "no_answer_text",
        "no_generation",
        "own_trace",
    ]
    counts = Counter({r: metrics.value("observer_trace_skips_total", reason=r) for r in reasons})
    assert counts == Counter(dict.fromkeys(reasons, 1.0))


def test_observation_requests_stay_within_budget(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    loaded.empty_page_share = loaded.cut_page_share = 0.0  # full pages, to count them
    settings = configure(monkeypatch, loaded, OBSERVER_SOURCE__PAGE_LIMIT="100")
    once(settings, tmp_path / "s.sqlite", after(demo_observations()))
    # 321 observations at 100 per page: 4 pages.
    assert loaded.observation_requests() == 4
    reads = [r for r in loaded.requests if r.path.endswith("/observations")]
    assert {tuple(r.query["fields"]) for r in reads} == {
        ("core,basic,time,io,metadata,model,prompt,trace_context",)
    }
    expanded = set(reads[0].query["expandMetadata"][0].split(","))
    assert {"context", "rerank_scores", "query_type", "needs_fallback"} <= expanded


def test_generated_sdk_client_path_delivers_the_same_scores(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The fallback for SDKs whose HTTP layer moved: `api.scores.create`, 207s included."""
    from observer.langfuse_api import build_api
    from observer.sinks.langfuse_scores import LangfuseScoreSink

    settings = configure(monkeypatch, loaded)
    api = build_api(loaded.url, loaded.public_key, loaded.secret_key, 10)
    metrics = Metrics()
    loaded.reject_next_scores(1)
    parts = app.build(
        settings,
        state_path=tmp_path / "s.sqlite",
        metrics=metrics,
        sink=LangfuseScoreSink(api, use_generated_client=True),
    )
    result = app.run_once(parts, after(demo_observations()))
    parts.state.close()
    assert result.exit_code == 0, result.error
    assert len(loaded.scores) == SCORES_PER_PASS - 1
    assert metrics.value("observer_scores_dropped_total", reason="rejected") == 1


def test_child_starting_before_its_root_still_joins_the_trace(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Clock skew between services: the reranker 'starts' 500 ms before its root.

    Pages are cut so that the first one ends with another trace that started
    between the two: without a skew margin the trace would be mapped without
    its sources.
    """
    from observer.times import iso, parse_time

    demo = demo_observations()
    trace_id = next(o["traceId"] for o in demo if o["name"] == "rerank")
    # Without the raw candidates, only the reranker can give the trace its sources.
    trace = [
        copy.deepcopy(o) for o in demo if o["traceId"] == trace_id and o["name"] != "retrieval"
    ]
    root = next(o for o in trace if o["isRootObservation"])
    t0 = parse_time(root["startTime"])
    assert t0 is not None
    rerank = next(o for o in trace if o["name"] == "rerank")
    rerank["startTime"] = iso(t0 - timedelta(milliseconds=500))
    other = [
        {
            **copy.deepcopy(root),
            "id": "0000000000000001",
            "traceId": "f" * 32,
            "startTime": iso(t0 - timedelta(milliseconds=200)),
        },
        {
            **copy.deepcopy(next(o for o in trace if o["name"] == "answer")),
            "id": "0000000000000002",
            "traceId": "f" * 32,
            "startTime": iso(t0 - timedelta(milliseconds=150)),
        },
    ]
    fake.add_observations(trace + other)
    fake.empty_page_share = fake.cut_page_share = 0.0  # the cut below is this test's own
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__PAGE_LIMIT=str(len(trace) - 1 + 2))
    result = once(settings, tmp_path / "s.sqlite", after(trace))
    assert result.exit_code == 0
    assert fake.observation_requests() == 2  # the page cut really fell between them
    scored = by_trace(fake.scores)[trace_id]
    assert scored["rerank_top1"]["value"] > 0
    assert "no retrieval scores" not in scored["rerank_top1"]["comment"]


def test_backfill_scores_a_trace_that_straddles_a_chunk_boundary(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Root just before a chunk's end, its retrievers and generation just after."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in demo_observations():
        by_trace.setdefault(observation["traceId"], []).append(observation)
    expected = expected_signals()
    trace_id = next(t for t in by_trace if t in expected)
    fake.add_observations(by_trace[trace_id])
    (root,) = [o for o in by_trace[trace_id] if o.get("isRootObservation")]
    boundary = parse_time(root["startTime"]) + timedelta(milliseconds=1)
    settings = configure(monkeypatch, fake)
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    try:
        result = app.backfill(
            parts,
            boundary - timedelta(minutes=30),
            boundary + timedelta(minutes=30),
            timedelta(minutes=30),
        )
    finally:
        parts.state.close()
    assert result.exit_code == 0, result.error
    assert result.passed is not None and result.passed.scored == 1, result.passed
    assert {s["traceId"] for s in fake.scores} == {trace_id}


def test_only_sweeps_re_read_the_overlap_and_they_catch_late_observations(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One process, several passes: the first is a sweep, the next only reads from the
    watermark, and a late answer of a trace rooted before it waits for the next sweep."""
    observations = demo_observations()
    answer = max((o for o in observations if o["name"] == "answer"), key=lambda o: o["startTime"])
    trace_id = answer["traceId"]
    fake.add_observations(o for o in observations if o is not answer)
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__SWEEP_INTERVAL_S="60")
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    now = after(observations)
    skew = timedelta(seconds=2)
    seen = 0

    def window_starts() -> set[Any]:
        nonlocal seen
        requests = fake.requests
        starts = {
            parse_time(r.query["fromStartTime"][0])
            for r in requests[seen:]
            if r.path.endswith("/observations") and r.status == 200
        }
        seen = len(requests)
        return starts

    try:
        first = parts.pipeline.poll(now)
        assert first.sweep and first.skip_reasons.get("no_generation")
        assert window_starts() == {now - timedelta(days=3) - skew}  # the lookback
        mark = parts.state.watermark()
        assert mark is not None
        fake.add_observations([answer])  # lands late: its trace is rooted before the watermark
        regular = parts.pipeline.poll(now + timedelta(seconds=30))
        assert not regular.sweep and regular.scored == 0
        assert window_starts() == {mark - skew}
        mark = parts.state.watermark()
        assert mark is not None
        # The interval counts from the first sweep's end (`now` plus its real duration,
        # seconds on a loaded machine): half an interval more than it is certainly past.
        sweep = parts.pipeline.poll(now + timedelta(seconds=90))
        assert sweep.sweep and sweep.scored == 1
        # The demo's traces include langfuse-python 3.6.2 ones, which Langfuse may show up
        # to 15 minutes late: the sweeps re-read that, a sweep interval and two minutes
        # more, instead of the overlap's 5 minutes.
        assert parts.pipeline.slow_sdk == "langfuse-python 3.6.2"
        assert window_starts() == {mark - timedelta(seconds=900 + 60 + 120) - skew}
    finally:
        parts.dispatcher.flush(5)
        parts.state.close()
    assert trace_id in by_trace(fake.scores)


def test_with_a_zero_sweep_interval_every_pass_re_reads_the_overlap(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.add_observations(demo_observations())
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__SWEEP_INTERVAL_S="0")
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    now = after(demo_observations())
    try:
        results = [parts.pipeline.poll(now + timedelta(seconds=30 * i)) for i in range(3)]
    finally:
        parts.state.close()
    assert [r.sweep for r in results] == [True, True, True]


def test_waiting_out_a_429_keeps_the_liveness_heartbeat_fresh(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A pass that waits for Langfuse is alive, not wedged: /healthz must not have it
    restarted (that would throw away the pass's reading and start over).

    The beats are recorded, not sampled against a staleness bound in real time (a busy
    machine stretches a pass's other work, and a sampler's, past any fixed bound): no
    probe runs here, so every reading of the health clock is a beat (or Langfuse's
    answer, stamped with one). A loop that beat only when a wait began would leave an
    unbeaten stretch as long as the Retry-After itself; this one beats while it waits.
    """
    retry_after_s = 2.0
    loaded.fail_next(429, count=2, retry_after=retry_after_s, path_prefix=OBSERVATIONS_PATH)
    settings = configure(monkeypatch, loaded)
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    beats: list[float] = []

    def beat_clock() -> float:  # the fake records its requests by time.time() too
        beats.append(time.time())
        return beats[-1]

    parts.health.clock = beat_clock
    try:
        result = parts.pipeline.poll(after(demo_observations()))
    finally:
        parts.state.close()
    assert result.scored == SCORED_TRACES
    reads = [r for r in loaded.requests if r.path == OBSERVATIONS_PATH]
    waits = [
        (limited.time, retried.time)
        for limited, retried in itertools.pairwise(reads)
        if limited.status == 429
    ]
    assert len(waits) == 2
    for began, ended in waits:
        assert ended - began >= retry_after_s - 0.1  # the Retry-After was waited out
        marks = [began, *(b for b in beats if began < b < ended), ended]
        unbeaten = max(later - earlier for earlier, later in itertools.pairwise(marks))
        assert unbeaten < retry_after_s, f"no beat for {unbeaten:.2f} s of the wait"


def test_a_daemon_behind_alternates_sweeps_with_passes_that_read_only_what_is_new(
    loaded: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Passes longer than the sweep interval: the interval counts from a sweep's end, so
    the pass right after a sweep does not re-read the overlap again."""
    loaded.latency_s = 0.6  # every page takes a while: a pass lasts longer than the interval
    settings = configure(monkeypatch, loaded, OBSERVER_SOURCE__SWEEP_INTERVAL_S="0.5")
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    now = after(demo_observations())
    began = time.monotonic()  # the passes' clock runs as fast as the wall clock

    def clock() -> Any:
        return now + timedelta(seconds=time.monotonic() - began)

    try:
        sweeps = [parts.pipeline.poll(clock()).sweep for _ in range(4)]  # back to back
    finally:
        parts.state.close()
    assert sweeps == [True, False, True, False]
