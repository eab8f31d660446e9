"""Shared fixtures: an environment free of the developer's own observer settings.

Hypothesis runs under a profile named by HYPOTHESIS_PROFILE (`dev` when unset;
`.ci/run` sets `ci`): the number of examples is the profile's, a test that needs
more or fewer takes a multiple of it (tests/budget.py), and neither profile fails a
test because a busy machine ran an example slowly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from observer.telemetry.logging import configure_logging
from tests.fakes.openai_stub import OpenAIStub

# Timing is never what a property is about: no deadline, no too_slow health check, in both.
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,  # the same examples on every run: a failure is the code's, and repeats
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    max_examples=50,  # new examples on every run, and the failures found kept in .hypothesis/
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or "dev")

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
