"""Incidents (observer.alerts.incidents): the alerts one cause trips, told as one.

Table-driven over `tell`, the whole of it: which alerts share a cause, when one joins
an incident or opens one, what each message is to its incident, and that an incident
resolves once, when its last symptom does, telling every notifier it reached.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.alerts.incidents import cause_of, forget, tell
from observer.state.rows import GroupKey, Incident, Notification, Segment, Triage

T = 1_800_000_000.0
PRICING: GroupKey = (("environment", "production"), ("query_type", "pricing"))
NEW = "2026.12.07-rc1"


def lead(*where: tuple[str, str]) -> Triage:
    segment = Segment(where, 100, 80, 0.8, 0.05, 0.5, 0.95, 0.9, 75.0)
    return Triage(samples=400, bad=90, segments=(segment,), onset=T - 3000, layer="generation")


def alert(
    rule: str, group: GroupKey = PRICING, transition: str = "firing", **changes: Any
) -> Notification:
    base = Notification(
        id=f"{rule}-{transition}",
        dedup_key=f"key:{rule}:{group}",
        rule=rule,
        kind="window",
        state="resolved" if transition in ("resolved", "closing") else "firing",
        severity="page",
        group=group,
        summary=f"{rule} summary",
        description="",
        started_at=datetime.fromtimestamp(T, UTC),
        sent_at=datetime.fromtimestamp(T, UTC),
        transition=transition,
    )
    return dataclasses.replace(base, **changes)


def told(
    known: dict[str, Incident], n: Notification, at: float, names: tuple[str, ...] = ("pd",)
) -> tuple[Notification, tuple[str, ...]]:
    result = tell(known, n, names, at)
    known[result.incident.id] = result.incident
    return result.notification, result.also


@pytest.mark.parametrize(
    ("notification", "cause"),
    [
        # The triage's leading segment, a release before a query type.
        (
            alert(
                "grounding",
                (("environment", "production"),),
                triage=lead(("query_type", "pricing"), ("release", NEW)),
            ),
            ("release", NEW),
        ),
        # The group's own labels count: a rule grouped by query type, led by a release.
        (
            alert(
                "low_band",
                triage=lead(
                    ("release", NEW),
                ),
            ),
            ("release", NEW),
        ),
        # A release regression names its release in its group.
        (
            alert(
                "release_regression", (*PRICING, ("release", NEW), ("signal", "numeric_grounding"))
            ),
            ("release", NEW),
        ),
        # A model before a query type; `none` is no cause.
        (
            alert(
                "x",
                triage=lead(
                    ("model", "gpt-y"),
                ),
            ),
            ("model", "gpt-y"),
        ),
        (alert("x", (("environment", "production"), ("query_type", "none"))), None),
        # The whole group bad: the group itself (its query type) is the cause.
        (alert("x", triage=Triage(samples=50, bad=50)), ("query_type", "pricing")),
        # About observer or its judge, or missing data: no cause.
        (alert("pipeline_lag_high", (), layer="pipeline"), None),
        (alert("judge_error_rate_high", layer="judge"), None),
        (alert("x", transition="no_data"), None),
    ],
)
def test_the_cause_of_an_alert(notification: Notification, cause: tuple[str, str] | None) -> None:
    assert cause_of(notification) == cause


def test_a_bad_release_is_one_incident_that_resolves_once() -> None:
    known: dict[str, Incident] = {}
    band = alert(
        "low_band_rate_high",
        triage=lead(
            ("release", NEW),
        ),
    )
    regression = alert(
        "release_regression", (*PRICING, ("release", NEW), ("signal", "numeric_grounding"))
    )
    grounding = alert(
        "numeric_grounding_low",
        (("environment", "production"),),
        triage=lead(("query_type", "pricing"), ("release", NEW)),
    )
    first, _ = told(known, band, T)
    second, _ = told(known, regression, T + 300, ("pd", "slack"))
    third, _ = told(known, grounding, T + 600)
    assert [first.role, second.role, third.role] == ["opened", "joined", "joined"]
    ids = {m.incident.id for m in (first, second, third) if m.incident is not None}
    assert len(ids) == 1
    (incident,) = known.values()
    assert incident.cause == (("release", NEW),)
    assert incident.since == T - 3000  # when the change began, the triage's onset
    assert [s.rule for s in incident.symptoms] == [
        "low_band_rate_high",
        "release_regression",
        "numeric_grounding_low",
    ]
    # Symptoms end one by one; the incident resolves with the last, and says so once,
    # also to the notifiers only an earlier symptom reached.
    ends = [
        told(known, dataclasses.replace(n, transition="resolved", state="resolved"), T + 3600 + i)
        for i, n in enumerate((band, grounding, regression))
    ]
    assert [m.role for m, _ in ends] == ["symptom_resolved", "symptom_resolved", "resolved"]
    assert ends[-1][1] == ("slack",)
    (incident,) = known.values()
    assert not incident.open and incident.resolved_at == T + 3602


def test_alerts_of_other_causes_environments_or_too_late_are_incidents_of_their_own() -> None:
    known: dict[str, Incident] = {}
    told(
        known,
        alert(
            "a",
            triage=lead(
                ("release", NEW),
            ),
        ),
        T,
    )
    other_cause, _ = told(
        known,
        alert(
            "b",
            triage=lead(
                ("release", "rc9"),
            ),
        ),
        T + 60,
    )
    staging = (("environment", "staging"), ("query_type", "pricing"))
    elsewhere, _ = told(
        known,
        alert(
            "c",
            staging,
            triage=lead(
                ("release", NEW),
            ),
        ),
        T + 60,
    )
    late, _ = told(
        known,
        alert(
            "d",
            triage=lead(
                ("release", NEW),
            ),
        ),
        T + 901,
    )
    assert [m.role for m in (other_cause, elsewhere, late)] == ["opened"] * 3
    assert len(known) == 4


def test_each_symptom_extends_the_correlation_window() -> None:
    known: dict[str, Incident] = {}
    for i, at in enumerate((T, T + 800, T + 1600)):  # each within 15 minutes of the last
        message, _ = told(
            known,
            alert(
                f"r{i}",
                triage=lead(
                    ("release", NEW),
                ),
            ),
            at,
        )
    assert message.role == "joined" and len(known) == 1


def test_with_correlation_off_every_alert_is_its_own_incident_keyed_as_before() -> None:
    known: dict[str, Incident] = {}
    for rule in ("a", "b"):
        n = alert(
            rule,
            triage=lead(
                ("release", NEW),
            ),
        )
        result = tell(known, n, ("pd",), T, window_s=0)
        known[result.incident.id] = result.incident
        assert result.notification.role == "opened"
        assert result.incident.id == n.dedup_key  # PagerDuty's key as before incidents
    assert len(known) == 2


def test_a_held_alert_told_at_last_opens_or_joins_its_incident() -> None:
    known: dict[str, Incident] = {}
    told(
        known,
        alert(
            "a",
            triage=lead(
                ("release", NEW),
            ),
        ),
        T,
    )
    released, _ = told(known, alert("faithfulness_low", transition="released",
                                    triage=lead(("release", NEW),)), T + 60)  # fmt: skip
    assert released.role == "joined"


def test_repeats_escalations_and_reposts_update_the_incident() -> None:
    known: dict[str, Incident] = {}
    n = alert(
        "a",
        triage=lead(
            ("release", NEW),
        ),
    )
    told(known, n, T)
    for transition in ("renotified", "escalated", "refresh", "closing"):
        message, _ = told(known, dataclasses.replace(n, transition=transition, value=0.7), T + 60)
        assert message.role == "update"
    (incident,) = known.values()
    assert len(incident.symptoms) == 1 and incident.symptoms[0].value == 0.7


def test_an_alert_firing_before_incidents_existed_is_its_own_when_next_told() -> None:
    """A state file migrated while an alert fired: its repost and resolve find no incident;
    it becomes one of its own, keyed as its page was, and resolves once."""
    known: dict[str, Incident] = {}
    n = alert("a", started_at=datetime.fromtimestamp(T - 600, UTC))
    again, _ = told(known, dataclasses.replace(n, transition="refresh"), T)
    assert again.role == "update" and again.incident is not None
    assert again.incident.id == n.dedup_key
    ended, _ = told(known, dataclasses.replace(n, transition="resolved", state="resolved"), T + 60)
    assert ended.role == "resolved"


@given(
    times=st.lists(st.floats(min_value=0, max_value=7200), min_size=1, max_size=12),
    causes=st.lists(st.sampled_from(["rc1", "rc2", "none"]), min_size=12, max_size=12),
)
def test_every_symptom_is_in_exactly_one_open_incident_until_it_resolves(
    times: list[float], causes: list[str]
) -> None:
    known: dict[str, Incident] = {}
    for i, at in enumerate(sorted(times)):
        n = alert(
            f"r{i}",
            triage=lead(
                ("release", causes[i]),
            ),
        )
        told(known, n, T + at)
    for i in range(len(times)):
        holding = [
            inc
            for inc in known.values()
            if any(s.rule == f"r{i}" and s.firing for s in inc.symptoms)
        ]
        assert len(holding) == 1 and holding[0].open


def test_a_rule_removed_from_the_configuration_leaves_no_incident_open() -> None:
    known: dict[str, Incident] = {}
    told(
        known,
        alert(
            "kept",
            triage=lead(
                ("release", NEW),
            ),
        ),
        T,
    )
    told(
        known,
        alert(
            "removed",
            triage=lead(
                ("release", NEW),
            ),
        ),
        T + 60,
    )
    (still,) = forget(list(known.values()), {"kept"}, T + 120)
    assert still.open and [s.rule for s in still.firing] == ["kept"]
    (gone,) = forget([still], set(), T + 180)
    assert not gone.open and gone.resolved_at == T + 180
    assert forget([gone], set(), T + 240) == []
