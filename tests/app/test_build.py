"""`app.build` and `Parts`: what a build opens is closed, by the `with` block or when
the build itself fails half-way (a bad chunk store setting, Langfuse keys missing)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from observer import app
from observer.app import parts as wiring
from observer.background import Deadline
from observer.config import ConfigError
from observer.state import State
from observer.telemetry.metrics import Metrics
from observer.telemetry.otel import Telemetry
from tests.daemon_helpers import DEMO_LOOKBACK_S, configure, demo_observations
from tests.fakes.langfuse_server import SCORES_PATH, FakeLangfuse, RequestRecord


class RecordedState(State):
    """A State that says whether it was closed; every one opened is kept."""

    opened: ClassVar[list[RecordedState]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.closed = False
        RecordedState.opened.append(self)

    def close(self) -> None:
        self.closed = True
        super().close()


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RecordedState]]:
    RecordedState.opened = []
    monkeypatch.setattr(wiring, "State", RecordedState)
    yield RecordedState.opened


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {
                "OBSERVER_RESOLVER__KIND": "hook",
                "OBSERVER_RESOLVER__HOOK": "tests.resolver.hooks:NOT_CALLABLE",
            },
            "resolver",
        ),
        ({"LANGFUSE_SECRET_KEY": ""}, "LANGFUSE_SECRET_KEY"),
    ],
    ids=["bad-resolver", "no-secret-key"],
)
def test_a_build_that_fails_after_opening_the_state_closes_it(
    env: dict[str, str],
    says: str,
    opened: list[RecordedState],
    fake: FakeLangfuse,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    settings = configure(monkeypatch, fake, **env)
    with pytest.raises(ConfigError, match=says):
        app.build(settings, state_path=tmp_path / "s.sqlite")
    assert len(opened) == 1 and opened[0].closed


def test_the_with_block_closes_the_state_and_a_second_close_does_nothing(
    opened: list[RecordedState], fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, fake)
    with app.build(settings, state_path=tmp_path / "s.sqlite") as parts:
        assert parts.state is opened[0] and not opened[0].closed
        parts.state.outbox_size()
    assert opened[0].closed
    parts.close()  # already closed: nothing happens
    parts.state.close()  # what the tests did before: still allowed


def test_a_telemetry_passed_in_stays_the_callers(
    opened: list[RecordedState], fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, fake)
    metrics = Metrics()
    telemetry = Telemetry()
    shut: list[float] = []
    monkeypatch.setattr(telemetry, "shutdown", lambda timeout_s=5.0: shut.append(timeout_s) or True)
    state = tmp_path / "s.sqlite"
    with app.build(settings, state_path=state, metrics=metrics, telemetry=telemetry):
        pass
    assert opened[0].closed and shut == []


def test_a_stop_that_abandons_a_thread_leaves_the_state_open(
    opened: list[RecordedState], fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A score post still unanswered at the stop's deadline: its thread is abandoned, and
    the state file is not closed under it (its hold alone is given up: another process
    may take the file)."""
    settings = configure(
        monkeypatch,
        fake,
        OBSERVER_RUN__SHUTDOWN_GRACE_S="0.5",
        OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S,  # the demo's days
    )
    fake.add_observations(demo_observations())
    answer = threading.Event()

    def stall_score_posts(record: RequestRecord) -> None:
        if record.method == "POST" and record.path == SCORES_PATH:
            answer.wait(60)  # the answer held back until the test has looked

    fake.on_request = stall_score_posts
    with app.build(settings, state_path=tmp_path / "s.sqlite") as parts:
        app.run_once(parts)
    try:
        assert not opened[0].closed
        other = State(tmp_path / "s.sqlite")
        try:
            other.hold()  # given up: no "in use by" refusal
        finally:
            other.close()
    finally:
        answer.set()
        parts.dispatcher.shutdown(Deadline.within(30))
        parts.state.close()
