"""A state file of schema 2 (before incidents) migrated while an alert fires: nothing is
lost, and the alert resolves as an incident of its own, once, under the key it paged with."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from observer.alerts.delivery import Delivery
from observer.alerts.messages import dedup_key
from observer.alerts.notifiers.webhook import WebhookNotifier
from observer.alerts.service import AlertService, Options, RuleSet
from observer.background import Deadline
from observer.state import State
from observer.state.migrations import SCHEMA_VERSION
from observer.state.rows import AlertState, Row
from observer.telemetry.metrics import Metrics
from tests.alerts.test_triage import PROD, T, grounding_rule
from tests.fakes.receiver import Receiver


def schema_2_file_with_a_firing_alert(path: Path) -> AlertState:
    """What observer 0.4 left: an alert firing, no incidents table, schema 2."""
    state = State(path)
    firing = AlertState(
        status="firing", severity="page", since=T - 600, last_notified=T - 600,
        value=0.8, samples=400, evaluated_at=T,
    )  # fmt: skip
    state.alerts.commit("numeric_grounding_low", {PROD: firing}, T)
    state.set_watermark(datetime.fromtimestamp(T, UTC))
    state.close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE alert_incidents")
        db.execute("DROP TABLE alert_threads")
        db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    return firing


def test_an_alert_firing_across_the_upgrade_resolves_as_its_own_incident_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.sqlite"
    firing = schema_2_file_with_a_firing_alert(path)
    state = State(path)
    with sqlite3.connect(path) as db:
        version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)  # migrated through every step to the newest
    rule = grounding_rule(warn_threshold=None)
    assert state.alerts.load() == {rule.name: {PROD: firing}}  # nothing lost
    with Receiver() as hook:
        delivery = Delivery({"hook": WebhookNotifier("hook", hook.url)}, Metrics(),
                            state.alerts, base_s=0.01)  # fmt: skip
        service = AlertService(
            state, Metrics(), RuleSet((rule,)), delivery=delivery,
            notifiers={"hook": "webhook"}, options=Options(base_url="x"),
        )  # fmt: skip
        good = {"numeric_grounding": 1.0, "crag_grade": "HIGH"}
        state.history.put_many(
            [Row(T + 3 * i, good, f"g{i}", "p1", "production", "x") for i in range(1, 600)]
        )
        state.set_watermark(datetime.fromtimestamp(T + 1800, UTC))
        service.evaluate(datetime.fromtimestamp(T + 1800, UTC))
        assert delivery.flush(Deadline.within(5.0))
        bodies = [r.json() for r in hook.requests]
        service.shutdown(Deadline.within(2.0))
    state.close()
    (resolved,) = bodies
    assert resolved["state"] == "resolved" and resolved["incident_role"] == "resolved"
    assert resolved["incident"]["id"] == dedup_key(rule.name, PROD)  # as its page was keyed
    assert resolved["incident"]["state"] == "resolved"
