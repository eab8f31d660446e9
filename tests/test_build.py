"""`app.build` and `Parts`: what a build opens is closed, by the `with` block or when
the build itself fails half-way (a bad chunk store setting, Langfuse keys missing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from observer import app
from observer.app import parts as wiring
from observer.config import ConfigError
from observer.state import State
from observer.telemetry.metrics import Metrics
from observer.telemetry.otel import setup_telemetry
from tests.daemon_helpers import configure
from tests.fakes.langfuse_server import FakeLangfuse


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
    telemetry = setup_telemetry()
    shut: list[float] = []
    monkeypatch.setattr(telemetry, "shutdown", lambda timeout_s=5.0: shut.append(timeout_s) or True)
    state = tmp_path / "s.sqlite"
    with app.build(settings, state_path=state, metrics=metrics, telemetry=telemetry):
        pass
    assert opened[0].closed and shut == []


def test_left_open_nothing_is_closed(
    opened: list[RecordedState], fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What the daemon does when a poll thread was abandoned in flight: the state stays."""
    settings = configure(monkeypatch, fake)
    with app.build(settings, state_path=tmp_path / "s.sqlite") as parts:
        parts.leave_open()
    assert not opened[0].closed
    parts.state.close()
