"""Notifications as the engine would build them, for the notifier and delivery tests."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from observer.state.rows import Example, Notification, Segment, Triage

TRACE_URLS = tuple(f"https://langfuse.example.com/project/p1/traces/trace-{i}" for i in range(1, 8))
RUNBOOK = "https://runbooks.example.com/observer/coverage-low"


def firing(**changes: Any) -> Notification:
    """A window rule firing now in production/billing: p50 coverage 0.42 < 0.6 over 15 min."""
    now = datetime.now(UTC).replace(microsecond=0)
    base = Notification(
        id=str(uuid.uuid4()),
        dedup_key="observer:coverage_low:environment=production,query_type=billing",
        rule="coverage_low",
        kind="window",
        state="firing",
        severity="page",
        group=(("environment", "production"), ("query_type", "billing")),
        summary="Citation coverage low in production/billing",
        description="p50 coverage over the last 15m is 0.42, below 0.6 (120 traces).",
        started_at=now - timedelta(minutes=10),
        sent_at=now,
        signal="coverage",
        aggregate="p50",
        value=0.42,
        op="<",
        threshold=0.6,
        window_s=900.0,
        samples=120,
        trace_urls=TRACE_URLS[:3],
        runbook_url=RUNBOOK,
    )
    return dataclasses.replace(base, **changes)


def resolved(of: Notification, **changes: Any) -> Notification:
    """The resolve message of `of`: same rule, group and dedup key, a new id, ended now."""
    now = datetime.now(UTC).replace(microsecond=0)
    return dataclasses.replace(
        of, id=str(uuid.uuid4()), state="resolved", sent_at=now, ended_at=now, **changes
    )


TRIAGE = Triage(
    samples=600,
    bad=180,
    bad_when="numeric_grounding < 0.95",
    segments=(
        Segment(
            where=(("release", "2026.12.03-rc2"), ("query_type", "pricing")),
            samples=150,
            bad=133,
            bad_rate=133 / 150,
            rest_bad_rate=47 / 450,
            value=0.556,
            rest_value=0.984,
            share=133 / 180,
            excess=133 - 150 * 47 / 450,
        ),
    ),
    onset=datetime(2026, 12, 3, 9, 10, tzinfo=UTC).timestamp(),
    layer="generation",
    layer_shares=(("generation", 0.97), ("retrieval", 0.03)),
    examples=(Example("trace-9", "p1", 0.5),),
)


def triaged(**changes: Any) -> Notification:
    """`firing()` with the triage of a release that broke one query type's answers."""
    return firing(triage=TRIAGE, layer="generation", **changes)
