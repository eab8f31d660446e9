"""The daemon's hourly read of the judge's agreement with people: into the metrics and the
history's samples, which the default rule judge_agreement_low reads."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from observer import app
from observer.alerts.engine import AlertState, evaluate
from observer.alerts.rules import default_window_rules
from observer.judge.agreement_refresh import AgreementRefresh
from observer.judge.annotations import AnnotationReader, read_agreement
from observer.sources.ratelimit import RateLimiter
from observer.state import State
from observer.state.rows import Row
from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import configure
from tests.fakes.clock import SimulatedClock
from tests.fakes.langfuse_server import FakeLangfuse
from tests.judge.test_judge_agreement import labelled


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


def refresh_on(
    fake: FakeLangfuse,
    monkeypatch: pytest.MonkeyPatch,
    state: State,
    clock: SimulatedClock,
    **kw: int,
) -> tuple[AgreementRefresh, Metrics]:
    settings = configure(monkeypatch, fake, OBSERVER_JUDGE__HUMAN_SCORE="faithful")
    reader = AnnotationReader(app.build_api(settings), RateLimiter(None))
    metrics = Metrics()
    refresh = AgreementRefresh(
        lambda start, end: read_agreement(reader, settings.judge, "faithful", start, end),
        metrics,
        state.history.add_samples,
        clock=clock,
        **kw,
    )
    return refresh, metrics


def test_an_hourly_read_sets_the_metrics_and_a_kappa_sample(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    labelled(fake, now)
    state = State(tmp_path / "s.sqlite")
    clock = SimulatedClock(now)
    refresh, metrics = refresh_on(fake, monkeypatch, state, clock)
    refresh.step()
    assert metrics.value("observer_judge_pairs") == 30
    kappa = metrics.value("observer_judge_agreement", measure="kappa")
    assert kappa == pytest.approx(260 / 410)
    samples = state.history.rows(0, now.timestamp() + 1, {"judge_kappa", "judge_pairs"})
    found = {name: value for r in samples for name, value in r.values.items()}
    assert found == {"judge_pairs": 30.0, "judge_kappa": pytest.approx(260 / 410)}
    requests = len(fake.requests)
    clock.set(now + timedelta(minutes=59))
    refresh.step()
    assert len(fake.requests) == requests  # within the hour: nothing read
    clock.set(now + timedelta(hours=1))
    refresh.step()
    assert len(fake.requests) > requests
    state.close()


def test_under_thirty_pairs_there_is_no_kappa_sample_and_no_figure_is_made_up(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    state = State(tmp_path / "s.sqlite")
    refresh, metrics = refresh_on(fake, monkeypatch, state, SimulatedClock(now))
    refresh.step()
    assert metrics.value("observer_judge_pairs") == 0
    assert math.isnan(metrics.value("observer_judge_agreement", measure="kappa"))
    rows = state.history.rows(0, now.timestamp() + 1, {"judge_kappa", "judge_pairs"})
    assert [sorted(r.values) for r in rows] == [["judge_pairs"]]
    state.close()


def test_langfuse_down_is_logged_and_tried_next_hour(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = State(tmp_path / "s.sqlite")
    refresh, _ = refresh_on(fake, monkeypatch, state, SimulatedClock(datetime.now(UTC)))
    fake.fail_next(401, count=10)
    assert refresh.step() is False  # never raises
    assert refresh.found is None
    state.close()


def test_a_low_kappa_pages_through_the_default_rule() -> None:
    (rule,) = [r for r in default_window_rules() if r.name == "judge_agreement_low"]
    at = 1_800_000_000.0
    low = evaluate(rule, [Row(at - 600, {"judge_kappa": 0.25})], {}, at)
    assert low.states[()].status == "firing" and low.states[()].severity == "page"
    fine = evaluate(rule, [Row(at - 600, {"judge_kappa": 0.7})], {(): AlertState()}, at)
    assert fine.states[()].status == "ok"


def checks(parts: app.Parts) -> list[str]:
    return [w.name for w in parts.judge_checks]


def test_the_daemon_reads_it_only_with_judge_human_score(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = configure(monkeypatch, fake)
    with app.build(settings, mode="solo", state_path=tmp_path / "a.sqlite") as parts:
        assert checks(parts) == []
    monkeypatch.setenv("OBSERVER_JUDGE__HUMAN_SCORE", "faithful")
    settings = configure(monkeypatch, fake)
    with app.build(settings, mode="solo", state_path=tmp_path / "b.sqlite") as parts:
        assert checks(parts) == ["judge-agreement"]
    with app.build(settings, mode="once", state_path=tmp_path / "c.sqlite") as parts:
        assert checks(parts) == []


def test_a_member_that_does_not_evaluate_reads_nothing(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In a fleet only the member evaluating the rules reads: its samples are the ones read,
    and N members would spend N times the request budget on the same figures."""
    labelled(fake, datetime.now(UTC))
    state = State(tmp_path / "s.sqlite")
    settings = configure(monkeypatch, fake, OBSERVER_JUDGE__HUMAN_SCORE="faithful")
    reader = AnnotationReader(app.build_api(settings), RateLimiter(None))
    evaluating = False
    refresh = AgreementRefresh(
        lambda start, end: read_agreement(reader, settings.judge, "faithful", start, end),
        Metrics(),
        state.history.add_samples,
        active=lambda: evaluating,
    )
    fake.reset_requests()
    refresh.step()
    assert refresh.found is None and fake.requests == []
    evaluating = True
    refresh.step()
    assert refresh.found is not None and refresh.found.pairs == 30
    state.close()
