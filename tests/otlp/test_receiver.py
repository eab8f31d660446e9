"""The event path end to end: the real Langfuse SDK exports an answer's spans to observer's
receiver on loopback, the trace settles on an injected clock, its scores reach the fake
Langfuse with the ids and timestamps of §4 (docs/daemon.md#the-event-path)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from observer.scores import score_id
from tests.fakes.langfuse_server import FakeLangfuse
from tests.instrumentations.test_instrumentations import EXPECTED, FIXTURES
from tests.otlp.harness import (
    Observer,
    basic,
    emit_answer,
    langfuse_client,
    only_spans,
    post,
    protobuf_export,
    start_observer,
    unique_keys,
)


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        unique_keys(server)
        yield server


@pytest.fixture
def observer(fake: FakeLangfuse, tmp_path: Path) -> Iterator[Observer]:
    started = start_observer(fake, tmp_path / "state.sqlite")
    yield started
    started.close()


def scores_of(fake: FakeLangfuse, trace_id: str) -> dict[str, dict[str, object]]:
    return {s["name"]: s for s in fake.live_scores(trace_id)}


def test_an_answer_exported_by_the_sdk_is_scored_once_its_whole_tree_is_in(
    fake: FakeLangfuse, observer: Observer
) -> None:
    """The root and every span's parent are in: scored after `root_grace_s` (0.3 s), not
    the settle time."""
    client = langfuse_client(observer.url, fake.public_key, fake.secret_key)
    trace_id = emit_answer(client)
    assert observer.metric("observer_otlp_spans_total") == 3
    assert observer.metric("observer_otlp_requests_total", result="accepted") >= 1
    observer.settle(0.25)
    assert observer.parts.state.outbox_size() == 0  # within the grace
    observer.settle(0.25)
    observer.deliver()
    scores = scores_of(fake, trace_id)
    assert scores["citation_coverage"]["value"] == 1.0
    assert scores["rerank_top1"]["value"] == pytest.approx(0.91)
    for name, score in scores.items():
        assert score["id"] == score_id(trace_id, name)
    assert observer.metric("observer_otlp_traces_settled_total", reason="whole") == 1
    assert observer.metric("observer_traces_total", outcome="scored") == 1
    # the project the keys belong to, as a polled trace carries it
    assert {s.get("projectId", fake.project_id) for s in scores.values()} == {fake.project_id}


def test_children_before_their_root_wait_for_it(fake: FakeLangfuse, observer: Observer) -> None:
    client = langfuse_client(observer.url, fake.public_key, fake.secret_key)
    trace_id = emit_answer(client, children_first=True)
    assert observer.metric("observer_otlp_requests_total", result="accepted") == 2
    observer.settle(0.5)
    observer.deliver()
    assert scores_of(fake, trace_id)["citation_coverage"]["value"] == 1.0
    assert observer.metric("observer_otlp_traces_settled_total", reason="whole") == 1


def test_a_trace_missing_a_parent_waits_the_settle_time_and_the_parent_rescores_nothing_twice(
    fake: FakeLangfuse, observer: Observer
) -> None:
    """A captured LangChain trace whose chain step (the parent of the retriever) comes
    late: the tree is not whole, so the trace waits `settle_s`, is scored, and the late
    span settles it again after the grace with the same score ids, nothing stored twice."""
    otlp = json.loads((FIXTURES / "langchain.otlp.json").read_text())
    expected = EXPECTED["apps"]["langchain"]["traces"][0]
    trace_id = expected["trace_id"]
    mine = only_spans(otlp, lambda s: s["traceId"] == trace_id)
    step = next(s["spanId"] for s in _spans(mine) if s["name"].startswith("RunnableParallel"))
    first = only_spans(mine, lambda s: s["spanId"] != step)
    assert post(observer.url, protobuf_export(first), basic(fake)).status_code == 200
    observer.settle(1.5)
    assert observer.parts.state.outbox_size() == 0  # a parent is missing: not whole
    observer.settle(0.5)
    assert observer.metric("observer_otlp_traces_settled_total", reason="settled") == 1
    observer.deliver()
    before = scores_of(fake, trace_id)
    assert before["citation_coverage"]["value"] == pytest.approx(expected["coverage"])
    late = only_spans(mine, lambda s: s["spanId"] == step)
    assert post(observer.url, protobuf_export(late), basic(fake)).status_code == 200
    observer.settle(0.5)
    assert observer.metric("observer_otlp_traces_settled_total", reason="whole") == 1
    observer.deliver()
    after = scores_of(fake, trace_id)
    assert {n: (s["id"], s["value"]) for n, s in after.items()} == {
        n: (score_id(trace_id, n), s["value"]) for n, s in before.items()
    }
    assert all(len(v) == 1 for v in fake.scores_by_trace()[trace_id].values())


def test_a_full_outbox_mid_step_defers_the_rest_and_each_trace_is_scored_once(
    fake: FakeLangfuse, observer: Observer
) -> None:
    """Five answers settle in one step (one transaction); the outbox has room for two
    traces' scores: those two are recorded, the other three wait in memory (nothing of
    them written) and are scored as the outbox drains, every score stored once."""
    client = langfuse_client(observer.url, fake.public_key, fake.secret_key)
    trace_ids = [emit_answer(client) for _ in range(5)]
    state = observer.parts.state
    state.max_outbox = 25  # an answer has 11 scores
    observer.settle(0.5)
    assert observer.metric("observer_traces_total", outcome="scored") == 2
    assert observer.metric("observer_traces_total", outcome="deferred") == 3
    assert state.outbox_size() == 22 and len(state.fingerprints(trace_ids)) == 2
    for _ in range(2):
        observer.deliver()
        observer.settle(0.0)  # put back: due again at once
    observer.deliver()
    assert observer.metric("observer_traces_total", outcome="scored") == 5
    stored = fake.scores_by_trace()
    for trace_id in trace_ids:
        assert {n: s["id"] for n, s in scores_of(fake, trace_id).items()} == {
            n: score_id(trace_id, n) for n in scores_of(fake, trace_id)
        }
        assert len(stored[trace_id]) == 11
        assert all(len(v) == 1 for v in stored[trace_id].values())


def _spans(otlp: dict[str, object]) -> list[dict[str, str]]:
    return [
        span
        for resource_spans in otlp["resourceSpans"]  # type: ignore[attr-defined]
        for scope_spans in resource_spans["scopeSpans"]
        for span in scope_spans["spans"]
    ]


def test_a_late_span_rescores_the_trace_with_the_same_score_ids(
    fake: FakeLangfuse, observer: Observer
) -> None:
    """A captured real trace (the Langfuse SDK's @observe app) whose answering generation
    arrives after the rest was settled: first skipped (no answer yet), then scored as a
    reader expects, with the ids of §4; every score written once."""
    otlp = json.loads((FIXTURES / "sdk_typed.otlp.json").read_text())
    expected = EXPECTED["apps"]["sdk_typed"]["traces"][0]
    trace_id, generation = expected["trace_id"], expected["observation_id"]
    mine = only_spans(otlp, lambda s: s["traceId"] == trace_id)
    first = only_spans(mine, lambda s: s["spanId"] != generation)
    assert post(observer.url, protobuf_export(first), basic(fake)).status_code == 200
    observer.settle()
    assert observer.metric("observer_trace_skips_total", reason="no_generation") == 1
    late = only_spans(mine, lambda s: s["spanId"] == generation)
    assert post(observer.url, protobuf_export(late), basic(fake)).status_code == 200
    observer.settle()
    observer.deliver()
    scores = scores_of(fake, trace_id)
    assert scores["citation_coverage"]["value"] == pytest.approx(expected["coverage"])
    assert scores["rerank_top1"]["value"] == pytest.approx(expected["rerank_top1"])
    for name, score in scores.items():
        assert score["id"] == score_id(trace_id, name)
        assert score["observationId"] == generation
    assert all(len(v) == 1 for v in fake.scores_by_trace()[trace_id].values())


def test_wrong_keys_are_refused_and_a_bearer_token_is_taken(
    fake: FakeLangfuse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTLP_TOKEN", "t0ken")
    observer = start_observer(fake, tmp_path / "state.sqlite", secret_env="OTLP_TOKEN")
    try:
        intruder = langfuse_client(observer.url, fake.public_key, "sk-lf-wrong")
        emit_answer(intruder)
        assert observer.metric("observer_otlp_requests_total", result="unauthorized") >= 1
        assert observer.metric("observer_otlp_spans_total") == 0
        import httpx

        from observer.otlp.server import TRACES_PATH

        body = _export_body()
        answer = httpx.post(
            observer.url + TRACES_PATH,
            content=body,
            headers={"Content-Type": "application/x-protobuf", "Authorization": "Bearer t0ken"},
        )
        assert answer.status_code == 200
        refused = httpx.post(
            observer.url + TRACES_PATH,
            content=body,
            headers={"Content-Type": "application/x-protobuf", "Authorization": "Bearer nope"},
        )
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"].startswith("Basic")
    finally:
        observer.close()


def test_a_full_assembly_answers_429_with_retry_after_and_the_sdk_retries(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    """Nothing is dropped: a batch that does not fit is refused whole, the oldest trace is
    settled early, and the exporter's retry after Retry-After is taken."""
    import httpx

    from observer.otlp.server import TRACES_PATH

    observer = start_observer(fake, tmp_path / "state.sqlite", max_bytes=1024 * 1024)
    try:
        receiver = observer.receiver
        big = _export_body(text_bytes=600_000, trace=1)
        auth = {"Authorization": _basic(fake), "Content-Type": "application/x-protobuf"}
        assert httpx.post(observer.url + TRACES_PATH, content=big, headers=auth).status_code == 200
        other = _export_body(text_bytes=600_000, trace=2)
        refused = httpx.post(observer.url + TRACES_PATH, content=other, headers=auth)
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) >= 1
        assert observer.metric("observer_otlp_requests_total", result="throttled") == 1
        assert len(receiver.assembly) == 1  # nothing of the refused batch kept
        observer.settle(0.0)  # the early-settled trace is scored at once
        assert observer.metric("observer_otlp_traces_settled_total", reason="max_bytes") == 1
        again = httpx.post(observer.url + TRACES_PATH, content=other, headers=auth)
        assert again.status_code == 200  # room made: the retry is taken
    finally:
        observer.close()


def test_a_full_outbox_answers_503_until_there_is_room(fake: FakeLangfuse, tmp_path: Path) -> None:
    import httpx

    from observer.otlp.server import TRACES_PATH

    observer = start_observer(fake, tmp_path / "state.sqlite")
    try:
        observer.receiver.outbox_full = True
        observer.parts.state.max_outbox = 0
        auth = {"Authorization": _basic(fake), "Content-Type": "application/x-protobuf"}
        answer = httpx.post(observer.url + TRACES_PATH, content=_export_body(), headers=auth)
        assert answer.status_code == 503 and int(answer.headers["Retry-After"]) >= 1
        assert observer.metric("observer_otlp_requests_total", result="unavailable") == 1
        observer.parts.state.max_outbox = 100_000
        answer = httpx.post(observer.url + TRACES_PATH, content=_export_body(), headers=auth)
        assert answer.status_code == 200
    finally:
        observer.close()


def _basic(fake: FakeLangfuse) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{fake.public_key}:{fake.secret_key}".encode()).decode()


def _export_body(text_bytes: int = 10, trace: int = 1) -> bytes:
    """One root span as an OTLP/protobuf export (what any OTLP exporter sends)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    span = Span(
        trace_id=trace.to_bytes(16, "big"),
        span_id=(trace + 100).to_bytes(8, "big"),
        name="root",
        start_time_unix_nano=1_790_000_000_000_000_000,
        end_time_unix_nano=1_790_000_001_000_000_000,
        attributes=[KeyValue(key="input", value=AnyValue(string_value="x" * text_bytes))],
    )
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
    )
    return bytes(request.SerializeToString())


def test_the_receivers_mark_waits_for_a_trace_still_in_assembly_and_never_moves_back(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    """The alert rules on traces evaluate up to the mark: a trace whose root has not come
    holds it at the trace's first span; a restarted receiver does not move it back."""
    wall = [datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)]
    observer = start_observer(fake, tmp_path / "state.sqlite", clock=lambda: wall[0])
    try:
        client = langfuse_client(observer.url, fake.public_key, fake.secret_key)
        with client.start_as_current_observation(as_type="span", name="rag-query") as root:
            with client.start_as_current_observation(as_type="retriever", name="retrieve"):
                pass
            client.flush()  # the retriever is in; the root is not
            observer.settle()
            mark = observer.parts.state.received_through()
            assert mark is not None and mark < wall[0] - timedelta(minutes=4)  # its start
            root.update(output="done")
        client.flush()
        observer.settle()  # scored
        observer.settle()  # marked at the next step (the marks are a second apart)
        assert observer.parts.state.received_through() == wall[0] - timedelta(seconds=30)
        assert observer.metric("observer_otlp_spans_total") == 2
    finally:
        observer.close()
    before = wall[0] - timedelta(seconds=30)
    wall[0] -= timedelta(minutes=10)  # a restart under a clock set back
    again = start_observer(fake, tmp_path / "state.sqlite", clock=lambda: wall[0])
    try:
        again.settle()
        assert again.parts.state.received_through() == before
    finally:
        again.close()
