"""The request budget end to end (docs/daemon.md, the request budget): a first
`run --once` on defaults over an hour of a busy project, against the service-like fake
Langfuse on loopback, self-hosted (no limit) and on Cloud Hobby (30 requests a minute).

Before the budget adapted, reads and 100-score posts shared a fixed 25 a minute: such an
hour (then 375 answers, 3,105 scores) took 32 posts and 40 requests, delivered 900
scores within the grace and exited 3, self-hosted too. Five copies of the demo are 385
answers and 4,160 scores now (its refusals and their scores among them)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from observer import app
from observer.config import Settings, load_settings
from observer.telemetry.logging import configure_logging
from observer.views.passes import pass_table
from tests.daemon_helpers import configure, packed_traces
from tests.fakes.langfuse_server import HOBBY, SERVICE_LIKE, FakeLangfuse

DEMO_TRACES = 82  # a copy of the demo: 77 answers, 847 scores


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse(behaviour=SERVICE_LIKE) as server:
        yield server


def an_hour(fake: FakeLangfuse, copies: int) -> datetime:
    """`copies` of the demo's traces spread over the hour before now; returns now."""
    now = datetime.now(UTC)
    spacing = 3400 / (DEMO_TRACES * copies)
    fake.add_observations(packed_traces(now - timedelta(seconds=3560), spacing, copies, "hour"))
    return now


def defaults(
    monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse, batch_size: int | None = None
) -> Settings:
    """The shipped defaults but the fake's keys: no request cap, no batch size (unless
    `batch_size`), a first look back of an hour, a grace of 20 s."""
    configure(monkeypatch, fake)
    for key in (
        "OBSERVER_SOURCE__REQUESTS_PER_MINUTE",
        "OBSERVER_SOURCE__LOOKBACK_S",
        "OBSERVER_SOURCE__MAX_ATTEMPTS",
        "OBSERVER_SINK__MAX_BACKOFF_S",
        "OBSERVER_RUN__SHUTDOWN_GRACE_S",
        "OBSERVER_LOG__LEVEL",
    ):
        monkeypatch.delenv(key)
    settings = load_settings()
    assert settings.source.requests_per_minute is None
    assert settings.sink.batch_size == batch_size
    return settings


def general_api(fake: FakeLangfuse) -> Counter[int]:
    """Statuses of the requests Langfuse Cloud counts in its General API bucket."""
    return Counter(r.status for r in fake.requests if r.path != "/api/public/health")


def test_a_busy_hour_self_hosted_is_delivered_within_the_grace(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    now = an_hour(fake, copies=5)
    settings = defaults(monkeypatch, fake)
    with app.build(settings, state_path=tmp_path / "s.sqlite") as parts:
        result = app.run_once(parts, now)
        assert parts.budget is not None and not parts.budget.settled
    assert result.exit_code == 0, result.error
    assert result.passed is not None and result.passed.scored == 385
    assert len(fake.live_scores()) == result.passed.scores == 4160
    posts = [r for r in fake.requests if r.method == "POST"]
    assert len(posts) <= 4  # as many scores a POST as fit in a million bytes, not 100
    assert 429 not in general_api(fake)


def test_the_same_hour_on_hobby_fits_in_its_first_minute(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.rate_limits = HOBBY
    now = an_hour(fake, copies=5)
    with app.build(defaults(monkeypatch, fake), state_path=tmp_path / "s.sqlite") as parts:
        result = app.run_once(parts, now)
    assert result.exit_code == 0, result.error
    assert len(fake.live_scores()) == 4160
    assert 429 not in general_api(fake) and sum(general_api(fake).values()) < 29


def test_on_hobby_with_a_hundred_scores_a_post_it_exits_3_naming_the_budget(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same hour with `sink.batch_size` = 100 (the old fixed size): 32 posts and the
    reads are more requests than Hobby's window lets through (29). One 429 settles the
    budget at 25 a minute; its Retry-After outlasts the grace. (Measured without the cap:
    ten times the traffic, 4,500 answers, does the same: docs/daemon.md.)"""
    fake.rate_limits = HOBBY
    now = an_hour(fake, copies=5)
    monkeypatch.setenv("OBSERVER_SINK__BATCH_SIZE", "100")
    settings = defaults(monkeypatch, fake, batch_size=100)
    configure_logging("console", "info")  # conftest puts it back to warning after the test
    with capture_logs() as logs, app.build(settings, state_path=tmp_path / "s.sqlite") as parts:
        result = app.run_once(parts, now)
        assert parts.budget is not None
        assert parts.budget.settled_limit == 30 and parts.budget.per_minute == 25
        assert parts.metrics.value("observer_request_budget_per_minute") == 25
        assert result.passed is not None
        keys, values = pass_table("t", result.report, {}).columns
        rows = dict(zip(keys.cells, values.cells, strict=True))
    assert result.exit_code == 3
    assert result.error is not None and "request budget held delivery back" in result.error
    assert "25/min (Langfuse's limit 30/min less a sixth)" in result.error
    assert "held delivery back" in rows["request budget"]
    assert "25/min" in rows["request budget"]
    settled = [e for e in logs if e["event"] == "request_budget_settled"]
    assert [(e["limit"], e["pace"]) for e in settled] == [(30.0, 25.0)]
    assert general_api(fake)[429] == 1
    assert 0 < len(fake.live_scores()) < result.passed.scores
    assert result.undelivered == result.passed.scores - len(fake.live_scores())


@pytest.mark.parametrize(
    ("source", "sink", "says"),
    [
        ({}, {}, ["adaptive from 25 requests/min", "up to 60,000/min", "1,000,000 bytes"]),
        (
            {"requests_per_minute": 20},
            {"batch_size": 100},
            ["at 20 requests/min, the cap", "limit less a sixth", "at most 100 scores"],
        ),
    ],
)
def test_check_says_the_budget(
    source: dict[str, float], sink: dict[str, int], says: list[str]
) -> None:
    from observer.views.check import check_table

    settings = Settings.model_validate({"source": source, "sink": sink})
    keys, values = check_table(settings, []).columns
    row = dict(zip(keys.cells, values.cells, strict=True))["request budget"]
    assert all(part in str(row) for part in says), row
