"""deploy/prometheus and deploy/alertmanager: valid for the real tools, rules unit-tested.

promtool checks the scrape config and the rule files and runs the rules' unit
tests (each alert shown firing and not firing); amtool checks Alertmanager's
config. The rules may only query what observer declares.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from observer.config import Settings
from tests.deploy.support import (
    DEPLOY,
    PROMETHEUS,
    RULE_FILES,
    RULE_TESTS,
    known_series,
    load_yaml,
    rules,
    run,
    tool,
    unknown_in,
)

SEVERITIES = {"page", "warn"}  # observer's own alerts use the same two


def test_promtool_checks_the_config_and_the_rule_files_it_loads() -> None:
    done = run([tool("promtool"), "check", "config", str(PROMETHEUS / "prometheus.yml")])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in done.stdout + done.stderr


def test_the_config_loads_every_rule_file_and_scrapes_observer() -> None:
    config = load_yaml(PROMETHEUS / "prometheus.yml")
    assert sorted(config["rule_files"]) == sorted(p.name for p in RULE_FILES)
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "observer"]
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    assert targets == [f"observer:{Settings().http.port}"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    (alertmanagers,) = config["alerting"]["alertmanagers"]
    assert alertmanagers["static_configs"][0]["targets"] == ["alertmanager:9093"]


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_checks_the_rules(path: Path) -> None:
    done = run([tool("promtool"), "check", "rules", str(path)])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(path: Path) -> None:
    done = run([tool("promtool"), "test", "rules", path.name], cwd=PROMETHEUS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_each_alert_is_unit_tested_firing_at_its_severity_and_not_firing() -> None:
    assert {f for path in RULE_TESTS for f in load_yaml(path)["rule_files"]} == {
        p.name for p in RULE_FILES
    }
    seen: dict[str, set[str]] = defaultdict(set)
    for path in RULE_TESTS:
        for case in load_yaml(path)["tests"]:
            for check in case.get("alert_rule_test", []):
                expected = check.get("exp_alerts") or []
                seen[check["alertname"]].add("firing" if expected else "quiet")
                seen[check["alertname"]].update(a["exp_labels"]["severity"] for a in expected)
    for rule in rules():
        if not rule.recorded:
            states = seen[rule.name]
            assert {"firing", "quiet"} <= states, f"{rule.name}: tested {sorted(states)}"
            assert rule.labels["severity"] in states, f"{rule.name}: severity never tested"


def test_alerts_have_a_severity_a_summary_and_a_description() -> None:
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
                    assert {"summary", "description"} <= rule["annotations"].keys()


def test_rules_query_only_what_observer_declares() -> None:
    series = known_series()
    problems = {r.name: unknown_in(r.expr, series) for r in rules()}
    assert {name: found for name, found in problems.items() if found} == {}


def test_the_slo_burn_rates_follow_the_workbook() -> None:
    """98% objective: page at 14.4x over 1h and 5m, ticket at 6x over 6h and 30m."""
    by_name = {r.name: r for r in rules()}
    for window in ("5m", "30m", "1h", "6h"):
        recorded = by_name[f"environment:observer_answers_ungrounded:ratio_rate{window}"]
        assert f"observer_answers_ungrounded_total[{window}]" in recorded.expr
        assert f"observer_answers_scored_total[{window}]" in recorded.expr
    fast, slow = by_name["AnswerQualityBudgetBurnFast"], by_name["AnswerQualityBudgetBurnSlow"]
    assert fast.labels["severity"] == "page" and slow.labels["severity"] == "warn"
    for rule, factor, windows in ((fast, "14.4", ("1h", "5m")), (slow, "6", ("6h", "30m"))):
        for window in windows:
            condition = rf"ratio_rate{window} > \({re.escape(factor)} \* 0\.02\)"
            assert re.search(condition, rule.expr), f"{rule.name}: no {factor}x over {window}"


def test_amtool_checks_the_alertmanager_config() -> None:
    path = DEPLOY / "alertmanager" / "alertmanager.yml"
    done = run([tool("amtool"), "check-config", str(path)])
    assert done.returncode == 0, done.stdout + done.stderr
    routes = load_yaml(path)["route"]["routes"]
    # Every severity has a route; observer's own alerts are grouped by their incident.
    assert {f'severity="{s}"' for s in SEVERITIES} <= {
        m for route in routes for m in route["matchers"]
    }
    observer = [r for r in routes if 'service="observer"' in r["matchers"]]
    assert {m for r in observer for m in r["matchers"]} >= {f'severity="{s}"' for s in SEVERITIES}
    assert all(r["group_by"] == ["incident"] for r in observer)
