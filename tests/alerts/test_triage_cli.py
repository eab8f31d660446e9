"""`alerts status` and `alerts backtest` print the same triage the pages carry, and the
backtest replays the release-regression rule (issue 30's release scenario)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from observer.cli import main
from observer.state import State
from tests.alerts.test_triage import NEW, T, release_scenario

CONFIG = """
[[alerts.rules]]
name = "numeric_grounding_low"
signal = "numeric_grounding"
aggregate = "mean"
op = "<"
threshold = 0.9
warn_threshold = 0.95
window = "30m"
min_samples = 20
group_by = ["environment"]
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    config = tmp_path / "observer.toml"
    config.write_text(CONFIG)
    state = State(tmp_path / "state.sqlite")
    state.history.put_many(release_scenario())
    state.set_watermark(datetime.fromtimestamp(T, UTC))
    state.close()
    return config, tmp_path / "state.sqlite"


def test_status_prints_what_changed_for_a_firing_group(files: tuple[Path, Path]) -> None:
    config, state = files
    shown = CliRunner().invoke(
        main, ["alerts", "status", "--config", str(config), "--state", str(state)]
    )
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert "what changed: numeric_grounding_low (environment=production)" in lines
    where = next(line for line in lines if line.startswith("  Where: "))
    assert f"release={NEW} and query_type=pricing" in where
    assert any(line.startswith("  Layer: generation") for line in lines)
    as_json = CliRunner().invoke(
        main, ["alerts", "status", "--config", str(config), "--state", str(state), "--json"]
    )
    (firing,) = [r for r in json.loads(as_json.stdout)["rules"] if r["triage"] is not None]
    assert firing["triage"]["layer"] == "generation"
    assert firing["triage"]["segments"][0]["where"] == {"release": NEW, "query_type": "pricing"}


def test_backtest_prints_the_triage_and_the_release_regression(files: tuple[Path, Path]) -> None:
    config, state = files
    start = datetime.fromtimestamp(T - 7200, UTC).isoformat()
    end = datetime.fromtimestamp(T, UTC).isoformat()
    shown = CliRunner().invoke(
        main,
        ["alerts", "backtest", "--config", str(config), "--state", str(state),
         "--from", start, "--to", end],
    )  # fmt: skip
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "what changed: numeric_grounding_low at " in out
    assert f"release={NEW}" in out and "Layer: generation" in out
    assert "release_regression: fired " in out
    assert (
        f"release {NEW} is worse than 2026.12.01 on numeric_grounding for query_type pricing" in out
    )
