"""A failed score push is logged and counted as what it was (issue 17): a 5xx is a
`server_error` with its status, no answer at all is `unreachable`; both are retried alike.
Through the real dispatcher, sink and SDK against the fake Langfuse (and a closed port)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from observer.errors import RemoteError, Unreachable
from observer.langfuse_api import build_api
from observer.sinks.dispatcher import Dispatcher, push_error_kind
from observer.sinks.langfuse_scores import LangfuseScoreSink
from observer.state import State
from observer.telemetry.metrics import Metrics
from tests.fakes.langfuse_server import FakeLangfuse
from tests.servers import free_port
from tests.sinks.test_dispatcher import Clock, scores

T = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
PUSH_ERRORS = "observer_score_push_errors_total"


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


def failed_push(url: str, fake: FakeLangfuse, tmp_path: Path) -> tuple[dict[str, Any], Metrics]:
    """One push that fails; its `score_push_failed` event, then the retry once it is due."""
    state, metrics, clock = State(tmp_path / "s.sqlite"), Metrics(), Clock(T)
    try:
        state.record_trace("a", "f", T, scores("a"), T)
        sink = LangfuseScoreSink(build_api(url, fake.public_key, fake.secret_key, 2))
        dispatcher = Dispatcher(state, sink, metrics, clock=clock)
        with capture_logs() as logs:
            assert dispatcher.send_due() == 0
        (event,) = [e for e in logs if e["event"] == "score_push_failed"]
        assert state.outbox_size() == 3  # kept for the retry
        assert 0 < event["retry_in_s"] <= 4  # the first backoff step, whatever the kind
        assert dispatcher.send_due() == 0  # not due yet: nothing sent before the backoff
        clock.now += 600
        if url == fake.url:
            assert dispatcher.send_due() == 3  # Langfuse is back: delivered
    finally:
        state.close()
    return event, metrics


def test_a_score_post_answered_500_is_a_server_error_with_its_status(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    fake.fail_next(500, path_prefix="/api/public/scores")
    event, metrics = failed_push(fake.url, fake, tmp_path)
    assert event["kind"] == "server_error"
    assert event["status"] == 500
    assert event["error"] == "pushing scores: Langfuse answered 500"
    assert metrics.value(PUSH_ERRORS, kind="server_error") == 1
    assert metrics.value(PUSH_ERRORS, kind="unreachable") == 0


def test_no_answer_at_all_is_unreachable_without_a_status(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    event, metrics = failed_push(f"http://127.0.0.1:{free_port()}", fake, tmp_path)
    assert event["kind"] == "unreachable"
    assert "status" not in event
    assert metrics.value(PUSH_ERRORS, kind="unreachable") == 1
    assert metrics.value(PUSH_ERRORS, kind="server_error") == 0


def test_every_kind_exists_at_zero_from_the_start(tmp_path: Path) -> None:
    state, metrics = State(tmp_path / "s.sqlite"), Metrics()
    try:
        Dispatcher(
            state, LangfuseScoreSink(build_api("http://127.0.0.1:9", "pk", "sk", 1)), metrics
        )
    finally:
        state.close()
    for kind in ("rate_limited", "auth", "server_error", "unreachable"):
        assert metrics.value(PUSH_ERRORS, kind=kind) == 0


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (Unreachable("pushing scores: Langfuse answered 502", 502), "server_error"),
        (Unreachable("pushing scores: Langfuse answered 503", 503), "server_error"),
        (Unreachable("pushing scores: Langfuse answered 408", 408), "server_error"),
        (Unreachable("pushing scores: timed out"), "unreachable"),
        (Unreachable("pushing scores: ConnectError: refused"), "unreachable"),
        (RemoteError("something else"), "unreachable"),
    ],
)
def test_push_error_kind(error: RemoteError, kind: str) -> None:
    assert push_error_kind(error) == kind
