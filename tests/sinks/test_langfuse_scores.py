"""The score sink against the installed SDK: both paths agree, and a changed SDK falls back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from observer.errors import Unreachable
from observer.langfuse_api import build_api
from observer.model import ScoreEvent
from observer.sinks.langfuse_scores import LangfuseScoreSink
from observer.telemetry.metrics import Metrics
from tests.fakes.langfuse_server import FakeLangfuse


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


def test_fast_and_public_paths_store_the_same_scores(fake: FakeLangfuse) -> None:
    """The contract with the installed SDK: its private HTTP layer and api.scores agree."""
    api = build_api(fake.url, fake.public_key, fake.secret_key, 10)
    fast = LangfuseScoreSink(api)
    public = LangfuseScoreSink(api, use_generated_client=True)
    assert fast.fast and not public.fast
    assert fast.send(scores("t-fast")).accepted == 3
    assert public.send(scores("t-public")).accepted == 3
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
    assert not sink.fast
    assert len(stored(fake, "t1")) == len(stored(fake, "t2")) == 3
    assert metrics.value("observer_score_fast_path_fallbacks_total") == 1
    assert [e["event"] for e in logs].count("score_fast_path_disabled") == 1


def test_a_network_failure_is_not_a_changed_layer(fake: FakeLangfuse) -> None:
    api = build_api(fake.url, fake.public_key, fake.secret_key, 2)
    sink = LangfuseScoreSink(api)
    fake.stop()
    with pytest.raises(Unreachable):
        sink.send(scores("t1"))
    assert sink.fast  # a Langfuse outage says nothing about the SDK
