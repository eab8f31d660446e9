"""`alerts status` on a terminal: readable at 80 and 100 columns, wrapped only between
words; off a terminal, plain columns, one row a line."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from observer.alerts.regression import default_regression_rules
from observer.alerts.rules import default_window_rules
from observer.alerts.service import RuleStatus
from observer.app import AlertStatus
from observer.state.rows import AlertState, Incident, Symptom
from observer.views import alerts as view

T = 1_800_000_000.0
GROUPS = [
    (("environment", "production"), ("query_type", "troubleshooting")),
    (("environment", "production"), ("query_type", "pricing")),
    (("environment", "staging"), ("query_type", "none")),
]


def report() -> AlertStatus:
    rules = (*default_window_rules(), *default_regression_rules())
    statuses = []
    for i, rule in enumerate(rules[:-1]):
        group = GROUPS[i % len(GROUPS)] if not getattr(rule, "pipeline", False) else ()
        state = AlertState(
            status=("firing", "pending", "ok")[i % 3],
            severity="page" if i % 3 == 0 else "warn",
            since=T - 600,
            value=0.0299 + i,
            samples=812 if i % 4 else 12,
            evaluated_at=T,
            held=i == 3,
        )
        statuses.append(RuleStatus(rule, group, state, T))
    regression = rules[-1]
    group = (*GROUPS[1], ("release", "2026.12.07-rc1"), ("signal", "citation_coverage"))
    statuses.append(
        RuleStatus(
            regression, group, AlertState("firing", "page", T - 60, T, value=0.5, samples=140), T
        )
    )
    symptoms = tuple(
        Symptom(s.rule.name, s.group, s.rule.name, "page", 0.4, T - 60, "summary")
        for s in statuses[:3]
    )
    incident = Incident(
        "observer-incident-0123456789abcdef01234567", "production",
        (("release", "2026.12.07-rc1"),), T - 3000, T - 60, T, symptoms,
    )  # fmt: skip
    return AlertStatus(statuses, {}, [incident], T, rules, 1)


def rendered(width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False, color_system=None)
    for item in view.status_rich(report(), width):
        console.print(item, highlight=False, markup=False)
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 100])
def test_the_tables_fit_the_terminal_and_wrap_only_between_words(width: int) -> None:
    shown = rendered(width)
    lines = shown.splitlines()
    assert all(len(line) <= width for line in lines), max(map(len, lines))
    words = set(re.findall(r"\S+", shown))
    rows = view.status_rows(report())
    for row in rows:
        assert row["rule"] in words  # a rule's name is never cut
        for key, value in row["group"].items():
            told = value if value != "none" else None
            if told is not None and key in ("environment", "query_type"):
                assert told in words, told
    for token in ("firing", "pending", "(held:", "unhealthy)", "release=2026.12.07-rc1", "07:10Z"):
        assert token in words, token


def test_off_a_terminal_every_row_is_one_line_of_plain_columns() -> None:
    lines = view.status_plain(report())
    header = lines[0].split()
    assert header == ["rule", "group", "value", "samples", "state", "since"]
    rules = {r.name for r in report().rules}
    body = lines[1 : lines.index(next(line for line in lines if "windows end at" in line))]
    assert {line.split()[0] for line in body} == rules  # nothing wrapped
    assert any(line.startswith("incident observer-incident-0123") for line in lines)
    assert "  low_band_rate_high (query_type=pricing): page" in lines or any(
        "(query_type=pricing): page" in line for line in lines
    )
    assert not any("=none" in line for line in lines)  # no query type, in words


def test_as_json_the_incidents_are_listed_with_their_symptoms() -> None:
    document = view.status_document(report())
    (incident,) = document["incidents"]
    assert incident["cause"] == {"release": "2026.12.07-rc1"}
    assert len(incident["symptoms"]) == 3
    assert "release_regression" in {row["rule"] for row in document["rules"]}
