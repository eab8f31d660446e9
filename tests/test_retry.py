"""One retry policy: every remote call waits the way observer/retry.py says."""

from __future__ import annotations

import re

import pytest

from observer.retry import backoff_s, parse_retry_after
from tests.daemon_helpers import ROOT


@pytest.mark.parametrize("attempt", range(1, 12))
def test_backoff_is_equal_jitter_capped(attempt: int) -> None:
    step = min(300.0, 2.0 * 2 ** (attempt - 1))
    waits = [backoff_s(attempt, base_s=2.0, max_s=300.0) for _ in range(200)]
    assert all(step / 2 <= w <= step for w in waits)
    assert max(waits) - min(waits) > step / 10  # jittered: replicas do not retry together


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("120", 120.0), ("0.5", 0.5), ("-3", None), ("soon", None), (None, None), ("", None)],
)
def test_retry_after_values(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds


def test_no_module_writes_its_own_backoff() -> None:
    """Backoff with jitter and Retry-After parsing live in observer/retry.py only."""
    offenders = []
    for path in (ROOT / "observer").rglob("*.py"):
        if path.name == "retry.py":
            continue
        text = path.read_text()
        if re.search(r"^import random|random\.random\(\)|2\.0 \*\*", text, re.M):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
