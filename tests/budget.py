"""A hypothesis test's number of examples: a multiple of the profile's (tests/conftest.py).

`@settings(scaled(5))` runs five times the profile's `max_examples` (200 under `ci`,
50 under `dev`), `scaled(0.2)` a fifth of it. A test says why it needs a multiple:
more where the cases that matter are rare among the drawn ones (an oracle that must
agree at boundaries few draws hit), fewer where each example is a state file, a full
pass or a daemon run.
"""

from __future__ import annotations

from hypothesis import settings

__all__ = ["scaled"]


def scaled(times: float) -> settings:
    """The profile's settings with `times` its `max_examples` (at least one example)."""
    return settings(max_examples=max(1, round(settings.default.max_examples * times)))
