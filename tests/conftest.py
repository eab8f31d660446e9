"""Shared fixtures: an environment free of the developer's own observer settings."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from observer.telemetry.logging import configure_logging

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
