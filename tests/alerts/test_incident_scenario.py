"""A bad release that trips several rules reaches each notifier as one incident listing its
symptoms, and resolves once (docs/alerts.md#incidents).

The scenario: release 2026.12.03-rc2 goes out to half the traffic 50 minutes before T;
its answers to pricing questions carry numbers their chunks do not hold, cite less and
land in the LOW band. Four alerts fire at T: a grounding rule for production, the
low-band rate of production/pricing and the release regression on two signals. Each
notifier hears of one incident: PagerDuty one dedup key, Slack one thread (a bot token,
through the real `slack_sdk.WebClient` against a loopback Slack Web API), the webhook
one `incident.id`, and a real Alertmanager with the shipped routing tree one
notification group (`group_by: [incident]`). The fix (release rc3) resolves every
symptom, and the incident says so once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from observer.alerts.delivery import Delivery
from observer.alerts.notifiers import Notifier
from observer.alerts.notifiers.alertmanager import AlertmanagerNotifier
from observer.alerts.notifiers.pagerduty import PagerDutyNotifier
from observer.alerts.notifiers.slack import SlackNotifier
from observer.alerts.notifiers.webhook import WebhookNotifier
from observer.alerts.regression import default_regression_rules
from observer.alerts.rules import default_window_rules
from observer.alerts.service import AlertService, Options, RuleSet
from observer.background import Deadline
from observer.state import State
from observer.state.rows import Row
from observer.telemetry.metrics import Metrics
from tests.alerts.test_triage import TYPES, grounding_rule
from tests.fakes.receiver import Answer, Receiver
from tests.fakes.slack_api import SlackWebAPI
from tests.servers import RunningServer, alertmanager

OLD, NEW, FIXED = "2026.12.01", "2026.12.03-rc2", "2026.12.03-rc3"
# The alert's moment: two hours ago, so that the fix's hour is past too (Alertmanager
# holds an alert active until its end, and a resolve's end is its event time).
T = (time.time() // 60) * 60 - 7200
SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "alertmanager" / "alertmanager.yml"
TOKEN = "xoxb-1234-secret"
ACCEPTED = Answer(202, b'{"status":"success","message":"Event processed","dedup_key":"k"}')


def answers(start: float, end: float, seed: int, release: Any) -> list[Row]:
    """An answer every 2 s in [start, end); `release(at, rng)` names each one's release."""
    rng = random.Random(seed)
    rows = []
    for i in range(int((end - start) / 2)):
        at = start + 2 * i
        query_type = rng.choice(TYPES)
        name = release(at, rng)
        broken = name == NEW and query_type == "pricing" and rng.random() < 0.9
        noisy = rng.random() < 0.03
        values = {
            "numeric_grounding": rng.uniform(0.3, 0.7) if broken else (0.5 if noisy else 1.0),
            "citation_coverage": 0.5 if broken else 0.92,
            "confidence_band": "LOW" if broken or noisy else "HIGH",
            "crag_grade": "HIGH",
            "ungrounded": False,
        }
        dims = {"release": name, "trace_name": "rag-answer"}
        rows.append(Row(at, values, f"t{seed}-{i}", "p1", "production", query_type, dims))
    return rows


def the_bad_release() -> list[Row]:
    """Twelve hours of the old release, then the new one on half the traffic."""
    return answers(
        T - 12 * 3600,
        T + 1,
        1,
        lambda at, rng: NEW if at > T - 3000 and rng.random() < 0.5 else OLD,
    )


def the_fix() -> list[Row]:
    return answers(T + 1, T + 3600 + 1, 2, lambda at, rng: FIXED)


@pytest.fixture(scope="module")
def shipped_alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("alertmanager")
    with alertmanager(workdir, config_text=SHIPPED.read_text()) as running:
        yield running


def moment(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)


def groups(server: RunningServer, incident: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{server.url}/api/v2/alerts/groups", timeout=5)
    response.raise_for_status()
    found: list[dict[str, Any]] = response.json()
    return [g for g in found if g["labels"].get("incident") == incident]


def test_a_bad_release_is_one_incident_everywhere_and_resolves_once(
    tmp_path: Path, shipped_alertmanager: RunningServer
) -> None:
    state = State(tmp_path / "state.sqlite")
    with (
        Receiver(ACCEPTED) as pagerduty,
        Receiver() as hook,
        SlackWebAPI(TOKEN, {"C0ONCALL": True}) as slack,
    ):
        notifiers: dict[str, Notifier] = {
            "pd": PagerDutyNotifier("pd", "R0uting", url=pagerduty.url),
            "hook": WebhookNotifier("hook", hook.url),
            "slack": SlackNotifier("slack", TOKEN, channel="C0ONCALL", url=slack.api_url),
            "am": AlertmanagerNotifier("am", shipped_alertmanager.url),
        }
        metrics = Metrics()
        delivery = Delivery(notifiers, metrics, state.alerts, base_s=0.01, max_backoff_s=0.02)
        band = next(r for r in default_window_rules() if r.name == "low_band_rate_high")
        rules = RuleSet((grounding_rule(warn_threshold=None, threshold=0.95), band), (),
                        default_regression_rules())  # fmt: skip
        kinds = {"pd": "pagerduty", "hook": "webhook", "slack": "slack", "am": "alertmanager"}
        service = AlertService(
            state, metrics, rules, delivery=delivery, notifiers=kinds,
            options=Options(base_url="https://langfuse.example.com"),
        )  # fmt: skip
        try:
            state.history.put_many(the_bad_release())
            state.set_watermark(moment(T))
            service.evaluate(datetime.now(UTC))  # windows end at the watermark, T
            assert delivery.flush(Deadline.within(20.0))
            fired = [r.json() for r in hook.requests]
            (incident,) = state.alerts.incidents()
            assert incident.cause == (("release", NEW),)
            assert {s.rule for s in incident.symptoms} == {
                "numeric_grounding_low",
                "low_band_rate_high",
                "release_regression",
            }
            assert len(incident.symptoms) == len(fired) >= 4  # the regression on two signals
            assert [b["incident_role"] for b in fired] == ["opened"] + ["joined"] * (len(fired) - 1)
            assert {b["incident"]["id"] for b in fired} == {incident.id}
            assert fired[-1]["incident"]["cause"] == {"release": NEW}
            assert len(fired[-1]["incident"]["symptoms"]) == len(fired)
            triggers = [r.json() for r in pagerduty.requests]
            assert {e["dedup_key"] for e in triggers} == {incident.id}  # one PagerDuty alert
            assert {e["event_action"] for e in triggers} == {"trigger"}
            first, *replies = slack.posted
            assert first.thread_ts is None
            assert [p.thread_ts for p in replies] == [first.ts] * len(replies)  # one thread
            (group,) = [g for g in groups(shipped_alertmanager, incident.id)]
            assert group["receiver"]["name"] == "pager"
            assert len(group["alerts"]) == len(fired)  # one notification group, every symptom
            assert metrics.value("observer_alert_incidents_open", environment="production") == 1
            assert (
                metrics.value(
                    "observer_alerts_active",
                    rule="release_regression",
                    environment="production",
                    query_type="pricing",
                    severity="page",
                )
                == len(fired) - 2
            )

            state.history.put_many(the_fix())
            state.set_watermark(moment(T + 3600))
            service.evaluate(datetime.now(UTC))
            assert delivery.flush(Deadline.within(20.0))
        finally:
            service.shutdown(Deadline.within(5.0))
            state.close()
        ended = [r.json() for r in hook.requests][len(fired) :]
        roles = [b["incident_role"] for b in ended]
        # Symptoms end one by one (one may step down to a warning first: an update); the
        # last one's end resolves the incident, said once.
        assert roles[-1] == "resolved" and roles.count("resolved") == 1
        assert roles.count("symptom_resolved") == len(fired) - 1
        assert set(roles[:-1]) <= {"symptom_resolved", "update"}
        assert ended[-1]["incident"]["state"] == "resolved"
        resolves = [r.json() for r in pagerduty.requests if r.json()["event_action"] == "resolve"]
        assert [e["dedup_key"] for e in resolves] == [incident.id]  # resolved once
        broadcast = [p for p in slack.posted if p.reply_broadcast]
        assert len(broadcast) == 1 and broadcast[0].thread_ts == first.ts
        assert "INCIDENT RESOLVED" in broadcast[0].text
        left = groups(shipped_alertmanager, incident.id)  # every symptom's alert resolved
        assert all(a["status"]["state"] != "active" for g in left for a in g["alerts"])
