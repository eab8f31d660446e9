"""The resolver in the daemon: a pass over the demo traces with a chunk store of its own
(the hook backend), some chunks deleted and some re-written since the answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from observer import app
from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import ROOT, after, configure, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse
from tests.resolver import hooks

DELETED = "admin-badge#c2"
REWRITTEN = "kb-api-rate-limits#c1"


@pytest.fixture
def store() -> Iterator[dict[str, dict[str, Any]]]:
    """Every chunk the examples cite, as the answers saw it; then one deleted, one re-written."""
    hooks.STORE.clear()
    for line in (ROOT / "examples" / "records.jsonl").read_text().splitlines():
        for source in json.loads(line)["sources"]:
            if source.get("chunk_id"):
                hooks.STORE[source["chunk_id"]] = {"text": source["text"], "doc_id": "kb"}
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
    [("lookup", "reachable", 0), ("broken", "NO: hook", 2), ("NOT_CALLABLE", "NOT USABLE", 2)],
)
def test_check_proves_the_resolver(
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
        COLUMNS="200",
    )
    result = CliRunner().invoke(main, ["check", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == code, result.output
    assert says in result.stdout
