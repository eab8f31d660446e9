"""What the deploy tests share: paths, tools, and reading metric names out of PromQL.

``exported_metrics()`` is every series name observer can expose, from the one
module that declares them (``observer.telemetry.metrics.Metrics``), each with
its labels: a counter ``x`` is exposed as ``x_total``, a histogram ``h`` as
``h_bucket`` (plus ``le``), ``h_sum`` and ``h_count``. ``promql_metrics(expr)``
is every metric name an expression selects, ``promql_labels(expr)`` every label
it matches on or aggregates by, so a test can hold dashboards and rules to
those declarations.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.metrics import MetricWrapperBase

from observer.telemetry.metrics import Metrics
from tests.daemon_helpers import DEMO_LOOKBACK_S
from tests.fakes.langfuse_server import FakeLangfuse
from tests.servers import require_binary

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
GRAFANA = ROOT / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
RULE_FILES = sorted(PROMETHEUS.glob("*.rules.yml"))
RULE_TESTS = sorted(PROMETHEUS.glob("*_test.yml"))

# Series Prometheus makes itself: `up` for every scrape target.
PROMETHEUS_SERIES = {"up": frozenset({"job", "instance"})}
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = frozenset({"job", "instance"})


def tool(name: str) -> str:
    """A command-line tool: the virtualenv's own (pip-installed), else one on PATH.

    Absent: skipped, or failed under OBSERVER_REQUIRE_SERVERS=1 (tests.servers).
    """
    beside_python = Path(sys.executable).parent / name
    return require_binary(str(beside_python) if beside_python.exists() else name)


def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, **kwargs)


def daemon_env(fake: FakeLangfuse, port: int, state: Path) -> dict[str, str]:
    """The environment for `observer run` against `fake`, on 127.0.0.1:`port`, quick to poll."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBSERVER_", "LANGFUSE_"))}
    env.update(
        LANGFUSE_PUBLIC_KEY=fake.public_key,
        LANGFUSE_SECRET_KEY=fake.secret_key,
        LANGFUSE_BASE_URL=fake.url,
        OBSERVER_HTTP_HOST="127.0.0.1",
        OBSERVER_HTTP_PORT=str(port),
        OBSERVER_STATE__PATH=str(state),
        OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S,
        OBSERVER_SOURCE__POLL_INTERVAL_S="1",
        OBSERVER_SOURCE__REQUESTS_PER_MINUTE="6000",
        OBSERVER_RUN__SHUTDOWN_GRACE_S="5",
        OBSERVER_LOG__FORMAT="json",
        OBSERVER_LOG__LEVEL="warning",
    )
    return env


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


# -- what observer exports ---------------------------------------------------------------------


def exported_metrics() -> dict[str, frozenset[str]]:
    """Every series name observer can expose -> its label names."""
    names: dict[str, frozenset[str]] = {}
    for collector in vars(Metrics()).values():
        if not isinstance(collector, MetricWrapperBase):
            continue
        # prometheus_client keeps the declared name and labels on the collector itself;
        # a family without children yet (labelled metrics) shows no samples to read them from.
        name, kind = collector._name, collector._type
        labels = frozenset(collector._labelnames)
        if kind == "counter":
            names[f"{name}_total"] = labels
        elif kind == "histogram":
            names[f"{name}_bucket"] = labels | {"le"}
            names[f"{name}_sum"] = labels
            names[f"{name}_count"] = labels
        elif kind == "gauge":
            names[name] = labels
        else:  # a new kind: teach this function its exposed names
            raise AssertionError(f"{name}: metric type {kind} not handled")
    return names


@dataclass(frozen=True)
class Rule:
    file: str
    name: str  # the alert or the recorded series
    expr: str
    labels: dict[str, str]
    recorded: bool


def rules() -> list[Rule]:
    found = []
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            for rule in group["rules"]:
                recorded = "record" in rule
                found.append(
                    Rule(
                        file=path.name,
                        name=rule["record"] if recorded else rule["alert"],
                        expr=rule["expr"],
                        labels=rule.get("labels", {}),
                        recorded=recorded,
                    )
                )
    return found


def recorded_series() -> dict[str, frozenset[str]]:
    """The series the recording rules write -> their labels (those they aggregate by)."""
    return {r.name: frozenset(promql_grouping(r.expr)) for r in rules() if r.recorded}


def known_series() -> dict[str, frozenset[str]]:
    """What a dashboard or rule may query: observer's metrics, `up`, recorded series."""
    return {**exported_metrics(), **PROMETHEUS_SERIES, **recorded_series()}


# -- reading PromQL ---------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_GRAFANA_VARIABLE = re.compile(r"\$\{?\w+\}?")
_IDENTIFIER = re.compile(r"(?<![\w.:$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_SELECTOR = re.compile(r"(?<![\w.:$])([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^{}]*)\}")
_KEYWORDS = frozenset(
    {
        "and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
        "group_right", "bool", "offset", "inf", "nan", "atan2",
    }
)  # fmt: skip


def _without_strings(expr: str) -> str:
    return _STRING.sub('""', _GRAFANA_VARIABLE.sub("", expr))


def promql_metrics(expr: str) -> set[str]:
    """The metric names `expr` selects (function names, keywords and labels left out)."""
    text = _without_strings(expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def promql_grouping(expr: str) -> set[str]:
    """Labels named in by / without / on / ignoring / group_left / group_right clauses."""
    text = _without_strings(expr)
    return {
        label.strip()
        for match in _GROUPING.finditer(text)
        for label in match.group(2).split(",")
        if label.strip()
    }


def promql_matchers(expr: str) -> dict[str, set[str]]:
    """metric name -> the labels its selector matches on."""
    found: dict[str, set[str]] = {}
    for match in _SELECTOR.finditer(_without_strings(expr)):
        found.setdefault(match.group(1), set()).update(_MATCHER_LABEL.findall(match.group(2)))
    return found


def label_values_metric(query: str) -> str:
    """The metric of a Grafana `label_values(metric{...}, label)` variable query."""
    match = re.fullmatch(
        r"label_values\(\s*([A-Za-z_:][\w:]*)\s*(\{[^{}]*\})?\s*,\s*\w+\s*\)", query
    )
    assert match, f"not a label_values(metric, label) query: {query!r}"
    return match.group(1)


def as_promql(expr: str, *, rate_interval: str = "5m", range_: str = "6h") -> str:
    """A Grafana query as plain PromQL: its built-in intervals fixed, template variables `.*`."""
    text = expr.replace("$__rate_interval", rate_interval).replace("$__range", range_)
    text = text.replace("$__interval", "1m")
    return _GRAFANA_VARIABLE.sub(".*", text)


def unknown_in(expr: str, series: dict[str, frozenset[str]]) -> list[str]:
    """What `expr` queries that `series` does not declare: names, then labels."""
    problems = [f"metric {name}" for name in sorted(promql_metrics(expr) - series.keys())]
    for name, labels in promql_matchers(expr).items():
        allowed = series.get(name, frozenset()) | TARGET_LABELS
        problems += [f"label {label} of {name}" for label in sorted(labels - allowed)]
    in_use = set(TARGET_LABELS).union(
        *(series.get(name, frozenset()) for name in promql_metrics(expr))
    )
    problems += [f"grouping label {label}" for label in sorted(promql_grouping(expr) - in_use)]
    return problems


# -- dashboards ---------------------------------------------------------------------------------


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' collapsed children included, rows themselves left out."""
    found = []
    for panel in board.get("panels", []):
        if panel["type"] == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def panel_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel."""
    return [(p["title"], t["expr"]) for p in panels(board) for t in p.get("targets", [])]
