"""Shared fixtures: an environment free of the developer's own observer settings."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see only the variables they set themselves."""
    for name in list(os.environ):
        if name.startswith(("OBSERVER_", "LANGFUSE_")):
            monkeypatch.delenv(name)
