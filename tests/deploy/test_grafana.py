"""grafana/: the dashboards are what the SDK's typed builders make, and query only real metrics.

The dashboards are built by grafana/generate.py with grafana-foundation-sdk's
typed builders (pinned to Grafana 11.6); the PyPI package carries no JSON
schema, so the files are checked against the builders' output and read back
through the SDK's model classes without loss, and validated against the SDK
repository's `jsonschema/dashboard.jsonschema.json` of the same version (kept
beside this file; GRAFANA_DASHBOARD_JSONSCHEMA names another).

Every query may only use the metrics observer declares, and every panel's
PromQL must parse: promtool checks it wrapped as a recording rule.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from tests.deploy.support import (
    DASHBOARDS,
    DEPLOY,
    GRAFANA,
    as_promql,
    known_series,
    label_values_metric,
    load_yaml,
    panel_queries,
    panels,
    promql_metrics,
    run,
    tool,
    unknown_in,
)

SCHEMA_VARIABLE = "GRAFANA_DASHBOARD_JSONSCHEMA"
# grafana-foundation-sdk's jsonschema/dashboard.jsonschema.json, branch v11.6.x+cog-v0.0.x
# (commit aba721fd, Apache-2.0): the wheel on PyPI does not carry it.
VENDORED_SCHEMA = Path(__file__).with_name("dashboard.jsonschema.json")
NAMES = ["answer-quality.json", "pipeline-health.json"]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grafana_generate", GRAFANA / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_the_dev_extra_the_generator_says_which_extra_in_one_line() -> None:
    """`python -S`: no site-packages, as after `pip install -e .` without `[dev]`."""
    result = run([sys.executable, "-S", str(GRAFANA / "generate.py"), "--check"])
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        "grafana/generate.py needs grafana-foundation-sdk, from observer's dev extra: "
        '.venv/bin/pip install -e ".[dev]"\n'
    )


def board(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GRAFANA / "dashboards" / name).read_text())
    return data


def variables(name: str) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in board(name)["templating"]["list"]}


def test_exactly_the_two_dashboards() -> None:
    assert [p.name for p in DASHBOARDS] == NAMES


def test_the_files_are_what_the_typed_builders_make() -> None:
    make = generator()
    for name, build in make.BUILDERS.items():
        on_disk = (GRAFANA / "dashboards" / name).read_text()
        assert on_disk == make.render(build()), f"{name}: run .venv/bin/python grafana/generate.py"


@pytest.mark.parametrize("name", NAMES)
def test_the_sdk_models_read_every_field_back(name: str) -> None:
    """Dashboard.from_json keeps only what the 11.6 model knows: a lossless round trip."""
    data = board(name)
    again = json.loads(json.dumps(Dashboard.from_json(data), cls=JSONEncoder))
    assert again == data


@pytest.mark.parametrize("name", NAMES)
def test_valid_against_the_dashboard_json_schema_when_given(name: str) -> None:
    path = os.environ.get(SCHEMA_VARIABLE) or str(VENDORED_SCHEMA)
    import jsonschema

    schema = json.loads(Path(path).read_text())
    jsonschema.Draft7Validator(schema).validate(board(name))


@pytest.mark.parametrize("name", NAMES)
def test_template_variables_datasource_environment_query_type(name: str) -> None:
    found = variables(name)
    assert found["datasource"]["type"] == "datasource"
    assert found["datasource"]["query"] == "prometheus"
    for label in ("environment", "query_type"):
        variable = found[label]
        assert variable["type"] == "query" and variable["includeAll"] and variable["multi"]
        assert variable["query"].startswith("label_values(")
        assert variable["query"].endswith(f", {label})")
        assert variable["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("name", NAMES)
def test_every_panel_uses_the_datasource_variable_and_unique_ids(name: str) -> None:
    data = board(name)
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels(data):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)) and all(refs), panel["title"]


def test_dashboard_uids_are_unique_and_stable() -> None:
    assert [board(n)["uid"] for n in NAMES] == [
        "observer-answer-quality",
        "observer-pipeline-health",
    ]


@pytest.mark.parametrize("name", NAMES)
def test_queries_use_only_declared_metrics_and_labels(name: str) -> None:
    series = known_series()
    problems = {
        f"{title}: {expr}": found
        for title, expr in panel_queries(board(name))
        if (found := unknown_in(expr, series))
    }
    assert problems == {}
    for variable in variables(name).values():
        if variable["type"] == "query":
            assert label_values_metric(variable["query"]) in series


@pytest.mark.parametrize("name", NAMES)
def test_every_panel_query_parses_as_promql(name: str, tmp_path: Path) -> None:
    queries = panel_queries(board(name))
    rules = {
        "groups": [
            {
                "name": "panels",
                "rules": [
                    {"record": f"panel:query_{i}", "expr": as_promql(expr)}
                    for i, (_, expr) in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "panels.rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    done = run([tool("promtool"), "check", "rules", str(path)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(queries)} rules found" in done.stdout


def test_answer_quality_shows_what_the_on_call_needs() -> None:
    queries = [expr for _, expr in panel_queries(board("answer-quality.json"))]
    text = "\n".join(queries)
    metrics = set().union(*(promql_metrics(q) for q in queries))
    assert {
        "observer_answers_scored_total",
        "observer_answers_by_band_total",
        "observer_answers_by_crag_grade_total",
        "observer_answers_ungrounded_total",
        "observer_answers_ghost_citation_total",
        "observer_answers_abstained_total",
        "observer_answers_over_refusal_total",
        "observer_answer_confidence_ratio_bucket",
        "observer_answer_confidence_ratio_sum",
        "observer_answer_confidence_ratio_count",
        "observer_answer_citation_coverage_ratio_bucket",
        "observer_answer_faithfulness_ratio_sum",
    } <= metrics
    assert "histogram_quantile(" in text
    assert "sum by (query_type)" in text


def test_faithfulness_draws_the_alert_threshold_as_a_line_at_0_80() -> None:
    (panel,) = [
        p
        for p in panels(board("answer-quality.json"))
        if p["title"].startswith("Faithfulness by query type")
    ]
    assert "observer_answer_faithfulness_ratio_sum" in panel["targets"][0]["expr"]
    defaults = panel["fieldConfig"]["defaults"]
    assert 0.8 in [step["value"] for step in defaults["thresholds"]["steps"]]
    assert defaults["custom"]["thresholdsStyle"]["mode"] in {"line", "dashed", "line+area"}


@pytest.mark.parametrize(
    ("title", "metric", "warn", "page"),
    [
        ("Refusal rate by query type", "observer_answers_abstained_total", 0.20, 0.30),
        ("Over-refusal rate by query type", "observer_answers_over_refusal_total", 0.02, 0.05),
    ],
)
def test_refusal_panels_draw_their_default_rules_thresholds(
    title: str, metric: str, warn: float, page: float
) -> None:
    """docs/alerts.md: refusal_rate_high and over_refusal_rate_high, drawn as lines."""
    (panel,) = [p for p in panels(board("answer-quality.json")) if p["title"] == title]
    assert metric in panel["targets"][0]["expr"]
    steps = [step["value"] for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]]
    assert {warn, page} <= set(steps)


def test_pipeline_health_shows_what_the_on_call_needs() -> None:
    queries = [expr for _, expr in panel_queries(board("pipeline-health.json"))]
    metrics = set().union(*(promql_metrics(q) for q in queries))
    assert {
        "observer_watermark_lag_seconds",
        "observer_scores_pushed_total",
        "observer_scores_retried_total",
        "observer_scores_dropped_total",
        "observer_outbox_scores",
        "observer_source_requests_total",
        "observer_pass_duration_seconds_bucket",
        "observer_judge_calls_total",
        "observer_judge_tokens_total",
        "observer_judge_cost_usd_total",
        "observer_judge_errors_total",
        "observer_alerts_active",
        "observer_alert_incidents_open",
        "observer_trace_alerts_total",
    } <= metrics
    assert any('result="rate_limited"' in q for q in queries)


def test_provisioning_points_at_prometheus_and_the_mounted_dashboards() -> None:
    sources = load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"]
    assert source["url"] == "http://prometheus:9090"
    providers = load_yaml(GRAFANA / "provisioning" / "dashboards" / "observer.yml")
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    compose = load_yaml(DEPLOY / "docker-compose.yml")
    mounts = {
        (DEPLOY / volume.split(":")[0]).resolve(): volume.split(":")[1]
        for volume in compose["services"]["grafana"]["volumes"]
        if volume.startswith(".")
    }
    assert mounts[(GRAFANA / "dashboards").resolve()] == provider["options"]["path"]
    assert mounts[(GRAFANA / "provisioning").resolve()] == "/etc/grafana/provisioning"
