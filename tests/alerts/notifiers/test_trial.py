"""`observer alerts test` leaves nothing open: each notifier's test alert ends as its class
says (observer.alerts.notifiers.trial), through the CLI and `app.test_notifiers`, against
the recording receiver, the events of the `pagerduty` package's own client, and a real
Alertmanager running the shipped deploy/alertmanager/alertmanager.yml (skipped when
`prometheus-alertmanager` is not installed, failed under OBSERVER_REQUIRE_SERVERS=1)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from click.testing import CliRunner
from pagerduty import EventsApiV2Client

from observer import app
from observer.alerts.notifiers import trial
from observer.alerts.notifiers.alertmanager import AlertmanagerNotifier
from observer.alerts.notifiers.trial import TestOutcome, send_test
from observer.cli import main
from observer.config import load_settings
from tests.fakes.receiver import Answer, Receiver
from tests.servers import RunningServer, alertmanager, require_binary
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]
SHIPPED_CONFIG = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
ROUTING_KEY = "R0ut1ngKeyR0ut1ngKeyR0ut1ngKey01"
SLACK_PATH = "/services/T000/B000/XXXXsecretXXXX"
HOOK_SECRET = "whsec_" + "c2VjcmV0LXNpZ25pbmcta2V5LWZvci10ZXN0cw=="
EVERY_ALERT = {"active": "true", "silenced": "true", "inhibited": "true", "unprocessed": "true"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(Answer(202, b'{"status":"success"}')) as server:
        yield server


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pause before the resolves, cut to a fraction of a second."""
    monkeypatch.setattr(trial, "RESOLVE_AFTER_S", 0.05)


def config(tmp_path: Path, receiver: Receiver, *extra: str) -> Path:
    path = tmp_path / "observer.toml"
    path.write_text(
        f"""
[[alerts.notifiers]]
name = "pd"
kind = "pagerduty"
url = "{receiver.url}/pd"
secret_env = "PD_KEY"

[[alerts.notifiers]]
name = "hook"
kind = "webhook"
url = "{receiver.url}/hook"
secret_env = "HOOK_SECRET"

[[alerts.notifiers]]
name = "slack"
kind = "slack"
secret_env = "SLACK_URL"
"""
        + "".join(extra)
    )
    return path


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch, receiver: Receiver) -> None:
    monkeypatch.setenv("PD_KEY", ROUTING_KEY)
    monkeypatch.setenv("HOOK_SECRET", HOOK_SECRET)
    monkeypatch.setenv("SLACK_URL", receiver.url + SLACK_PATH)


def bodies(receiver: Receiver, path_prefix: str) -> list[dict[str, Any]]:
    return [r.json() for r in receiver.requests if r.path.startswith(path_prefix)]


def official_events(send: Any) -> list[dict[str, Any]]:
    """What `pagerduty.EventsApiV2Client` puts on the wire for `send(client)`."""
    seen: list[dict[str, Any]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        return httpx2.Response(202, json={"status": "success", "dedup_key": "k"})

    send(EventsApiV2Client(ROUTING_KEY, transport=httpx2.MockTransport(answer)))
    return seen


@pytest.mark.usefixtures("quick", "secrets")
def test_the_command_resolves_pagerduty_and_the_webhook_and_marks_slack_as_a_test(
    receiver: Receiver, tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        main, ["alerts", "test", "--config", str(config(tmp_path, receiver))]
    )
    assert result.exit_code == 0, result.output
    for name in ("pd", "hook", "slack"):
        assert f"{name}: sent" in result.stdout

    trigger, resolve = bodies(receiver, "/pd")
    assert trigger["event_action"] == "trigger"
    assert trigger["payload"]["severity"] == "warning"
    assert trigger["payload"]["summary"].startswith("[observer_test] observer test alert")
    assert resolve == {
        "event_action": "resolve",
        "dedup_key": trigger["dedup_key"],
        "routing_key": ROUTING_KEY,
    }
    payload = dict(trigger["payload"])
    summary, source = payload.pop("summary"), payload.pop("source")
    severity, details = payload.pop("severity"), payload.pop("custom_details")
    assert [trigger, resolve] == official_events(
        lambda client: (
            client.trigger(
                summary,
                source,
                dedup_key=trigger["dedup_key"],
                severity=severity,
                payload=payload,
                custom_details=details,
            ),
            client.resolve(trigger["dedup_key"]),
        )
    )

    firing, resolved = bodies(receiver, "/hook")
    assert (firing["kind"], firing["state"]) == ("test", "firing")
    assert (resolved["kind"], resolved["state"]) == ("test", "resolved")
    assert resolved["dedup_key"] == firing["dedup_key"]
    assert resolved["ended_at"] is not None and firing["ended_at"] is None
    hook_ids = [r.headers["webhook-id"] for r in receiver.requests if r.path == "/hook"]
    assert len(set(hook_ids)) == 2  # two messages, not a retry of one

    (slack,) = bodies(receiver, SLACK_PATH)
    assert slack["blocks"][0]["text"]["text"] == "🧪 TEST · warn · observer_test"
    assert slack["text"].startswith("TEST [warn] observer_test")
    assert "Nothing is wrong" in json.dumps(slack["blocks"])

    # Every resolve after every trigger: PagerDuty must not get them the other way round.
    pd, hook = "/pd/v2/enqueue", "/hook"
    assert [r.path for r in receiver.requests] == [pd, hook, SLACK_PATH, pd, hook]


@pytest.mark.usefixtures("quick", "secrets")
def test_test_notifiers_says_what_each_received(receiver: Receiver, tmp_path: Path) -> None:
    settings = load_settings(config(tmp_path, receiver))
    outcomes = app.test_notifiers(settings)
    assert [(o.name, o.failure, o.sent) for o in outcomes] == [
        ("pd", None, "sent, resolved"),
        ("hook", None, "sent, resolved"),
        ("slack", None, "sent (a TEST message; nothing to resolve)"),
    ]
    assert [tuple(o) for o in outcomes] == [("pd", None), ("hook", None), ("slack", None)]
    (one,) = app.test_notifiers(settings, "slack")
    assert one.sent.startswith("sent (a TEST")


@pytest.mark.usefixtures("quick")
def test_one_notifier_is_tested_with_its_own_secret_alone(
    monkeypatch: pytest.MonkeyPatch, receiver: Receiver, tmp_path: Path
) -> None:
    """PD_KEY and SLACK_URL unset: testing the webhook does not ask for them."""
    monkeypatch.setenv("HOOK_SECRET", HOOK_SECRET)
    path = config(tmp_path, receiver)
    result = CliRunner().invoke(
        main, ["alerts", "test", "--config", str(path), "--notifier", "hook"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "hook: sent, resolved\n"
    assert [r.path for r in receiver.requests] == ["/hook", "/hook"]
    every = CliRunner().invoke(main, ["alerts", "test", "--config", str(path)])
    assert every.exit_code == 2  # all of them: each secret is needed
    assert "PD_KEY is not set" in every.output


@pytest.mark.usefixtures("quick", "secrets")
def test_a_failed_resolve_is_a_failure_that_says_the_alert_is_open(
    receiver: Receiver, tmp_path: Path
) -> None:
    path = config(tmp_path, receiver)
    # The trigger is taken; the resolve (and its retry) answered 400.
    receiver.script(Answer(202), Answer(400, b'{"status":"invalid event"}'))
    result = CliRunner().invoke(main, ["alerts", "test", "--config", str(path), "--notifier", "pd"])
    assert result.exit_code == 1
    assert "pd: FAILED: sent, but the resolve failed" in result.stdout
    assert "close it by hand (dedup key 'observer-test')" in result.stdout
    assert ROUTING_KEY not in result.output


def test_a_failed_trigger_sends_no_resolve() -> None:
    sent: list[tuple[str, str]] = []

    def send(name: str, notification: Any) -> str | None:
        sent.append((name, notification.state))
        return "down" if name == "pd" else None

    class Hook:
        name, kind, test_end = "hook", "webhook", "resolve"

        def send(self, notification: Any) -> None: ...

    class Pager(Hook):
        name, kind = "pd", "pagerduty"

    paused: list[float] = []
    outcomes = send_test(
        send,
        {"pd": Pager(), "hook": Hook()},
        ["pd", "hook"],
        app.test_notification(datetime.now(UTC)),
        now=lambda: datetime.now(UTC),
        sleep=paused.append,
    )
    assert sent == [("pd", "firing"), ("hook", "firing"), ("hook", "resolved")]
    assert outcomes == [TestOutcome("pd", "down", ""), TestOutcome("hook", None, "sent, resolved")]
    assert paused == [trial.RESOLVE_AFTER_S]


# -- Alertmanager, real, with the shipped routing tree -------------------------------------


@pytest.fixture(scope="module")
def shipped_alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A real Alertmanager, its config replaced by deploy/alertmanager/alertmanager.yml."""
    workdir = tmp_path_factory.mktemp("alertmanager")
    with alertmanager(workdir) as running:
        shutil.copyfile(SHIPPED_CONFIG, workdir / "alertmanager.yml")
        httpx.post(f"{running.url}/-/reload", timeout=10).raise_for_status()
        status = httpx.get(f"{running.url}/api/v2/status", timeout=5).json()
        assert "observer-test" in status["config"]["original"]
        yield running


def alerts(server: RunningServer, **labels: str) -> list[dict[str, Any]]:
    filters = [f'{key}="{value}"' for key, value in labels.items()]
    response = httpx.get(
        f"{server.url}/api/v2/alerts", params={**EVERY_ALERT, "filter": filters}, timeout=5
    )
    response.raise_for_status()
    found: list[dict[str, Any]] = response.json()
    return found


def test_the_alertmanager_test_alert_goes_to_no_ticket_and_ends_seconds_later(
    shipped_alertmanager: RunningServer, tmp_path: Path
) -> None:
    path = tmp_path / "observer.toml"
    path.write_text(
        f"""
[[alerts.notifiers]]
name = "am"
kind = "alertmanager"
url = "{shipped_alertmanager.url}"
"""
    )
    result = CliRunner().invoke(main, ["alerts", "test", "--config", str(path)])
    assert result.exit_code == 0, result.output
    assert "am: sent" in result.stdout

    (alert,) = alerts(shipped_alertmanager, alertname="observer_test")
    assert alert["labels"] == {
        "alertname": "observer_test",
        "severity": "warn",
        "environment": "test",
        "query_type": "test",
        "service": "observer",
        "test": "true",
    }
    assert [r["name"] for r in alert["receivers"]] == ["observer-test"]  # not "tickets"
    starts = datetime.fromisoformat(alert["startsAt"].replace("Z", "+00:00"))
    ends = datetime.fromisoformat(alert["endsAt"].replace("Z", "+00:00"))
    assert (ends - starts).total_seconds() == pytest.approx(5.0, abs=0.01)


def test_a_test_alert_is_gone_from_alertmanager_once_its_end_passed(
    shipped_alertmanager: RunningServer,
) -> None:
    # Ends 5 s after it is sent: time to see it active, on a busy machine too (0.3 s was not).
    notifier = AlertmanagerNotifier("am", shipped_alertmanager.url, test_ttl_s=5.0)
    # A group of its own: Alertmanager merges posts of one label set, keeping the later end.
    test = dataclasses.replace(
        app.test_notification(datetime.now(UTC)), group=(("environment", "ends-soon"),)
    )
    notifier.send(test)
    (alert,) = alerts(shipped_alertmanager, environment="ends-soon")
    assert alert["labels"]["test"] == "true"
    wait_until(
        lambda: not alerts(shipped_alertmanager, environment="ends-soon"),
        "the test alert ended by itself",
    )


def test_amtool_routes_the_test_alert_to_observer_test_and_a_warning_to_tickets() -> None:
    amtool = require_binary("amtool")

    def receiver(*labels: str) -> str:
        import subprocess

        done = subprocess.run(
            [amtool, "config", "routes", "test", f"--config.file={SHIPPED_CONFIG}", *labels],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    test_labels = ("alertname=observer_test", "severity=warn", "service=observer", "test=true")
    assert receiver(*test_labels) == "observer-test"
    assert receiver("alertname=faithfulness_low", "severity=warn", "service=observer") == "tickets"
    assert receiver("alertname=faithfulness_low", "severity=page", "service=observer") == "pager"


def test_the_alertmanager_test_alert_wherever_alertmanager_is_not_installed() -> None:
    sent_at = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    alert = AlertmanagerNotifier("am", "http://127.0.0.1:9").alert(app.test_notification(sent_at))
    assert alert["labels"]["test"] == "true"
    assert (alert["startsAt"], alert["endsAt"]) == (
        "2026-11-28T10:00:00.000Z",
        "2026-11-28T10:00:05.000Z",
    )
