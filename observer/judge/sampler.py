"""Which traces the judge sees (docs/judge.md). Pure.

Deterministic by trace id: the hash of the id, not a random draw, decides,
so every replica and every restart agree on the sample. Risky traces
(ungrounded, band LOW, unsupported numbers, or citing chunks the resolver
found missing or stale) are sampled at the higher `risk_rate`. Budget caps
come last: a chosen trace over budget is counted `over_budget`, not judged.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from observer.model import Band, Signals

Decision = Literal["sampled", "risk", "not_sampled", "over_budget", "disabled"]


@dataclass(frozen=True, slots=True)
class SamplerParams:
    enabled: bool = False
    rate: float = 0.05
    risk_oversampling: bool = True
    risk_rate: float = 0.5
    max_judged_per_hour: int = 200
    max_tokens_per_day: int = 2_000_000


def hash_fraction(trace_id: str) -> float:
    """A number in [0, 1) fixed by the trace id."""
    digest = hashlib.sha256(trace_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def is_risky(signals: Signals, flagged: bool = False) -> bool:
    """`flagged`: the resolver found missing or stale cited chunks."""
    return (
        flagged
        or signals.ungrounded
        or signals.band is Band.LOW
        or bool(signals.numeric.unsupported)
    )


def decide(
    trace_id: str,
    signals: Signals,
    params: SamplerParams,
    judged_this_hour: int,
    tokens_today: int,
    tokens_needed: int = 0,
    flagged: bool = False,
) -> Decision:
    """`tokens_today` counts spent and reserved tokens; `tokens_needed` what this trace
    is expected to cost: a trace that would take the day past its cap is over budget.
    `flagged`: the resolver found missing or stale cited chunks (risky)."""
    if not params.enabled:
        return "disabled"
    draw = hash_fraction(trace_id)
    chosen = draw < params.rate
    risky = (
        params.risk_oversampling
        and is_risky(signals, flagged)
        and draw < max(params.rate, params.risk_rate)
    )
    if not chosen and not risky:
        return "not_sampled"
    if (
        judged_this_hour >= params.max_judged_per_hour
        or tokens_today >= params.max_tokens_per_day
        or tokens_today + tokens_needed > params.max_tokens_per_day
    ):
        return "over_budget"
    return "sampled" if chosen else "risk"
