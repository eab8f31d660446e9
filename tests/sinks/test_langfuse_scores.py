"""The score sink against the installed SDK and the fake Langfuse: both paths agree, a
changed SDK falls back, and the server's rules hold: one request budget with the reads,
bodies under a million bytes, a suspended project said to be one, configIds that fit,
deletes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langfuse.api.client import LangfuseAPI
from structlog.testing import capture_logs

from observer.errors import AuthRejected, RateLimited, Rejected, Unreachable, UsageSuspended
from observer.langfuse_api import build_api
from observer.langfuse_setup import init_langfuse
from observer.model import ScoreEvent
from observer.sinks import SendResult
from observer.sinks.langfuse_scores import MAX_BODY_BYTES, LangfuseScoreSink, split_by_size
from observer.sources.langfuse import LangfuseSource
from observer.sources.ratelimit import RateLimiter
from observer.telemetry.metrics import Metrics
from tests.fakes.clock import StepClock
from tests.fakes.langfuse_server import HOBBY, FakeLangfuse, RequestRecord


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


def scores(trace: str) -> list[ScoreEvent]:
    kinds: list[tuple[str, float | str, Any]] = [
        ("confidence", 0.72, "NUMERIC"),
        ("ungrounded", 0.0, "BOOLEAN"),
        ("crag_grade", "HIGH", "CATEGORICAL"),
    ]
    return [
        ScoreEvent(
            id=f"{trace}-{name}",
            trace_id=trace,
            observation_id="gen-1",
            name=name,
            value=value,
            data_type=kind,
            comment=f"{name} of {trace}",
            timestamp="2026-11-28T10:00:00.000Z",
            environment="production",
        )
        for name, value, kind in kinds
    ]


def stored(fake: FakeLangfuse, trace: str) -> list[tuple[Any, ...]]:
    keys = ("id", "traceId", "observationId", "name", "value", "dataType", "comment", "environment")
    return sorted(tuple(s.get(k) for k in keys) for s in fake.scores if s["traceId"] == trace)


def test_fast_and_public_paths_store_the_same_scores(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The contract with the installed SDK: its private HTTP layer and api.scores agree."""
    api = build_api(fake.url, fake.public_key, fake.secret_key, 10)
    public_calls: list[int] = []
    create = api.scores.create

    def counted(*args: Any, **kwargs: Any) -> Any:
        public_calls.append(1)
        return create(*args, **kwargs)

    monkeypatch.setattr(api.scores, "create", counted)
    fast = LangfuseScoreSink(api)
    public = LangfuseScoreSink(api, use_generated_client=True)
    assert fast.send(scores("t-fast")).accepted == 3
    assert not public_calls  # the fast path: the SDK's HTTP layer, not api.scores
    assert public.send(scores("t-public")).accepted == 3
    assert len(public_calls) == 1
    fast_rows = [row[2:] for row in stored(fake, "t-fast")]
    public_rows = [row[2:] for row in stored(fake, "t-public")]
    assert fast_rows == [
        tuple(v.replace("t-public", "t-fast") if isinstance(v, str) else v for v in row)
        for row in public_rows
    ]
    timestamps = {s["timestamp"][:19] for s in fake.scores}
    assert timestamps == {"2026-11-28T10:00:00"}


class ChangedLayer:
    """A later SDK's private HTTP client in miniature: the same requests work, but the
    raw `content=` body observer's fast path sends is no longer a parameter."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def request(self, *args: Any, **kwargs: Any) -> Any:
        if "content" in kwargs:
            raise TypeError("request() got an unexpected keyword argument 'content'")
        return self.real.request(*args, **kwargs)


def test_a_changed_sdk_layer_switches_to_the_public_path_for_good(fake: FakeLangfuse) -> None:
    api = build_api(fake.url, fake.public_key, fake.secret_key, 10)
    wrapper = api._client_wrapper
    wrapper.httpx_client = ChangedLayer(wrapper.httpx_client)  # type: ignore[assignment]
    metrics = Metrics()
    sink = LangfuseScoreSink(api, metrics=metrics)
    with capture_logs() as logs:
        assert sink.send(scores("t1")).accepted == 3
        assert sink.send(scores("t2")).accepted == 3
    assert len(stored(fake, "t1")) == len(stored(fake, "t2")) == 3
    # Once: the second send went the public way at once, not through the changed layer.
    assert metrics.value("observer_score_fast_path_fallbacks_total") == 1
    assert [e["event"] for e in logs].count("score_fast_path_disabled") == 1


def test_a_network_failure_is_not_a_changed_layer(fake: FakeLangfuse) -> None:
    api = build_api(fake.url, fake.public_key, fake.secret_key, 2)
    metrics = Metrics()
    sink = LangfuseScoreSink(api, metrics=metrics)
    fake.stop()
    with capture_logs() as logs, pytest.raises(Unreachable):
        sink.send(scores("t1"))
    # A Langfuse outage says nothing about the SDK: the fast path stays.
    assert metrics.value("observer_score_fast_path_fallbacks_total") == 0
    assert "score_fast_path_disabled" not in [e["event"] for e in logs]


# -- the server's other rules (docs/daemon.md) --------------------------------------------


def api_of(fake: FakeLangfuse) -> LangfuseAPI:
    return build_api(fake.url, fake.public_key, fake.secret_key, 10)


def posts(fake: FakeLangfuse) -> list[RequestRecord]:
    return [r for r in fake.requests if r.method == "POST" and r.path == "/api/public/scores"]


def test_a_hobby_project_reads_and_writes_within_one_budget() -> None:
    """Cloud Hobby: 30 requests a minute for observation reads and score posts together.
    The source and the sink share one limiter (25 a minute, bursts of 5): no 429."""
    clock = StepClock()
    with FakeLangfuse(clock=clock.wall) as fake:
        fake.rate_limits = HOBBY
        api = api_of(fake)
        limiter = RateLimiter(25, burst=5, clock=clock.time, sleep=clock.sleep)
        source = LangfuseSource(api, limiter, Metrics(), max_attempts=1)
        sink = LangfuseScoreSink(api, limiter=limiter)
        start = clock.wall() - timedelta(hours=1)
        for i in range(40):
            list(source.pages(start, clock.wall()))
            assert sink.send(scores(f"t{i}")).accepted == 3
        statuses = Counter(r.status for r in fake.requests)
    assert 429 not in statuses and statuses[202] == 40  # reads: 40 listings and their pages
    requests = sum(statuses.values())
    assert clock.now >= (requests - 30) * 60 / 30  # the Hobby rate, not faster


def test_a_429_on_a_score_post_holds_the_reads_too(fake: FakeLangfuse) -> None:
    clock = StepClock()
    api = api_of(fake)
    limiter = RateLimiter(6000, clock=clock.time, sleep=clock.sleep)
    sink = LangfuseScoreSink(api, limiter=limiter)
    fake.fail_next(429, retry_after=30, path_prefix="/api/public/scores", method="POST")
    with pytest.raises(RateLimited) as raised:
        sink.send(scores("t1"))
    assert raised.value.retry_after_s == 30
    source = LangfuseSource(api, limiter, Metrics(), max_attempts=1)
    now = datetime.now(UTC)
    list(source.pages(now - timedelta(hours=1), now))
    assert clock.now >= 30  # the read waited out the post's Retry-After


def test_a_429_on_a_delete_does_not_hold_the_reads(fake: FakeLangfuse) -> None:
    """Deletes have Langfuse's own bucket (score-delete, 50 a day on Hobby): their 429
    says nothing about the budget reads and posts share."""
    clock = StepClock()
    limiter = RateLimiter(6000, clock=clock.time, sleep=clock.sleep)
    sink = LangfuseScoreSink(api_of(fake), limiter=limiter)
    fake.fail_next(429, retry_after=3600, path_prefix="/api/public/scores/", method="DELETE")
    with pytest.raises(RateLimited) as raised:
        sink.delete(scores("t1"))
    assert raised.value.retry_after_s == 3600
    assert limiter.acquire(should_stop=lambda: True)  # a slot at once: nothing held


def test_every_request_of_the_sink_takes_a_slot(fake: FakeLangfuse) -> None:
    clock = StepClock()
    limiter = RateLimiter(60, burst=1, clock=clock.time, sleep=clock.sleep, start=60)
    sink = LangfuseScoreSink(api_of(fake), limiter=limiter)
    sink.send(scores("t1"))  # the burst
    sink.delete(scores("t1"))  # three deletes, one a second
    assert clock.now == pytest.approx(3.0)


def big(trace: str, n: int, comment_bytes: int) -> list[ScoreEvent]:
    return [
        ScoreEvent(
            id=f"{trace}-{i}",
            trace_id=trace,
            observation_id=None,
            name="confidence",
            value=0.5,
            data_type="NUMERIC",
            comment="x" * comment_bytes,
            timestamp="2026-11-28T10:00:00.000Z",
            environment=None,
        )
        for i in range(n)
    ]


def test_a_batch_is_split_below_a_million_bytes_whatever_its_size(fake: FakeLangfuse) -> None:
    fake.max_body_bytes = 1_000_000  # the SDK's cap, below the route's 1 MiB
    sink = LangfuseScoreSink(api_of(fake))
    result = sink.send(big("t1", 5, 300_000))
    assert result == SendResult(accepted=5)
    assert [len(p) for p in fake.score_posts] == [3, 2]
    assert {r.status for r in posts(fake)} == {202}
    assert len(fake.scores) == 5


def test_a_score_too_large_for_any_body_is_rejected_never_posted(fake: FakeLangfuse) -> None:
    fake.max_body_bytes = 1_000_000
    sink = LangfuseScoreSink(api_of(fake), use_generated_client=True)
    batch = [*big("small", 2, 10), *big("huge", 1, 1_000_000)]
    result = sink.send(batch)
    assert (result.accepted, result.rejected) == (2, 1)
    assert "huge" in result.errors[0] and "1,000,000-byte body limit" in result.errors[0]
    assert [s["traceId"] for post in fake.score_posts for s in post] == ["small", "small"]


def test_the_body_limit_is_the_sdks() -> None:
    from langfuse._task_manager import score_consumer

    assert MAX_BODY_BYTES == score_consumer._SCORES_BODY_LIMIT_BYTES


@pytest.mark.parametrize(
    ("sizes", "limit", "parts", "too_large"),
    [
        ([], 100, [], []),
        ([10, 10, 10], 100, [[0, 1, 2]], []),
        ([49, 48], 100, [[0, 1]], []),  # 2 + 49 + 1 + 48 = 100: at the limit is fine
        ([49, 49], 100, [[0], [1]], []),
        ([98, 99, 1], 100, [[0], [2]], [1]),
    ],
)
def test_split_by_size(
    sizes: list[int], limit: int, parts: list[list[int]], too_large: list[int]
) -> None:
    assert split_by_size(sizes, limit) == (parts, too_large)


@given(st.lists(st.integers(1, 120), max_size=40), st.integers(10, 200))
def test_split_keeps_order_and_every_part_fits(sizes: list[int], limit: int) -> None:
    parts, too_large = split_by_size(sizes, limit)
    assert sorted([i for p in parts for i in p] + too_large) == list(range(len(sizes)))
    assert [i for p in parts for i in p] == sorted(i for p in parts for i in p)
    for part in parts:
        assert 2 + sum(sizes[i] for i in part) + len(part) - 1 <= limit
    assert all(sizes[i] + 2 > limit for i in too_large)


def test_a_suspended_project_is_a_usage_problem_not_bad_keys(fake: FakeLangfuse) -> None:
    fake.usage_suspended = True
    for sink in (
        LangfuseScoreSink(api_of(fake)),
        LangfuseScoreSink(api_of(fake), use_generated_client=True),
    ):
        with pytest.raises(UsageSuspended) as raised:
            sink.send(scores("t1"))
        assert isinstance(raised.value, AuthRejected)  # callers stop and wait as for keys
        message = str(raised.value)
        assert "usage limit" in message and "the keys are fine" in message
        assert "rejected the keys" not in message
        assert raised.value.status == 403


def test_wrong_keys_are_still_wrong_keys(fake: FakeLangfuse) -> None:
    api = build_api(fake.url, fake.public_key, "sk-lf-wrong", 10)
    with pytest.raises(AuthRejected) as raised:
        LangfuseScoreSink(api).send(scores("t1"))
    assert not isinstance(raised.value, UsageSuspended)
    assert "rejected the keys" in str(raised.value)


# -- score configs --------------------------------------------------------------------


def config_ids(fake: FakeLangfuse) -> dict[str, str]:
    return {c["name"]: c["id"] for c in fake.score_configs if not c["isArchived"]}


def test_without_configs_scores_go_as_they_always_did(fake: FakeLangfuse) -> None:
    sink = LangfuseScoreSink(api_of(fake), score_configs=True)
    assert sink.send(scores("t1")).accepted == 3
    assert not any("configId" in s for s in fake.scores)
    assert sink.config_ids is not None and len(sink.config_ids) == 0


@pytest.mark.parametrize("generated", [False, True], ids=["fast", "public"])
def test_after_init_langfuse_every_score_carries_its_configs_id(
    fake: FakeLangfuse, generated: bool
) -> None:
    api = api_of(fake)
    assert init_langfuse(api).exit_code == 0
    fake.reset_requests()
    sink = LangfuseScoreSink(api, score_configs=True, use_generated_client=generated)
    with capture_logs() as logs:
        assert sink.send(scores("t1")).accepted == 3
        assert sink.send(scores("t2")).accepted == 3
    ids = config_ids(fake)
    assert {(s["name"], s.get("configId")) for s in fake.scores} == {
        (name, ids[name]) for name in ("confidence", "ungrounded", "crag_grade")
    }
    config_reads = [r for r in fake.requests if r.path == "/api/public/score-configs"]
    assert len(config_reads) == 1  # learnt once
    assert not [e for e in logs if e["log_level"] in ("warning", "error")]


def test_a_score_its_config_would_refuse_goes_without_the_config(fake: FakeLangfuse) -> None:
    """Langfuse's worker drops a score that does not fit the config it names (after a 202):
    such a score is sent as before, without configId, and the mismatch logged once."""
    fake.add_score_config({"name": "confidence", "dataType": "NUMERIC", "maxValue": 0.5})
    fake.add_score_config({"name": "ungrounded", "dataType": "NUMERIC"})  # another type
    crag = fake.add_score_config(
        {
            "name": "crag_grade",
            "dataType": "CATEGORICAL",
            "categories": [{"label": "LOW", "value": 0}, {"label": "HIGH", "value": 2}],
        }
    )
    fake.add_score_config(
        {
            "name": "crag_grade",
            "dataType": "CATEGORICAL",
            "categories": [{"label": "HIGH", "value": 1}],
        },
        archived=True,
    )
    sink = LangfuseScoreSink(api_of(fake), score_configs=True)
    with capture_logs() as logs:
        sink.send(scores("t1"))
        sink.send(scores("t2"))
    by_name = {s["name"]: s.get("configId") for s in fake.scores}
    assert by_name == {"confidence": None, "ungrounded": None, "crag_grade": crag["id"]}
    mismatches = {e["score"]: e["reason"] for e in logs if e["event"] == "score_config_mismatch"}
    assert set(mismatches) == {"confidence", "ungrounded"}
    assert "above" in mismatches["confidence"] and "NUMERIC" in mismatches["ungrounded"]
    assert len([e for e in logs if e["event"] == "score_config_mismatch"]) == 2


def test_unreadable_configs_are_read_again_later(fake: FakeLangfuse) -> None:
    clock = StepClock()
    api = api_of(fake)
    init_langfuse(api)
    sink = LangfuseScoreSink(api, score_configs=True, clock=clock.time, config_retry_s=300)
    fake.fail_next(503, path_prefix="/api/public/score-configs")
    with capture_logs() as logs:
        assert sink.send(scores("t1")).accepted == 3  # the scores go anyway
    assert [e["event"] for e in logs] == ["score_configs_unreadable"]
    assert not any("configId" in s for s in fake.scores)
    clock.now += 100
    sink.send(scores("t2"))
    assert sink.config_ids is None  # not asked again so soon
    clock.now += 200
    sink.send(scores("t3"))
    assert sink.config_ids is not None
    assert all("configId" in s for s in fake.scores if s["traceId"] == "t3")


# -- deletes --------------------------------------------------------------------------


def test_delete_removes_the_scores(fake: FakeLangfuse) -> None:
    sink = LangfuseScoreSink(api_of(fake))
    sink.send([*scores("t1"), *scores("t2")])
    gone = [s for s in scores("t1") if s.name != "crag_grade"]
    assert sink.delete(gone) == SendResult(accepted=2)
    assert fake.score_deletes == [s.id for s in gone]
    assert sorted(s["id"] for s in fake.scores if s["traceId"] == "t1") == ["t1-crag_grade"]
    assert len(stored(fake, "t2")) == 3


def test_a_score_already_gone_counts_as_deleted(fake: FakeLangfuse) -> None:
    fake.fail_next(404, path_prefix="/api/public/scores/t1-confidence", method="DELETE")
    sink = LangfuseScoreSink(api_of(fake))
    assert sink.delete(scores("t1")) == SendResult(accepted=3)
    assert fake.score_deletes == ["t1-ungrounded", "t1-crag_grade"]


@pytest.mark.parametrize(
    ("status", "error"),
    [(503, Unreachable), (401, AuthRejected), (400, Rejected)],
)
def test_delete_errors_are_translated_like_sends(
    fake: FakeLangfuse, status: int, error: type[Exception]
) -> None:
    fake.fail_next(status, path_prefix="/api/public/scores/", method="DELETE")
    with pytest.raises(error):
        LangfuseScoreSink(api_of(fake)).delete(scores("t1"))
