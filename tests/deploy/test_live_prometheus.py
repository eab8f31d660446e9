"""A real Prometheus scraping the real daemon, with deploy/'s rules: every dashboard query runs.

The daemon scores the demo traces from the fake Langfuse; Prometheus (on
127.0.0.1, 1 s scrapes and evaluations) scrapes its /metrics and evaluates
the pipeline and SLO rules. Then every panel query of both dashboards and
every variable query runs against it without error, every query over metrics
the daemon exposes returns data, every rule evaluates cleanly, and a healthy
daemon trips none of the pipeline alerts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import servers
from tests.daemon_helpers import demo_observations
from tests.deploy.support import (
    DASHBOARDS,
    ROOT,
    RULE_FILES,
    as_promql,
    daemon_env,
    panel_queries,
    promql_metrics,
)
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.openai_stub import OpenAIStub
from tests.fakes.receiver import Receiver
from tests.servers import free_port

TIMEOUT_S = 120.0


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def api(base: str, path: str, **params: str) -> Any:
    """A Prometheus API call; its `data`, or an AssertionError naming the error."""
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    try:
        body = get(url)
    except urllib.error.HTTPError as error:
        text = error.read()
        if not text.startswith(b"{"):  # not up yet: "Service Unavailable"
            raise AssertionError(f"{url}: {error.code} {text[:200]!r}") from None
        body = json.loads(text)
    assert body["status"] == "success", f"{params}: {body.get('error')}"
    return body["data"]


def values(base: str, query: str) -> list[float]:
    return [float(sample["value"][1]) for sample in api(base, "query", query=query)["result"]]


def scraped_twice(base: str) -> bool:
    """Answers scored, and every scored-answers series seen by at least two scrapes."""
    scored = values(base, "sum(observer_answers_scored_total)")
    scrapes = values(base, "min(count_over_time(observer_answers_scored_total[1m]))")
    return bool(scored and scored[0] > 0 and scrapes and scrapes[0] >= 2)


def rules_evaluated(base: str) -> bool:
    """Every rule evaluated without error, the SLO's ratio recorded over two samples."""
    rules = [rule for group in api(base, "rules")["groups"] for rule in group["rules"]]
    recorded = values(base, "count(environment:observer_answers_ungrounded:ratio_rate5m)")
    return bool(rules and all(rule["health"] == "ok" for rule in rules) and recorded)


def wait_until(what: str, check: Any) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            found = check()
        except (OSError, AssertionError):
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


@contextmanager
def running(command: list[str], log: Path, **kwargs: Any) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kwargs
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prometheus with deploy/'s rules, having scraped a daemon that scored the demo traces,
    judged them (against the OpenAI-compatible stub) and notified a webhook receiver, so
    that every metric a dashboard or rule reads exists."""
    workdir = tmp_path_factory.mktemp("live")
    daemon_port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "observer", "static_configs": [{"targets": [f"127.0.0.1:{daemon_port}"]}]}
        ],
    }
    with FakeLangfuse() as fake, OpenAIStub() as stub, Receiver() as receiver:
        fake.add_observations(demo_observations())
        daemon = [sys.executable, "-m", "observer", "run"]
        env = daemon_env(fake, daemon_port, workdir / "observer.sqlite")
        observer_config = workdir / "observer.toml"
        observer_config.write_text(
            f'[[alerts.notifiers]]\nname = "hook"\nkind = "webhook"\nurl = "{receiver.url}"\n'
        )
        env.update(
            OBSERVER_CONFIG=str(observer_config),
            OBSERVER_JUDGE__ENABLED="true",
            # The judge's agreement with people is read (none labelled: its series exist).
            OBSERVER_JUDGE__HUMAN_SCORE="faithful",
            # The shipped example canary is run at start: its series exist.
            OBSERVER_JUDGE__CANARY_FILE=str(ROOT / "examples" / "canary.jsonl"),
            OBSERVER_JUDGE__RATE="1.0",
            OBSERVER_JUDGE_MODEL="stub-judge",
            OBSERVER_JUDGE_BASE_URL=stub.url + "/v1",
            OPENAI_API_KEY="sk-test",
        )
        with (
            running(daemon, workdir / "observer.log", env=env, cwd=workdir),
            servers.prometheus(
                workdir / "prometheus", yaml.safe_dump(config), rule_files=RULE_FILES
            ) as server,
        ):
            try:
                wait_until("two scrapes of scored answers", lambda: scraped_twice(server.url))
                wait_until("every rule evaluated on them", lambda: rules_evaluated(server.url))
            except AssertionError:
                logs = [
                    path.read_text()[-2000:] for path in (workdir / "observer.log", server.log_path)
                ]
                raise AssertionError("\n".join(logs)) from None
            yield server.url


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_panel_query_runs_and_returns_data(prometheus: str, path: Path) -> None:
    queries = panel_queries(json.loads(path.read_text()))
    empty = []
    for title, expr in queries:
        query = as_promql(expr, rate_interval="1m", range_="5m")
        result = api(prometheus, "query", query=query)["result"]  # an error fails here
        if not result:
            empty.append(title)
    assert empty == []


def test_every_series_a_rule_reads_has_data(prometheus: str) -> None:
    """Alert conditions are false on a healthy daemon; what they read must exist."""
    missing = []
    for rule_file in RULE_FILES:
        for group in yaml.safe_load(rule_file.read_text())["groups"]:
            for rule in group["rules"]:
                for metric in promql_metrics(rule["expr"]):
                    if not api(prometheus, "query", query=f"count({metric})")["result"]:
                        missing.append((rule.get("alert") or rule.get("record"), metric))
    assert missing == []


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_variable_queries_find_values(prometheus: str, path: Path) -> None:
    for variable in json.loads(path.read_text())["templating"]["list"]:
        if variable["type"] != "query":
            continue
        metric = variable["query"].split("(", 1)[1].split("{", 1)[0].split(",", 1)[0].strip()
        label = variable["name"]
        values = api(prometheus, f"label/{label}/values", **{"match[]": metric})
        assert values, f"no {label} values on {metric}"


def test_the_rules_evaluate_cleanly_and_a_healthy_daemon_trips_no_pipeline_alert(
    prometheus: str,
) -> None:
    groups = api(prometheus, "rules")["groups"]
    assert {g["file"] for g in groups} == {str(p) for p in RULE_FILES}
    for group in groups:
        for rule in group["rules"]:
            assert rule["health"] == "ok" and not rule.get("lastError"), rule["name"]
    ratios = api(prometheus, "query", query="environment:observer_answers_ungrounded:ratio_rate5m")
    assert ratios["result"], "the SLO's recorded ratio is missing"
    firing = 'ALERTS{alertname=~"Observer.*", alertstate="firing"}'
    assert [a["metric"] for a in api(prometheus, "query", query=firing)["result"]] == []
    # Before its first pass completes a daemon's lag counts from its lookback's start (it is
    # that far behind): ObserverLagHigh may go pending, and clears once the pass is done.
    wait_until(
        "no pipeline alert pending once passes complete",
        lambda: api(prometheus, "query", query='ALERTS{alertname=~"Observer.*"}')["result"] == [],
    )
