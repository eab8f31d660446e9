"""The judge inside the daemon: fake Langfuse + OpenAI stub, both over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import observer
from observer import app
from observer.background import Deadline
from observer.judge.identity import judge_from_metadata, judge_of, prompt_hash
from observer.judge.outcome import JUDGE_SCORE_NAMES, JudgeResult
from observer.model import RagRecord
from observer.scores import score_id
from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import after, configure, demo_counts, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.openai_stub import OpenAIStub

SCORED = demo_counts().scored


@pytest.fixture
def servers(judge_stub: OpenAIStub) -> Iterator[tuple[FakeLangfuse, OpenAIStub]]:
    with FakeLangfuse() as langfuse:
        langfuse.add_observations(demo_observations())
        yield langfuse, judge_stub


def run(
    monkeypatch: pytest.MonkeyPatch,
    langfuse: FakeLangfuse,
    state: Path,
    critical: list[str] | None = None,
    **env: str,
) -> tuple[app.OnceResult, Metrics]:
    settings = configure(monkeypatch, langfuse, OBSERVER_JUDGE__ENABLED="true", **env)
    metrics = Metrics()

    def on_judged(record: RagRecord, result: JudgeResult) -> None:
        if critical is not None and result.critical_unsupported:
            critical.append(record.trace_id)

    parts = app.build(settings, state_path=state, metrics=metrics, on_judged=on_judged)
    try:
        return app.run_once(parts, after(demo_observations())), metrics
    finally:
        parts.state.close()


def judged(langfuse: FakeLangfuse) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for score in langfuse.scores:
        if score["name"] in ("faithfulness", "no_claims", "critical_unsupported"):
            out.setdefault(score["traceId"], {})[score["name"]] = score
    return out


def test_every_sampled_trace_is_judged_and_scored_once(
    servers: tuple[FakeLangfuse, OpenAIStub], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    langfuse, stub = servers
    critical: list[str] = []
    result, metrics = run(
        monkeypatch, langfuse, tmp_path / "s.sqlite", critical, OBSERVER_JUDGE__RATE="1.0"
    )
    assert result.exit_code == 0, result.error
    got = judged(langfuse)
    assert len(got) == SCORED
    assert stub.calls <= 2 * SCORED
    assert metrics.value("observer_judge_decisions_total", decision="sampled") == SCORED
    assert langfuse.duplicates() == []
    deterministic = {s["traceId"]: s for s in langfuse.scores if s["name"] == "invalid_citations"}
    for trace_id, scores in got.items():
        assert "no_claims" in scores and "critical_unsupported" in scores
        anchor = deterministic[trace_id]
        for score in scores.values():
            assert score["id"] == score_id(trace_id, score["name"])
            assert score["timestamp"] == anchor["timestamp"]
    # The demo holds fabricated figures: the critical ones were handed on at once.
    assert critical and set(critical) <= set(got)
    assert metrics.total("observer_critical_unsupported_total") == len(critical)
    assert all(got[t]["critical_unsupported"]["value"] == 1 for t in critical)


def test_hourly_budget_caps_the_judge(
    servers: tuple[FakeLangfuse, OpenAIStub], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    langfuse, stub = servers
    _, metrics = run(
        monkeypatch,
        langfuse,
        tmp_path / "s.sqlite",
        OBSERVER_JUDGE__RATE="1.0",
        OBSERVER_JUDGE__MAX_JUDGED_PER_HOUR="10",
    )
    assert len(judged(langfuse)) == 10
    assert metrics.value("observer_judge_decisions_total", decision="over_budget") == SCORED - 10
    assert stub.calls <= 20


def test_daily_token_budget_caps_the_judge(
    servers: tuple[FakeLangfuse, OpenAIStub], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from observer.judge.service import buckets
    from observer.state import State

    langfuse, stub = servers
    # Today's tokens are already spent (by an earlier run or another replica).
    state_path = tmp_path / "s.sqlite"
    state = State(state_path)
    hour, day = buckets(app.now_utc())
    state.judge.spend(hour, day, judged=0, tokens=5000)
    state.close()
    _, metrics = run(
        monkeypatch,
        langfuse,
        state_path,
        OBSERVER_JUDGE__RATE="1.0",
        OBSERVER_JUDGE__MAX_TOKENS_PER_DAY="5000",
    )
    assert judged(langfuse) == {}
    assert stub.calls == 0
    assert metrics.value("observer_judge_decisions_total", decision="over_budget") == SCORED


def test_judging_spends_the_token_budget(
    servers: tuple[FakeLangfuse, OpenAIStub], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from observer.judge.service import buckets
    from observer.state import State

    langfuse, _ = servers
    _, metrics = run(monkeypatch, langfuse, tmp_path / "s.sqlite", OBSERVER_JUDGE__RATE="1.0")
    state = State(tmp_path / "s.sqlite")
    judged_now, tokens = state.judge.budget(*buckets(app.now_utc()))
    state.close()
    assert judged_now == SCORED
    used = metrics.value("observer_judge_tokens_total", kind="prompt") + metrics.value(
        "observer_judge_tokens_total", kind="completion"
    )
    assert tokens == used > 0


def test_the_same_sample_on_two_runs(
    servers: tuple[FakeLangfuse, OpenAIStub], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    langfuse, _ = servers
    run(
        monkeypatch,
        langfuse,
        tmp_path / "a.sqlite",
        OBSERVER_JUDGE__RATE="0.3",
        OBSERVER_JUDGE__RISK_OVERSAMPLING="false",
    )
    first = set(judged(langfuse))
    assert 5 < len(first) < 50
    with FakeLangfuse() as other:
        other.add_observations(demo_observations())
        run(
            monkeypatch,
            other,
            tmp_path / "b.sqlite",
            OBSERVER_JUDGE__RATE="0.3",
            OBSERVER_JUDGE__RISK_OVERSAMPLING="false",
        )
        assert set(judged(other)) == first


def test_a_dead_judge_never_costs_a_deterministic_score(
    servers: tuple[FakeLangfuse, OpenAIStub], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    langfuse, stub = servers
    stub.stop()
    result, metrics = run(
        monkeypatch,
        langfuse,
        tmp_path / "s.sqlite",
        OBSERVER_JUDGE__RATE="1.0",
        OBSERVER_JUDGE__MAX_RETRIES="0",
    )
    assert result.exit_code == 0
    assert len(langfuse.scores) == demo_counts().scores
    assert judged(langfuse) == {}
    assert metrics.value("observer_judge_errors_total", reason="unreachable") == SCORED


def test_a_full_queue_drops_samples_without_blocking(
    servers: tuple[FakeLangfuse, OpenAIStub], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    langfuse, stub = servers
    stub.latency_s = 0.05
    result, metrics = run(
        monkeypatch,
        langfuse,
        tmp_path / "s.sqlite",
        OBSERVER_JUDGE__RATE="1.0",
        OBSERVER_JUDGE__CONCURRENCY="1",
        OBSERVER_JUDGE__QUEUE_SIZE="1",
    )
    assert result.exit_code == 0
    full = metrics.value("observer_judge_decisions_total", decision="queue_full")
    assert full > 0
    assert len(judged(langfuse)) == SCORED - full
    assert len([s for s in langfuse.scores if s["name"] == "invalid_citations"]) == SCORED


def test_a_critical_unsupported_claim_pages_at_once_through_the_default_trace_rule(
    servers: tuple[FakeLangfuse, OpenAIStub],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from tests.fakes.receiver import Receiver

    langfuse, _ = servers
    with Receiver() as receiver:
        config = tmp_path / "observer.toml"
        config.write_text(
            f'[[alerts.notifiers]]\nname = "oncall"\nkind = "webhook"\nurl = "{receiver.url}"\n'
        )
        monkeypatch.setenv("OBSERVER_CONFIG", str(config))
        critical: list[str] = []
        result, _ = run(
            monkeypatch, langfuse, tmp_path / "s.sqlite", critical, OBSERVER_JUDGE__RATE="1.0"
        )
        assert result.exit_code == 0, result.error
        pages = [r.json() for r in receiver.requests if r.json()["kind"] == "trace"]
    assert critical
    assert {p["rule"] for p in pages} == {"critical_claim_unsupported"}
    # One page per critical trace, up to the hourly cap of 20.
    assert len(pages) == min(len(critical), 20)
    assert all(p["severity"] == "page" and len(p["trace_urls"]) == 1 for p in pages)


def test_queued_samples_cannot_overshoot_the_daily_token_cap(
    servers: tuple[FakeLangfuse, OpenAIStub], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each queued sample reserves what a trace is expected to cost (3,000 tokens before
    any trace was judged): a cap of three traces' worth queues three, not the whole pass."""
    langfuse, stub = servers
    settings = configure(
        monkeypatch,
        langfuse,
        OBSERVER_JUDGE__ENABLED="true",
        OBSERVER_JUDGE__RATE="1.0",
        OBSERVER_JUDGE__MAX_TOKENS_PER_DAY="9000",
    )
    metrics = Metrics()
    parts = app.build(settings, state_path=tmp_path / "s.sqlite", metrics=metrics)
    try:
        parts.pipeline.poll(after(demo_observations()))  # workers not started: all queue up
        assert parts.judge is not None and parts.judge.pending() == 3
        assert metrics.value("observer_judge_decisions_total", decision="over_budget") == (
            SCORED - 3
        )
    finally:
        parts.state.close()
    assert stub.calls == 0


def test_samples_still_queued_at_shutdown_are_judged_after_the_restart(
    servers: tuple[FakeLangfuse, OpenAIStub], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    langfuse, _ = servers
    settings = configure(
        monkeypatch, langfuse, OBSERVER_JUDGE__ENABLED="true", OBSERVER_JUDGE__RATE="0.3"
    )
    state = tmp_path / "s.sqlite"
    metrics = Metrics()
    parts = app.build(settings, state_path=state, metrics=metrics)
    try:
        parts.pipeline.poll(after(demo_observations()))
        assert parts.judge is not None
        queued = parts.judge.pending()
        assert queued > 3
        assert (
            parts.judge.shutdown(Deadline.within(0.1)) is False
        )  # never started: all of them kept
        parts.dispatcher.flush(5)
    finally:
        parts.state.close()
    assert judged(langfuse) == {}
    # The restart: nothing new to score (fingerprints are saved), the kept samples judged.
    again = Metrics()
    parts = app.build(settings, state_path=state, metrics=again)
    try:
        result = app.run_once(parts, after(demo_observations()))
    finally:
        parts.state.close()
    assert result.exit_code == 0, result.error
    assert result.passed is not None and result.passed.scored == 0
    assert len(judged(langfuse)) == queued
    assert (
        again.value("observer_judged_traces_total", result="judged")
        + again.value("observer_judged_traces_total", result="abstained")
        == queued
    )


def _one_judged_trace() -> list[dict[str, Any]]:
    """A demo trace with an answer, as its observations."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in demo_observations():
        by_trace.setdefault(observation["traceId"], []).append(observation)
    return next(
        [dict(o) for o in observations]
        for observations in by_trace.values()
        if {"retrieval", "answer"} <= {o["name"] for o in observations}
    )


def test_a_trace_re_scored_while_its_sample_waits_is_judged_on_the_new_answer(
    judge_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The sample is keyed by the answer: the waiting one is replaced, judged once, new."""
    from datetime import timedelta

    from observer.times import iso, parse_time

    trace = _one_judged_trace()
    answer = next(o for o in trace if o["name"] == "answer")
    late = dict(answer)
    late["id"] = "e" * 16
    moment = parse_time(answer["startTime"])
    assert moment is not None
    late["startTime"] = late["endTime"] = iso(moment + timedelta(seconds=5))
    late["output"] = "The refund window is ninety-one days [1]."
    with FakeLangfuse() as langfuse:
        langfuse.add_observations(trace)
        settings = configure(
            monkeypatch, langfuse, OBSERVER_JUDGE__ENABLED="true", OBSERVER_JUDGE__RATE="1.0"
        )
        now = after(trace)
        parts = app.build(settings, state_path=tmp_path / "s.sqlite")
        try:
            parts.pipeline.poll(now)  # sampled, waiting: the judge is not started yet
            assert parts.judge is not None and parts.judge.pending() == 1
            langfuse.add_observations([late])
            second = parts.pipeline.poll(now + timedelta(seconds=400))
            assert second.rescored == 1
            assert parts.state.judge.basis(answer["traceId"])[0]
            result = app.run_once(parts, now + timedelta(seconds=401))
            assert result.exit_code == 0, result.error
        finally:
            parts.state.close()
        texts = [str(r).replace("ˆ", " ") for r in judge_stub.requests]  # the datamark read
        assert any("ninety-one days" in t for t in texts)
        assert not any(str(answer["output"])[:40] in t for t in texts if "ninety-one" not in t)
        assert judge_stub.calls == 2  # one judged trace: claims and verdicts, once
        live = {s["name"]: s for s in langfuse.live_scores(answer["traceId"])}
        assert live["faithfulness"]["observationId"] == late["id"]


def test_a_sample_is_in_the_state_file_with_its_trace_before_any_queue(
    judge_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A kill right after a trace's commit cannot lose its sample: another process
    opening the file sees the sample already, before this one queued anything."""
    from observer.state import State

    with FakeLangfuse() as langfuse:
        langfuse.add_observations(demo_observations())
        settings = configure(
            monkeypatch, langfuse, OBSERVER_JUDGE__ENABLED="true", OBSERVER_JUDGE__RATE="1.0"
        )
        parts = app.build(settings, state_path=tmp_path / "s.sqlite")
        try:
            parts.pipeline.poll(after(demo_observations()))
            other = State(tmp_path / "s.sqlite")  # the next process, after a SIGKILL
            try:
                waiting = {p.trace_id for p in other.judge.pending()}
                scored = {
                    t
                    for t in waiting
                    if other.fingerprint(t) is not None
                    and not other.fingerprint(t).startswith("skip")
                }
            finally:
                other.close()
        finally:
            parts.state.close()
    assert len(waiting) == SCORED
    assert scored == waiting


def test_a_fleet_count_that_cannot_be_written_costs_the_trace_none_of_its_judge_scores(
    servers: tuple[FakeLangfuse, OpenAIStub],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A fleet member judges while its Redis is away (a partition): the spend it cannot
    report stays a reservation there, and the trace still gets its judge scores."""
    import json

    import redis
    from structlog.testing import capture_logs

    from observer.fleet.budget import FleetBudget
    from observer.fleet.keys import Keys
    from observer.judge.service import JudgeService
    from observer.records import record_from_obj
    from observer.signals import compute
    from tests.servers import free_port

    langfuse, _judge = servers
    settings = configure(monkeypatch, langfuse, OBSERVER_JUDGE__ENABLED="true")
    away = redis.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    try:
        assert parts.judge is not None
        service = JudgeService(
            parts.judge.client,
            parts.state,
            Metrics(),
            settings.sampler_params(),
            signal_params=settings.signal_params(),
            shared=FleetBudget(away, Keys("away")),
        )
        examples = Path(__file__).resolve().parents[2] / "examples" / "records.jsonl"
        line = examples.read_text().splitlines()[0]
        record = record_from_obj(json.loads(line))
        with capture_logs() as logs:
            result = service.judge_now(record, compute(record, settings.signal_params()))
        assert result.error is None
        assert "judge_spend_not_shared" in [e["event"] for e in logs]
        assert parts.state.outbox_size() > 0  # the judge's scores, queued for Langfuse
    finally:
        parts.close()


def test_every_judge_score_says_which_judge_wrote_it(
    servers: tuple[FakeLangfuse, OpenAIStub], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    langfuse, _ = servers
    result, _ = run(
        monkeypatch,
        langfuse,
        tmp_path / "s.sqlite",
        OBSERVER_JUDGE__RATE="1.0",
        OBSERVER_JUDGE__MODEL="judge-model-2026",
    )
    assert result.exit_code == 0, result.error
    expected = {
        "judge_model": "judge-model-2026",
        "judge_prompt_hash": prompt_hash(),
        "observer_version": observer.__version__,
    }
    judge_scores = [s for s in langfuse.scores if s["name"] in JUDGE_SCORE_NAMES]
    assert len({s["traceId"] for s in judge_scores}) == SCORED
    assert all(s["metadata"] == expected for s in judge_scores)
    assert judge_from_metadata(judge_scores[0]["metadata"]) == judge_of("judge-model-2026")
    # The deterministic scores name no judge.
    assert all("metadata" not in s for s in langfuse.scores if s["name"] == "confidence")
