"""Alerts from the daemon end to end: fake Langfuse in, a real receiver (or Alertmanager) out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from observer import app
from observer.cli import main
from observer.config import Settings
from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import configure, packed_traces
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.receiver import Receiver
from tests.servers import alertmanager

# The rule of the documented contract, pointed at a receiver under test.
RULE = """
[[alerts.rules]]
name = "ungrounded_rate_high"
signal = "ungrounded"
aggregate = "rate"
op = ">"
threshold = 0.05
warn_threshold = 0.03
window = "15m"
min_samples = 50
for = "2m"
repeat = "4h"
no_data = "keep"
no_data_for = "30m"
group_by = ["environment"]
where = {{ environment = "production" }}
notify = ["oncall"]
runbook_url = "https://wiki.example.com/rag/ungrounded"

[[alerts.trace_rules]]
name = "ghost_citation"
when = "invalid_citations > 0"
max_per_hour = 2
notify = ["oncall"]

[[alerts.notifiers]]
name = "oncall"
kind = "{kind}"
url = "{url}"
"""


@pytest.fixture
def langfuse() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


def stream_start() -> datetime:
    """Traces of the last ten minutes: windows in event time hold all of them."""
    return datetime.now(UTC) - timedelta(minutes=10)


def settings_for(
    monkeypatch: pytest.MonkeyPatch,
    langfuse: FakeLangfuse,
    tmp_path: Path,
    kind: str,
    url: str,
) -> Settings:
    config = tmp_path / "observer.toml"
    config.write_text(RULE.format(kind=kind, url=url))
    monkeypatch.setenv("OBSERVER_CONFIG", str(config))
    return configure(monkeypatch, langfuse, OBSERVER_SOURCE__LOOKBACK_S="3600")


def run_once(settings: Settings, state: Path, now: datetime | None = None) -> app.OnceResult:
    parts = app.build(settings, state_path=state, metrics=Metrics())
    try:
        return app.run_once(parts, now)
    finally:
        parts.state.close()


def webhook_bodies(receiver: Receiver) -> list[dict[str, Any]]:
    return [r.json() for r in receiver.requests]


def test_run_once_leaves_a_page_in_a_real_alertmanager(
    monkeypatch: pytest.MonkeyPatch, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    traces = packed_traces(stream_start(), spacing_s=5)
    langfuse.add_observations(traces)
    project = traces[0]["projectId"]
    with alertmanager(tmp_path / "am") as server:
        settings = settings_for(monkeypatch, langfuse, tmp_path, "alertmanager", server.url)
        result = run_once(settings, tmp_path / "s.sqlite")
        assert result.exit_code == 0, result.error
        response = httpx.get(f"{server.url}/api/v2/alerts", params={"active": "true"}, timeout=5)
        firing = [a for a in response.json() if a["labels"]["alertname"] == "ungrounded_rate_high"]
        assert len(firing) == 1
        labels = firing[0]["labels"]
        assert labels["severity"] == "page" and labels["service"] == "observer"
        assert labels["environment"] == "production"
        annotations = firing[0]["annotations"]
        assert annotations["runbook_url"] == "https://wiki.example.com/rag/ungrounded"
        assert annotations["langfuse_url"].startswith(f"{langfuse.url}/project/{project}/traces/")


def test_window_alert_fires_once_and_a_restart_does_not_page_again(
    monkeypatch: pytest.MonkeyPatch,
    langfuse: FakeLangfuse,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    langfuse.add_observations(packed_traces(stream_start(), spacing_s=5))
    settings = settings_for(monkeypatch, langfuse, tmp_path, "webhook", receiver.url)
    state = tmp_path / "s.sqlite"
    assert run_once(settings, state).exit_code == 0
    first = webhook_bodies(receiver)
    window = [b for b in first if b["kind"] == "window"]
    assert [(b["rule"], b["state"], b["severity"]) for b in window] == [
        ("ungrounded_rate_high", "firing", "page")
    ]
    alert = window[0]
    assert alert["value"] > 0.05 and alert["samples"] >= 50
    assert alert["group"] == {"environment": "production"}
    assert 1 <= len(alert["trace_urls"]) <= 5
    # A new process on the same state: the alert is still firing, and nobody is paged again.
    assert run_once(settings, state).exit_code == 0
    again = [b for b in webhook_bodies(receiver)[len(first) :] if b["kind"] == "window"]
    assert again == []


def test_trace_rule_notifies_at_once_caps_per_hour_then_digests(
    monkeypatch: pytest.MonkeyPatch,
    langfuse: FakeLangfuse,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    langfuse.add_observations(packed_traces(stream_start(), spacing_s=5))
    settings = settings_for(monkeypatch, langfuse, tmp_path, "webhook", receiver.url)
    state = tmp_path / "s.sqlite"
    assert run_once(settings, state).exit_code == 0
    traces = [b for b in webhook_bodies(receiver) if b["kind"] == "trace"]
    assert len(traces) == 2  # max_per_hour
    assert all(b["rule"] == "ghost_citation" and len(b["trace_urls"]) == 1 for b in traces)
    ghosts = sum(1 for o in langfuse.scores if o["name"] == "invalid_citations" and o["value"])
    assert ghosts > 2
    # An hour later the rest arrive as one digest with the count.
    later = datetime.now(UTC) + timedelta(hours=1, minutes=1)
    assert run_once(settings, state, later).exit_code == 0
    digests = [b for b in webhook_bodies(receiver) if b["kind"] == "digest"]
    assert len(digests) == 1
    assert digests[0]["samples"] == ghosts - 2
    assert 1 <= len(digests[0]["trace_urls"]) <= 5


def test_status_and_backtest_read_the_same_history(
    monkeypatch: pytest.MonkeyPatch,
    langfuse: FakeLangfuse,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    start = stream_start()
    langfuse.add_observations(packed_traces(start, spacing_s=5))
    settings_for(monkeypatch, langfuse, tmp_path, "webhook", receiver.url)
    monkeypatch.setenv("COLUMNS", "200")  # tables unfolded, as on a wide terminal
    state = tmp_path / "s.sqlite"
    cli = CliRunner()
    assert cli.invoke(main, ["run", "--once", "--state", str(state)]).exit_code == 0
    status = cli.invoke(main, ["alerts", "status", "--state", str(state)])
    assert status.exit_code == 0, status.output
    assert "ungrounded_rate_high" in status.stdout and "firing" in status.stdout
    assert "environment=production" in status.stdout
    backtest = cli.invoke(
        main,
        [
            "alerts",
            "backtest",
            "--state",
            str(state),
            "--from",
            (start - timedelta(minutes=5)).isoformat(),
            "--rule",
            "ungrounded_rate_high",
        ],
    )
    assert backtest.exit_code == 0, backtest.output
    assert "ungrounded_rate_high" in backtest.stdout
    assert "firing" in backtest.stdout and "page" in backtest.stdout
    unknown = cli.invoke(
        main,
        ["alerts", "backtest", "--state", str(state), "--from", start.isoformat(), "--rule", "x"],
    )
    assert unknown.exit_code == 2 and "no window rule named 'x'" in unknown.output


def test_status_lists_every_rule_in_plain_columns_and_as_json(
    monkeypatch: pytest.MonkeyPatch, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    """A rule with no data is listed as such; piped, rows never wrap; --json for scripts."""
    import json

    from observer.alerts.rules import default_window_rules

    start = stream_start()
    langfuse.add_observations(packed_traces(start, spacing_s=5))
    configure(monkeypatch, langfuse, OBSERVER_SOURCE__LOOKBACK_S="3600")  # the default rules
    monkeypatch.setenv("COLUMNS", "80")
    state = tmp_path / "s.sqlite"
    cli = CliRunner()
    assert cli.invoke(main, ["run", "--once", "--state", str(state)]).exit_code == 0
    windowed = {rule.name for rule in default_window_rules()}
    names = windowed | {"release_regression"}  # every kind of rule that fires is shown
    status = cli.invoke(main, ["alerts", "status", "--state", str(state)])
    assert status.exit_code == 0, status.output
    lines = status.stdout.splitlines()
    assert lines[0].split() == ["rule", "group", "value", "samples", "state", "since"]
    footer = next(i for i, line in enumerate(lines) if "windows end at the watermark" in line)
    listed = {line.split()[0] for line in lines[1:footer]}
    assert listed == names  # every rule, with data or not
    assert any("ok (no data)" in line for line in lines[1:footer])
    assert "│" not in status.stdout
    assert all(line.split()[0] in names for line in lines[1:footer])  # nothing wrapped
    document = json.loads(
        cli.invoke(main, ["alerts", "status", "--json", "--state", str(state)]).stdout
    )
    assert document["window_rules"] == len(windowed)
    assert {row["rule"] for row in document["rules"]} == names
    assert isinstance(document["incidents"], list)
    with_data = [row for row in document["rules"] if row["samples"]]
    assert with_data
    assert any(row["group"].get("environment") == "production" for row in with_data)


def test_alerts_test_sends_through_each_notifier_and_fails_on_a_dead_one(
    monkeypatch: pytest.MonkeyPatch, receiver: Receiver, tmp_path: Path
) -> None:
    config = tmp_path / "observer.toml"
    config.write_text(
        f"""
[[alerts.notifiers]]
name = "hook"
kind = "webhook"
url = "{receiver.url}"
secret_env = "HOOK_SECRET"

[[alerts.notifiers]]
name = "dead"
kind = "alertmanager"
url = "http://127.0.0.1:9"
"""
    )
    monkeypatch.setenv("HOOK_SECRET", "whsec_" + "c2VjcmV0LXNpZ25pbmcta2V5LWZvci10ZXN0cw==")
    cli = CliRunner()
    one = cli.invoke(main, ["alerts", "test", "--config", str(config), "--notifier", "hook"])
    assert one.exit_code == 0, one.output
    assert "hook: sent" in one.stdout
    body = json.loads(receiver.requests[-1].body)
    assert body["kind"] == "test"
    both = cli.invoke(main, ["alerts", "test", "--config", str(config)])
    assert both.exit_code == 1
    assert "dead: FAILED" in both.stdout
    assert "c2VjcmV0" not in both.output
    monkeypatch.delenv("HOOK_SECRET")
    missing = cli.invoke(main, ["alerts", "test", "--config", str(config)])
    assert missing.exit_code == 2
    assert "HOOK_SECRET is not set" in missing.output
    unknown = cli.invoke(main, ["alerts", "test", "--config", str(config), "--notifier", "nope"])
    assert unknown.exit_code == 2
    assert "no notifier named 'nope' (configured: hook, dead)" in unknown.output


RELEASE_RULE = """
[[alerts.rules]]
name = "ungrounded_by_release"
signal = "ungrounded"
aggregate = "rate"
op = ">"
threshold = 0.03
window = "30m"
min_samples = 20
group_by = ["environment", "release"]
where = {{ environment = "production" }}
notify = ["oncall"]

[[alerts.notifiers]]
name = "oncall"
kind = "webhook"
url = "{url}"
"""


def released(observations: list[dict[str, Any]], release: str) -> list[dict[str, Any]]:
    """The traces as the v2 API returns them from an app that set a release and used a
    managed prompt: the release on every observation, model and prompt on the generations."""
    out = []
    for observation in observations:
        observation = {**observation, "release": release}
        if observation["type"] == "GENERATION":
            observation.update(model="gpt-4o-mini", promptName="rag-answer", promptVersion=3)
        out.append(observation)
    return out


def test_a_rule_grouped_by_release_fires_for_the_release_that_is_worse(
    monkeypatch: pytest.MonkeyPatch,
    langfuse: FakeLangfuse,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    from observer.mapping import MappingRules, Skip, map_trace
    from observer.signals import SignalParams, compute

    start = stream_start()
    good = packed_traces(start, spacing_s=3, tag="good")
    bad = packed_traces(start + timedelta(seconds=1), spacing_s=3, tag="bad")
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in good:
        by_trace.setdefault(observation["traceId"], []).append(observation)
    ungrounded = set()
    for trace_id, found in by_trace.items():
        record = map_trace(trace_id, found, MappingRules())
        if not isinstance(record, Skip) and compute(record, SignalParams()).ungrounded:
            ungrounded.add(trace_id)
    assert ungrounded  # the demo's ungrounded answers: left out of the good release
    good = [o for o in good if o["traceId"] not in ungrounded]
    langfuse.add_observations(released(good, "2026.12.01") + released(bad, "2026.12.03-rc2"))
    config = tmp_path / "observer.toml"
    config.write_text(RELEASE_RULE.format(url=receiver.url))
    monkeypatch.setenv("OBSERVER_CONFIG", str(config))
    settings = configure(monkeypatch, langfuse, OBSERVER_SOURCE__LOOKBACK_S="3600")
    state = tmp_path / "s.sqlite"
    assert run_once(settings, state).exit_code == 0
    window = [b for b in webhook_bodies(receiver) if b["kind"] == "window"]
    assert [(b["rule"], b["state"], b["group"]) for b in window] == [
        (
            "ungrounded_by_release",
            "firing",
            {"environment": "production", "release": "2026.12.03-rc2"},
        )
    ]
    # The other release was evaluated, and is fine; every row kept its dimensions.
    parts = app.build(settings, state_path=state, metrics=Metrics())
    try:
        states = parts.state.alerts.load()["ungrounded_by_release"]
        rows = parts.state.history.rows(0, datetime.now(UTC).timestamp() + 3600, samples=False)
    finally:
        parts.state.close()
    good_group = (("environment", "production"), ("release", "2026.12.01"))
    assert states[good_group].status == "ok" and states[good_group].samples >= 20
    scored = [r for r in rows if r.values.get("skipped") is False]
    assert {(r.label("release"), r.label("model"), r.label("prompt")) for r in scored} == {
        ("2026.12.01", "gpt-4o-mini", "rag-answer:3"),
        ("2026.12.03-rc2", "gpt-4o-mini", "rag-answer:3"),
    }
    assert all(r.label("trace_name") != "none" for r in scored)
