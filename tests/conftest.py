"""Shared fixtures: an environment free of the developer's own observer settings."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from observer.telemetry.logging import configure_logging
from tests.fakes.openai_stub import OpenAIStub

# Tests assert on behaviour and metrics; log lines only below warnings are noise.
configure_logging("console", "warning")


@pytest.fixture(autouse=True)
def logging_as_configured_here() -> Iterator[None]:
    """Commands configure logging for themselves; the next test starts from this file's."""
    yield
    configure_logging("console", "warning")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see only the variables they set themselves."""
    for name in list(os.environ):
        if name == "OBSERVER_REQUIRE_SERVERS":
            continue  # .ci/run's own switch: a missing server fails instead of skipping
        if name.startswith(("OBSERVER_", "LANGFUSE_", "OPENAI_")):
            monkeypatch.delenv(name)


@pytest.fixture
def judge_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStub]:
    """The OpenAI-compatible stub, with the judge's environment pointing at it."""
    with OpenAIStub() as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OBSERVER_JUDGE_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OBSERVER_JUDGE_MODEL", "stub-judge")
        yield server
