"""Mapping drift pages instead of going quiet: the daemon against the fake Langfuse, with
the default rules and a webhook receiver, while an app's traces change shape mid-stream.

The stream is the demo's traces again, one every 15 s of event time, handled by a pass
every 10 minutes (each a new process on the same state file, `run --once`, the fake's
clock at the pass): 40 minutes read fine, then the same app's generations stop holding
text (an instrumentation upgrade: they now return tool calls only), so its traces are
skipped `no_final_answer`; 50 minutes later the shape is back. `skip_rate_high` warns,
pages, steps back to a warning and resolves, and every firing message names the top skip
reason and `observer discover`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from observer import app
from observer.telemetry.metrics import Metrics
from observer.times import parse_time
from tests.daemon_helpers import configure, packed_traces
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.receiver import Receiver

SPACING_S = 15.0
PASS = timedelta(minutes=10)
GOOD_MIN, DRIFT_MIN, FIXED_MIN = 40, 40, 50
TOOL_CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
]


def drifted(observations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace after the upgrade: its generation's output holds tool calls, no text."""
    return [
        {**o, "output": {"role": "assistant", "tool_calls": TOOL_CALLS}}
        if o.get("type") == "GENERATION"
        else o
        for o in observations
    ]


def by_trace(observations: list[dict[str, Any]]) -> list[tuple[datetime, list[dict[str, Any]]]]:
    traces: dict[str, list[dict[str, Any]]] = {}
    for observation in observations:
        traces.setdefault(observation["traceId"], []).append(observation)
    out = []
    for group in traces.values():
        root = next(o for o in group if o.get("isRootObservation"))
        moment = parse_time(root["startTime"])
        assert moment is not None
        out.append((moment, group))
    return sorted(out, key=lambda item: item[0])


def stream(start: datetime) -> list[tuple[datetime, list[dict[str, Any]]]]:
    """Good, drifted, then good again: one trace every 15 s, each phase its own ids."""
    out: list[tuple[datetime, list[dict[str, Any]]]] = []
    moment = start
    for minutes, tag, change in (
        (GOOD_MIN, "good", None),
        (DRIFT_MIN, "drift", drifted),
        (FIXED_MIN, "fixed", None),
    ):
        count = int(minutes * 60 / SPACING_S)
        copies = -(-count // 80)  # the demo holds 80 traces
        traces = by_trace(packed_traces(moment, SPACING_S, copies=copies, tag=tag))[:count]
        out.extend((root, change(group) if change else group) for root, group in traces)
        moment += timedelta(minutes=minutes)
    return out


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


def test_a_change_of_trace_shape_warns_pages_and_resolves_naming_the_top_reason(
    monkeypatch: pytest.MonkeyPatch, receiver: Receiver, tmp_path: Path
) -> None:
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=4)
    clock = {"now": start}
    config = tmp_path / "observer.toml"
    # No [[alerts.rules]]: the default rules, skip_rate_high among them.
    config.write_text(
        f'[[alerts.notifiers]]\nname = "hook"\nkind = "webhook"\nurl = "{receiver.url}"\n'
    )
    monkeypatch.setenv("OBSERVER_CONFIG", str(config))
    pending = stream(start)
    total = GOOD_MIN + DRIFT_MIN + FIXED_MIN
    seen: list[tuple[int, str, str, dict[str, Any]]] = []
    scored_per_pass: list[float] = []
    with FakeLangfuse(clock=lambda: clock["now"]) as langfuse:
        settings = configure(monkeypatch, langfuse, OBSERVER_SOURCE__LOOKBACK_S="3600")
        state = tmp_path / "s.sqlite"
        for minute in range(10, total + 1, 10):
            now = start + timedelta(minutes=minute)
            clock["now"] = now
            # What the apps have sent by now (roots the settle time ago at the latest).
            due = [group for root, group in pending if root < now - timedelta(seconds=20)]
            pending = [(r, g) for r, g in pending if r >= now - timedelta(seconds=20)]
            langfuse.add_observations([o for group in due for o in group])
            metrics = Metrics()
            parts = app.build(settings, state_path=state, metrics=metrics)
            try:
                result = app.run_once(parts, now)
            finally:
                parts.state.close()
            assert result.exit_code == 0, result.error
            scored_per_pass.append(metrics.value("observer_traces_total", outcome="scored"))
            # Each trace scored in the pass: one trace-to-score observation, once delivered.
            assert metrics.value("observer_trace_to_score_seconds_count") == scored_per_pass[-1]
            bodies = [r.json() for r in receiver.requests][len(seen) :]
            seen.extend((minute, b["state"], b["severity"], b) for b in bodies)
    drift = [(minute, st, sev, b) for minute, st, sev, b in seen if b["rule"] == "skip_rate_high"]
    # Warned within minutes of the change (at minute 40), paged once most traces are skipped,
    # back to a warning, then resolved once the fixed shape fills the window again.
    assert [(minute, st, sev) for minute, st, sev, _ in drift] == [
        (50, "firing", "warn"),
        (60, "firing", "page"),
        (100, "firing", "warn"),
        (110, "resolved", "warn"),
    ]
    for _, state_, _, body in drift:
        assert body["group"] == {"environment": "production"}
        assert body["samples"] >= 50
        if state_ == "firing":
            assert "top skip reason no_final_answer" in body["summary"]
            assert "Top skip reason: no_final_answer" in body["description"]
            assert "observer discover" in body["description"]
            assert 1 <= len(body["trace_urls"]) <= 5
    warn, page = drift[0][3], drift[1][3]
    assert 0.2 < warn["value"] <= 0.5 < page["value"]
    # Traces were scored in every pass but the ones of the drift alone (the staging few).
    assert all(n > 20 for n in scored_per_pass[:4])
    assert all(n < 10 for n in scored_per_pass[5:8])
    assert all(n > 20 for n in scored_per_pass[9:])
