"""docs/judge.md sampling: deterministic by trace id, risk oversampling, budget caps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.judge.sampler import SamplerParams, decide, hash_fraction
from tests.signals.conftest import signals_of

SAFE = signals_of("Everything here is cited properly [1].", scores=(0.95, None, None))
RISKY = signals_of("Nothing here is cited at all, sadly.", scores=(0.1, None, None))
ON = SamplerParams(enabled=True, rate=0.1, risk_rate=0.5)


@given(st.text())
def test_hash_fraction_is_in_unit_interval(trace_id: str) -> None:
    assert 0.0 <= hash_fraction(trace_id) < 1.0


def test_same_decision_on_every_replica_and_restart() -> None:
    ids = [f"trace-{i}" for i in range(500)]
    first = [decide(t, SAFE, ON, 0, 0) for t in ids]
    second = [
        decide(t, SAFE, SamplerParams(enabled=True, rate=0.1, risk_rate=0.5), 0, 0) for t in ids
    ]
    assert first == second


def test_rate_is_respected() -> None:
    chosen = sum(decide(f"t{i}", SAFE, ON, 0, 0) == "sampled" for i in range(20_000))
    assert 0.09 < chosen / 20_000 < 0.11


def test_risky_traces_are_oversampled() -> None:
    picked = [decide(f"t{i}", RISKY, ON, 0, 0) for i in range(20_000)]
    share = sum(d in ("sampled", "risk") for d in picked) / len(picked)
    assert 0.48 < share < 0.52
    assert "risk" in picked
    no_risk = SamplerParams(enabled=True, rate=0.1, risk_oversampling=False)
    share_off = sum(decide(f"t{i}", RISKY, no_risk, 0, 0) != "not_sampled" for i in range(20_000))
    assert 0.09 < share_off / 20_000 < 0.11


@pytest.mark.parametrize(
    ("judged", "tokens", "expected"),
    [
        (0, 0, "sampled"),
        (200, 0, "over_budget"),
        (0, 2_000_000, "over_budget"),
        (199, 1_999_999, "sampled"),
    ],
    ids=["within", "hourly_cap", "daily_tokens", "just_under"],
)
def test_budget_caps(judged: int, tokens: int, expected: str) -> None:
    everything = SamplerParams(enabled=True, rate=1.0)
    assert decide("t", SAFE, everything, judged, tokens) == expected


def test_disabled_and_not_sampled() -> None:
    assert decide("t", RISKY, SamplerParams(enabled=False, rate=1.0), 0, 0) == "disabled"
    nobody = SamplerParams(enabled=True, rate=0.0, risk_rate=0.0)
    assert decide("t", RISKY, nobody, 0, 0) == "not_sampled"


def test_traces_citing_missing_or_stale_chunks_are_oversampled() -> None:
    flagged = [decide(f"t{i}", SAFE, ON, 0, 0, flagged=True) for i in range(20_000)]
    assert 0.48 < sum(d != "not_sampled" for d in flagged) / len(flagged) < 0.52
    # The plain sample is part of the risky one: oversampling only adds traces.
    plain = [decide(f"t{i}", SAFE, ON, 0, 0) for i in range(20_000)]
    assert all(f != "not_sampled" for f, p in zip(flagged, plain, strict=True) if p == "sampled")
