"""Shared setup for tests of the daemon against the fake Langfuse."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from observer import app
from observer.app import demo_traces_path
from observer.config import Settings, load_settings
from observer.records import parse_record
from observer.times import iso, parse_time
from tests.fakes.langfuse_server import FakeLangfuse

ROOT = Path(__file__).resolve().parent.parent


def _demo_lookback_s() -> str:
    """A lookback from now that reaches the first bundled trace a day early, however long
    after their dates the tests run (a fixed number of days stops reaching them one day)."""
    first = min(parse_time(o["startTime"]) or datetime.now(UTC) for o in app.demo_observations())
    return str(((datetime.now(UTC) - first).days + 2) * 86400)  # whole days


DEMO_LOOKBACK_S = _demo_lookback_s()


def demo_observations() -> list[dict[str, Any]]:
    return [json.loads(line) for line in demo_traces_path().read_text().splitlines()]


@dataclass(frozen=True)
class DemoCounts:
    """What one pass over the bundled traces must give, derived from the pure core."""

    traces: int
    scored: int
    skipped: int
    scores: int


def demo_counts(read: list[dict[str, Any]] | None = None) -> DemoCounts:
    """Map and score every bundled trace (or every trace `read`: the demo's,
    app.demo_observations()) without the daemon, so tests follow the demo as it grows."""
    from observer.mapping.convention import map_trace
    from observer.mapping.rules import Skip
    from observer.scores import score_events
    from observer.signals import compute

    settings = Settings()
    rules, params = settings.mapping_rules(), settings.signal_params()
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in demo_observations() if read is None else read:
        by_trace.setdefault(observation["traceId"], []).append(observation)
    scored = scores = 0
    for trace_id, observations in by_trace.items():
        mapped = map_trace(trace_id, observations, rules)
        if isinstance(mapped, Skip):
            continue
        scored += 1
        scores += len(score_events(mapped, compute(mapped, params), params))
    return DemoCounts(len(by_trace), scored, len(by_trace) - scored, scores)


def latest_start(observations: list[dict[str, Any]]) -> datetime:
    moments = [parse_time(o["startTime"]) for o in observations]
    return max(m for m in moments if m is not None)


def expected_signals() -> dict[str, dict[str, Any]]:
    """`observer score` of the example records, keyed by their demo Langfuse trace id."""
    from observer.signals import SignalParams, compute
    from observer.signals.output import signals_json

    expected = {}
    for line in (ROOT / "examples" / "records.jsonl").open("rb"):
        record = parse_record(line)
        trace_id = hashlib.sha256(record.trace_id.encode()).hexdigest()[:32]
        expected[trace_id] = signals_json(compute(record, SignalParams()))
    return expected


def configure(monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse, **overrides: str) -> Settings:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", fake.public_key)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", fake.secret_key)
    monkeypatch.setenv("LANGFUSE_BASE_URL", fake.url)
    defaults = {
        "OBSERVER_SOURCE__LOOKBACK_S": str(3 * 86400),
        "OBSERVER_SOURCE__REQUESTS_PER_MINUTE": "6000",
        "OBSERVER_SOURCE__MAX_ATTEMPTS": "3",
        "OBSERVER_SOURCE__FIRST_CONTACT_S": "1",  # a dead Langfuse given up on at once
        "OBSERVER_SINK__MAX_BACKOFF_S": "0.2",
        "OBSERVER_RUN__SHUTDOWN_GRACE_S": "5",
        "OBSERVER_LOG__LEVEL": "warning",
    }
    for key, value in {**defaults, **overrides}.items():
        monkeypatch.setenv(key, value)
    return load_settings()


def once(settings: Settings, state: Path, now: datetime) -> app.OnceResult:
    parts = app.build(settings, state_path=state)
    try:
        return app.run_once(parts, now)
    finally:
        parts.state.close()


def after(observations: list[dict[str, Any]], seconds: float = 120) -> datetime:
    return latest_start(observations) + timedelta(seconds=seconds)


_TIME_KEYS = ("startTime", "endTime", "updatedAt", "createdAt", "completionStartTime")


def _new_id(old: Any, salt: str, length: int) -> Any:
    if not isinstance(old, str):
        return old
    return hashlib.sha256(f"{old}|{salt}".encode()).hexdigest()[:length]


def packed_traces(
    start: datetime, spacing_s: float, copies: int = 1, tag: str = ""
) -> list[dict[str, Any]]:
    """The demo's traces again under new ids, their roots `spacing_s` apart from `start`.

    A real stream in miniature: the demo's answers (their ungrounded share and all)
    arriving at a steady rate, for windows and alert rules to work on.
    """
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in demo_observations():
        by_trace.setdefault(observation["traceId"], []).append(observation)
    out: list[dict[str, Any]] = []
    index = 0
    for copy in range(copies):
        for trace_id, observations in by_trace.items():
            roots = [o for o in observations if o.get("isRootObservation")]
            root_start = parse_time((roots or observations)[0]["startTime"])
            assert root_start is not None
            shift = start + timedelta(seconds=index * spacing_s) - root_start
            salt = f"{tag}{copy}"
            for observation in observations:
                moved = dict(observation)
                moved["traceId"] = _new_id(trace_id, salt, 32)
                moved["id"] = _new_id(observation.get("id"), salt, 16)
                moved["parentObservationId"] = _new_id(
                    observation.get("parentObservationId"), salt, 16
                )
                for key in _TIME_KEYS:
                    moment = parse_time(observation.get(key))
                    if moment is not None:
                        moved[key] = iso(moment + shift)
                out.append(moved)
            index += 1
    return out
