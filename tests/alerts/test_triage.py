"""The triage of a firing window rule: where, since when, whose (observer.alerts.triage).

Synthetic histories with a planted change find it (segment, onset, layer); histories
where the bad samples are spread evenly name no segment.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.alerts.regression import compare, default_regression_rules
from observer.alerts.rules import WindowRule, parse_expression
from observer.alerts.triage import (
    blame,
    change_point,
    is_bad,
    layer_of,
    place,
    triage,
    z_score,
)
from observer.state.rows import Row, Value

T = 1_800_000_000.0  # the alert's moment
PROD = (("environment", "production"),)
TYPES = ("pricing", "howto", "other")


def grounding_rule(**changes: object) -> WindowRule:
    rule = WindowRule(
        "numeric_grounding_low",
        parse_expression("numeric_grounding", "test"),
        "mean",
        "<",
        0.9,
        1800.0,
        warn_threshold=0.95,
        min_samples=20,
        group_by=("environment",),
    )
    return dataclasses.replace(rule, **changes)  # type: ignore[arg-type]


def row(
    i: int, at: float, values: Mapping[str, Value], query_type: str, environment: str = "production"
) -> Row:
    return Row(at, dict(values), f"t{i}", "p1", environment, query_type)


def planted(
    onset_ago_s: float = 3000.0, seed: int = 1, crag: str = "HIGH", span_s: float = 7200.0
) -> list[Row]:
    """Two hours of answers every 3 s; from `onset_ago_s` before T, 90% of the pricing
    answers have numbers the chunks do not hold; elsewhere 3% do."""
    rng = random.Random(seed)
    rows = []
    for i in range(int(span_s // 3)):
        at = T - span_s + i * 3
        query_type = rng.choice(TYPES)
        broken = at > T - onset_ago_s and query_type == "pricing"
        bad = rng.random() < (0.9 if broken else 0.03)
        values = {"numeric_grounding": 0.5 if bad else 1.0, "crag_grade": crag}
        rows.append(row(i, at, values, query_type))
    return rows


def test_a_drop_confined_to_one_query_type_is_found_with_its_onset_and_layer() -> None:
    found = triage(grounding_rule(), PROD, planted(), T)
    lead = found.lead
    assert lead is not None and lead.where == (("query_type", "pricing"),)
    assert lead.bad_rate > 0.8 and lead.rest_bad_rate < 0.1
    assert lead.share > 0.8
    assert lead.value is not None and lead.rest_value is not None and lead.value < lead.rest_value
    assert found.onset is not None and abs(found.onset - (T - 3000)) < 180
    assert not found.onset_open
    assert found.layer == "generation"
    assert found.examples and all(e.trace_id.startswith("t") for e in found.examples)
    examples = {e.trace_id for e in found.examples}
    pricing = {r.trace_id for r in planted() if r.query_type == "pricing"}
    assert examples <= pricing  # from the guilty segment, not the whole window


def test_the_onset_is_when_the_change_began_not_when_the_rule_fired() -> None:
    for ago in (1200.0, 3000.0, 5400.0):
        found = triage(grounding_rule(), PROD, planted(onset_ago_s=ago), T)
        assert found.onset is not None and abs(found.onset - (T - ago)) < 180, ago


def test_retrieval_is_blamed_when_the_bad_answers_had_crag_low() -> None:
    found = triage(grounding_rule(), PROD, planted(crag="LOW"), T)
    assert found.layer == "retrieval"


def test_other_groups_and_rows_out_of_scope_are_not_counted() -> None:
    rows = planted() + [
        row(100_000 + i, T - 10 - i, {"numeric_grounding": 0.0}, "howto", environment="staging")
        for i in range(300)
    ]
    found = triage(grounding_rule(), PROD, rows, T)
    assert found.lead is not None and found.lead.where == (("query_type", "pricing"),)
    scoped = triage(grounding_rule(where=(("query_type", "howto"),)), PROD, planted(), T)
    assert scoped.segments == ()  # the filter fixes query_type: nothing to slice by


@pytest.mark.parametrize(
    ("values", "layer"),
    [
        ({"crag_grade": "LOW"}, "retrieval"),
        ({"crag_grade": "HIGH"}, "generation"),
        ({"crag_grade": "HIGH", "missing_chunks": 1.0}, "index"),
        ({"crag_grade": "LOW", "stale_citations": 2.0}, "index"),
        ({"crag_grade": "HIGH", "abstained": True}, "abstention"),
        ({"crag_grade": "AMBIGUOUS", "abstained": True, "over_refusal": True}, "abstention"),
        ({"crag_grade": "LOW", "abstained": True}, None),  # refusing without evidence is right
        ({"crag_grade": "AMBIGUOUS"}, None),
        ({}, None),
    ],
)
def test_the_layer_of_one_bad_sample(values: Mapping[str, Value], layer: str | None) -> None:
    assert layer_of(values) == layer


def test_no_layer_is_named_without_a_majority() -> None:
    layer, shares, unclear = blame(Counter({"retrieval": 5, "generation": 5}))
    assert layer is None
    assert dict(shares) == {"retrieval": 0.5, "generation": 0.5}
    assert unclear == ()
    assert blame(Counter()) == (None, (), ())


def test_bad_samples_without_a_retrieval_score_are_unclear_and_say_why() -> None:
    """A trace that recorded no retrieval score has no CRAG grade (unknown, not LOW):
    its bad samples point at no layer, and the triage counts why."""
    rule = grounding_rule()
    rows = [
        row(i, T - 1 - i, {"numeric_grounding": 0.5 if i % 2 else 1.0}, "pricing")
        for i in range(400)
    ]
    found = triage(rule, PROD, rows, T)
    assert found.layer is None and found.layer_shares == ()
    assert found.unclear == (("no_retrieval_score", 200),)
    assert place({"abstained": True, "crag_grade": "LOW"}) == "refused_without_evidence"
    assert place({"crag_grade": "AMBIGUOUS"}) == "ambiguous"


def test_every_sample_bad_is_the_whole_group_not_no_segment() -> None:
    rows = [
        row(i, T - 1 - i, {"numeric_grounding": 0.5, "crag_grade": "HIGH"}, TYPES[i % 3])
        for i in range(300)
    ]
    found = triage(grounding_rule(), PROD, rows, T)
    assert found.whole_group and found.segments == ()
    assert found.layer == "generation"


@pytest.mark.parametrize(
    ("rule_changes", "value", "bad"),
    [
        ({}, 0.94, True),  # past warn's 0.95
        ({}, 0.95, False),
        ({"warn_threshold": None}, 0.94, False),  # only the page line, 0.9
        ({"warn_threshold": None}, 0.89, True),
    ],
)
def test_a_sample_is_bad_past_the_first_line(
    rule_changes: dict[str, object], value: float, bad: bool
) -> None:
    assert is_bad(grounding_rule(**rule_changes), value) is bad


def test_a_flag_sample_is_bad_when_true() -> None:
    rule = WindowRule("u", parse_expression("ungrounded", "t"), "rate", ">", 0.05, 900.0)
    assert is_bad(rule, 1.0) and not is_bad(rule, 0.0)


@pytest.mark.parametrize(
    ("bad_in", "n_in", "bad_out", "n_out", "sign"),
    [(90, 100, 10, 100, 1), (10, 100, 90, 100, -1), (5, 10, 50, 100, 0), (0, 0, 3, 10, 0)],
)
def test_z_scores(bad_in: int, n_in: int, bad_out: int, n_out: int, sign: int) -> None:
    z = z_score(bad_in, n_in, bad_out, n_out)
    assert (z > 3) if sign > 0 else (z < -3) if sign < 0 else z == 0


def test_the_change_point_splits_two_rates() -> None:
    times = [float(i) for i in range(200)]
    bad = [i >= 120 for i in range(200)]
    assert change_point(times, bad, 0.0, 199.0) == 120.0
    # Constrained to a range, the best split inside it.
    assert change_point(times, bad, 130.0, 199.0) == 130.0
    assert change_point(times, [False] * 200, 10.0, 199.0) == 10.0  # nothing changes: low


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=8), min_size=2, max_size=4),
    bad_per=st.integers(min_value=0, max_value=4),
    repeat=st.integers(min_value=5, max_value=12),
)
def test_bad_samples_spread_evenly_name_no_segment(
    sizes: list[int], bad_per: int, repeat: int
) -> None:
    """Every query type holds the same share of bad samples: nothing stands out."""
    rows: list[Row] = []
    i = 0
    for kind, size in enumerate(sizes):
        n = size * repeat
        bad = min(n, bad_per * size)
        for k in range(n):
            values = {"numeric_grounding": 0.5 if k < bad else 1.0, "crag_grade": "HIGH"}
            rows.append(row(i, T - 1 - i, values, f"type{kind}"))
            i += 1
    # Evenness only holds when each type's bad share is the same.
    shares = {r.query_type for r in rows}
    ratios = {
        sum(1 for r in rows if r.query_type == q and r.values["numeric_grounding"] == 0.5)
        / sum(1 for r in rows if r.query_type == q)
        for q in shares
    }
    found = triage(grounding_rule(), PROD, rows, T)
    if len(ratios) == 1:
        assert found.segments == ()


@given(
    planted_size=st.integers(min_value=30, max_value=120),
    rest_size=st.integers(min_value=60, max_value=300),
    inside_bad=st.floats(min_value=0.7, max_value=1.0),
    outside_bad=st.floats(min_value=0.0, max_value=0.1),
    name=st.sampled_from(TYPES),
)
def test_a_planted_segment_leads(
    planted_size: int, rest_size: int, inside_bad: float, outside_bad: float, name: str
) -> None:
    rows: list[Row] = []
    others = [t for t in TYPES if t != name]
    for i in range(planted_size + rest_size):
        inside = i < planted_size
        share = inside_bad if inside else outside_bad
        count = planted_size if inside else rest_size
        index = i if inside else i - planted_size
        bad = index < round(share * count)
        values = {"numeric_grounding": 0.5 if bad else 1.0, "crag_grade": "HIGH"}
        kind = name if inside else others[i % 2]
        rows.append(row(i, T - 1 - (i * 7919) % 1700, values, kind))
    found = triage(grounding_rule(), PROD, rows, T)
    assert found.lead is not None and found.lead.where == (("query_type", name),)
    assert found.layer == "generation"


OLD, NEW = "2026.12.01", "2026.12.03-rc2"


def release_scenario(seed: int = 3, rate: float = 0.5, span_s: float = 7200.0) -> list[Row]:
    """Issue 30's scenario: `span_s` of answers, `rate` a second (two hours, one every 2 s);
    release OLD until 50 minutes before T, then NEW on half the traffic; on NEW, answers to
    pricing questions carry numbers the (good, CRAG HIGH) chunks do not hold."""
    rng = random.Random(seed)
    rows = []
    for i in range(int(span_s * rate)):
        at = T - span_s + i / rate
        release = NEW if at > T - 3000 and rng.random() < 0.5 else OLD
        query_type = rng.choice(TYPES)
        broken = release == NEW and query_type == "pricing"
        grounded = rng.uniform(0.3, 0.7) if broken and rng.random() < 0.9 else 1.0
        if not broken and rng.random() < 0.03:
            grounded = 0.5
        values = {"numeric_grounding": grounded, "crag_grade": "HIGH", "citation_coverage": 0.9}
        dims = {"release": release, "model": "gpt-x", "trace_name": "rag-answer"}
        rows.append(Row(at, values, f"t{i}", "p1", "production", query_type, dims))
    return rows


def test_the_release_scenario_names_the_release_the_query_type_the_onset_and_generation() -> None:
    rows = release_scenario()
    found = triage(grounding_rule(), PROD, rows, T)  # the rule groups by environment only
    assert found.lead is not None
    assert dict(found.lead.where) == {"release": NEW, "query_type": "pricing"}
    assert found.onset is not None and abs(found.onset - (T - 3000)) < 180
    assert found.layer == "generation"
    guilty = {
        r.trace_id for r in rows if r.dims.get("release") == NEW and r.query_type == "pricing"
    }
    assert found.examples and {e.trace_id for e in found.examples} <= guilty
    # The release alone and the query type alone are named too, behind the pair.
    named = [dict(s.where) for s in found.segments]
    assert {"release": NEW} in named and {"query_type": "pricing"} in named


def test_the_release_regression_rule_flags_the_new_release_on_that_history() -> None:
    (rule,) = default_regression_rules()
    findings = compare(rule, release_scenario(), T)
    flagged = {(dict(f.group)["query_type"], f.signal) for f in findings}
    assert ("pricing", "numeric_grounding") in flagged
    assert all(f.new == NEW and f.before == OLD for f in findings)
    assert {q for q, _ in flagged} == {"pricing"}  # the other query types are as good
    (pricing,) = [f for f in findings if f.signal == "numeric_grounding"]
    assert pricing.value < 0.75 < 0.95 < pricing.before_value
    assert "release 2026.12.03-rc2 is worse than 2026.12.01 on numeric_grounding" in pricing.text(
        "release"
    )


def test_no_release_is_flagged_when_the_new_one_is_as_good() -> None:
    rows = [
        Row(r.at, {**r.values, "numeric_grounding": 1.0}, r.trace_id, r.project_id,
            r.environment, r.query_type, r.dims)
        for r in release_scenario()
    ]  # fmt: skip
    (rule,) = default_regression_rules()
    assert compare(rule, rows, T) == []


def test_a_change_older_than_the_history_read_says_it_began_then_or_earlier() -> None:
    """The history starts after the change began (observer started late, or the state
    file is new): the onset is where the history starts, and says so."""
    rows = [r for r in planted() if r.at > T - 1500]
    found = triage(grounding_rule(), PROD, rows, T)
    assert found.onset is not None and found.onset_open
    assert found.onset <= T - 1500 + 120
