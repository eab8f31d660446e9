"""The resolver in the daemon: a pass over the demo traces with a chunk store of its own
(the hook backend), some chunks deleted and some re-written since the answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from observer import app
from observer.background import Deadline
from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import ROOT, after, configure, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.openai_stub import OpenAIStub
from tests.fakes.receiver import Receiver
from tests.resolver import hooks

DELETED = "admin-badge#c2"
REWRITTEN = "kb-api-rate-limits#c1"


@pytest.fixture
def store() -> Iterator[dict[str, dict[str, Any]]]:
    """Every chunk the examples cite, as the answers saw it; then one deleted, one re-written."""
    hooks.seed_from_examples()
    del hooks.STORE[DELETED]
    hooks.STORE[REWRITTEN] = {"text": "The policy was rewritten since.", "doc_id": "kb"}
    yield hooks.STORE
    hooks.STORE.clear()


@pytest.fixture
def langfuse() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        server.add_observations(demo_observations())
        yield server


def run(
    monkeypatch: pytest.MonkeyPatch, langfuse: FakeLangfuse, tmp_path: Path, hook: str
) -> tuple[app.OnceResult, Metrics]:
    settings = configure(
        monkeypatch,
        langfuse,
        OBSERVER_RESOLVER__KIND="hook",
        OBSERVER_RESOLVER__HOOK=f"tests.resolver.hooks:{hook}",
    )
    metrics = Metrics()
    parts = app.build(settings, state_path=tmp_path / "s.sqlite", metrics=metrics)
    try:
        return app.run_once(parts, after(demo_observations())), metrics
    finally:
        parts.state.close()


def by_name(langfuse: FakeLangfuse, name: str) -> list[dict[str, Any]]:
    return [s for s in langfuse.scores if s["name"] == name]


def test_missing_and_stale_citations_are_scored_with_the_chunk_ids(
    store: dict[str, Any], monkeypatch: pytest.MonkeyPatch, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    result, metrics = run(monkeypatch, langfuse, tmp_path, "lookup")
    assert result.exit_code == 0, result.error
    missing = [s for s in by_name(langfuse, "missing_chunks") if s["value"] > 0]
    stale = [s for s in by_name(langfuse, "stale_citations") if s["value"] > 0]
    assert missing and all(DELETED in s["comment"] for s in missing)
    assert stale and all(REWRITTEN in s["comment"] for s in stale)
    # Traces that cite only unchanged chunks get 0s, with their checked count.
    assert any(s["value"] == 0 for s in by_name(langfuse, "missing_chunks"))
    assert metrics.total("observer_resolver_chunks_total") > 0
    assert (
        metrics.value(
            "observer_resolver_chunks_total",
            environment="production",
            query_type=next(iter({"howto"})),
            finding="fresh",
        )
        >= 0
    )
    assert sum(
        metrics.value("observer_resolver_chunks_total", **labels)
        for labels in [
            {"environment": e, "query_type": q, "finding": "missing"}
            for e in ("production", "staging")
            for q in ("howto", "policy", "factual", "troubleshooting", "comparison", "none")
        ]
    ) == sum(s["value"] for s in missing)
    assert metrics.value("observer_resolver_lookups_total") >= 1
    # The signal history has the counts: what the stale_citation_rate rule reads.
    from observer.state import State

    state = State(tmp_path / "s.sqlite")
    try:
        rows = state.history.rows(0, 1e12)
    finally:
        state.close()
    assert any(r.values.get("stale_citations", 0) > 0 for r in rows)


def test_a_failing_store_costs_only_the_resolver_scores(
    store: dict[str, Any], monkeypatch: pytest.MonkeyPatch, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    result, metrics = run(monkeypatch, langfuse, tmp_path, "broken")
    assert result.exit_code == 0, result.error
    assert by_name(langfuse, "missing_chunks") == by_name(langfuse, "stale_citations") == []
    assert by_name(langfuse, "confidence")  # every other score is there
    assert metrics.total("observer_resolver_errors_total") >= 1


def test_a_bad_resolver_config_stops_at_start(
    monkeypatch: pytest.MonkeyPatch, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    from observer.config import ConfigError

    settings = configure(
        monkeypatch,
        langfuse,
        OBSERVER_RESOLVER__KIND="hook",
        OBSERVER_RESOLVER__HOOK="tests.resolver.hooks:NOT_CALLABLE",
    )
    with pytest.raises(ConfigError, match="resolver"):
        app.build(settings, state_path=tmp_path / "s.sqlite")


@pytest.mark.parametrize(
    ("hook", "says", "code"),
    [
        ("lookup", "reachable, chunk_id queried; 20 recently cited chunks looked up: ", 0),
        ("broken", "NO: hook", 2),
        ("NOT_CALLABLE", "NOT USABLE", 2),
        ("nothing", "none of 20 recently cited chunk ids is in the store", 2),
        ("wrong_fields", "unknown field 'body', 'hash'", 2),
        ("doc_only", "have no 'text_hash' or 'text': every citation would be unverifiable", 2),
    ],
)
def test_check_proves_the_resolver_on_recently_cited_chunks(
    store: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    langfuse: FakeLangfuse,
    tmp_path: Path,
    hook: str,
    says: str,
    code: int,
) -> None:
    from click.testing import CliRunner

    from observer.cli import main

    configure(
        monkeypatch,
        langfuse,
        OBSERVER_RESOLVER__KIND="hook",
        OBSERVER_RESOLVER__HOOK=f"tests.resolver.hooks:{hook}",
        OBSERVER_SOURCE__LOOKBACK_S=str(3650 * 86400),  # the demo traces are from the past
        COLUMNS="400",
    )
    result = CliRunner().invoke(main, ["check", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == code, result.output
    assert says in " ".join(result.stdout.split())
    if hook == "lookup":
        assert "missing_chunks, stale_citations" in " ".join(result.stdout.split())
        # Ids from many answers, not one: the sample reaches the deleted chunk or not, but
        # every id it found is one the store holds.
        looked_up = {i for call in hooks.CALLS for i in call if i != "observer-check-probe"}
        assert len(looked_up) == 20 and len({i.split("#")[0] for i in looked_up}) > 5


def test_check_without_a_sample_still_proves_the_store(
    store: dict[str, Any], monkeypatch: pytest.MonkeyPatch, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from observer.cli import main

    configure(
        monkeypatch,
        langfuse,
        OBSERVER_RESOLVER__KIND="hook",
        OBSERVER_RESOLVER__HOOK="tests.resolver.hooks:lookup",
        OBSERVER_SOURCE__LOOKBACK_S="60",  # nothing recent
        COLUMNS="400",
    )
    result = CliRunner().invoke(main, ["check", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    assert "no recently cited chunk ids to look up" in " ".join(result.stdout.split())


# ---- the judge's funnel in the daemon -------------------------------------------------------


def flagged_traces(langfuse: FakeLangfuse) -> set[str]:
    return {
        s["traceId"]
        for name in ("missing_chunks", "stale_citations")
        for s in by_name(langfuse, name)
        if s["value"] > 0
    }


def judge_env(**extra: str) -> dict[str, str]:
    return {
        "OBSERVER_RESOLVER__KIND": "hook",
        "OBSERVER_RESOLVER__HOOK": "tests.resolver.hooks:lookup",
        "OBSERVER_JUDGE__ENABLED": "true",
        **extra,
    }


def test_flagged_chunks_never_reach_the_verdicts_call(
    store: dict[str, Any],
    judge_stub: OpenAIStub,
    monkeypatch: pytest.MonkeyPatch,
    langfuse: FakeLangfuse,
    tmp_path: Path,
) -> None:
    deleted_text = next(
        s["text"]
        for line in (ROOT / "examples" / "records.jsonl").read_text().splitlines()
        for s in json.loads(line)["sources"]
        if s.get("chunk_id") == DELETED
    )
    settings = configure(monkeypatch, langfuse, **judge_env(OBSERVER_JUDGE__RATE="1.0"))
    metrics = Metrics()
    parts = app.build(settings, state_path=tmp_path / "s.sqlite", metrics=metrics)
    try:
        result = app.run_once(parts, after(demo_observations()))
    finally:
        parts.state.close()
    assert result.exit_code == 0, result.error
    verdict_calls = [
        r["messages"][-1]["content"]
        for r in judge_stub.requests
        if r["response_format"]["json_schema"]["name"] == "observer_verdicts"
    ]
    assert verdict_calls and not any(deleted_text in content for content in verdict_calls)
    accuracy = {s["traceId"]: s for s in by_name(langfuse, "citation_accuracy")}
    funnelled = [s for s in accuracy.values() if "without asking the judge" in s["comment"]]
    assert funnelled and all(
        DELETED in s["comment"] or REWRITTEN in s["comment"] for s in funnelled
    )
    assert {s["traceId"] for s in funnelled} <= flagged_traces(langfuse)
    assert metrics.value("observer_judge_funnel_claims_total") >= len(funnelled)


def test_traces_with_flagged_chunks_are_oversampled(
    store: dict[str, Any],
    judge_stub: OpenAIStub,
    monkeypatch: pytest.MonkeyPatch,
    langfuse: FakeLangfuse,
    tmp_path: Path,
) -> None:
    settings = configure(
        monkeypatch,
        langfuse,
        **judge_env(OBSERVER_JUDGE__RATE="0", OBSERVER_JUDGE__RISK_RATE="1.0"),
    )
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    try:
        app.run_once(parts, after(demo_observations()))
    finally:
        parts.state.close()
    judged = {s["traceId"] for s in by_name(langfuse, "no_claims")}
    assert flagged_traces(langfuse) and flagged_traces(langfuse) <= judged


def test_a_queued_sample_keeps_its_findings_across_a_restart(
    store: dict[str, Any],
    judge_stub: OpenAIStub,
    monkeypatch: pytest.MonkeyPatch,
    langfuse: FakeLangfuse,
    tmp_path: Path,
) -> None:
    settings = configure(monkeypatch, langfuse, **judge_env(OBSERVER_JUDGE__RATE="1.0"))
    state = tmp_path / "s.sqlite"
    parts = app.build(settings, state_path=state)
    try:
        parts.pipeline.poll(after(demo_observations()))  # workers never started: all queued
        assert parts.judge is not None and parts.judge.shutdown(Deadline.within(0.1)) is False
        parts.dispatcher.flush(5)
    finally:
        parts.state.close()
    assert by_name(langfuse, "citation_accuracy") == []
    # After the restart the store answers nothing: the findings come from the state file.
    broken = configure(
        monkeypatch,
        langfuse,
        **judge_env(
            OBSERVER_JUDGE__RATE="1.0", OBSERVER_RESOLVER__HOOK="tests.resolver.hooks:broken"
        ),
    )
    parts = app.build(broken, state_path=state)
    try:
        result = app.run_once(parts, after(demo_observations()))
    finally:
        parts.state.close()
    assert result.exit_code == 0, result.error
    funnelled = [s for s in by_name(langfuse, "citation_accuracy") if DELETED in s["comment"]]
    assert funnelled


TRACE_RULE = """
[[alerts.trace_rules]]
name = "stale_citation"
when = "stale_citations > 0"
notify = ["hook"]

[[alerts.trace_rules]]
name = "missing_chunk"
when = "missing_chunks > 0"
notify = ["hook"]

[[alerts.notifiers]]
name = "hook"
kind = "webhook"
url = "{url}"
"""


def test_a_trace_rule_on_what_the_resolver_found_fires_when_the_trace_is_scored(
    store: dict[str, Any], monkeypatch: pytest.MonkeyPatch, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    """The row the trace rules see is the row the scorer wrote, with the resolver's values:
    a rule on `stale_citations` or `missing_chunks` fires at scoring, not never."""
    with Receiver() as receiver:
        config = tmp_path / "observer.toml"
        config.write_text(TRACE_RULE.format(url=receiver.url))
        monkeypatch.setenv("OBSERVER_CONFIG", str(config))
        result, _ = run(monkeypatch, langfuse, tmp_path, "lookup")
        assert result.exit_code == 0, result.error
        fired = {(body["rule"], body["kind"]) for body in (r.json() for r in receiver.requests)}
    assert ("stale_citation", "trace") in fired
    assert ("missing_chunk", "trace") in fired
