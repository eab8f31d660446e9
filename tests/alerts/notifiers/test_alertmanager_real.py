"""The Alertmanager notifier against a real Alertmanager (Debian's prometheus-alertmanager).

Skipped when it is not installed, failed instead under OBSERVER_REQUIRE_SERVERS=1 (CI).
Alertmanager 0.25 lists only active alerts on `GET /api/v2/alerts`, whatever the filters:
a resolved alert (its endsAt passed) is no longer listed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from observer.alerts.notifiers.alertmanager import AlertmanagerNotifier
from tests.alerts.notifiers.samples import firing, resolved
from tests.servers import RunningServer, alertmanager, require_binary

EVERY_ALERT = {"active": "true", "silenced": "true", "inhibited": "true", "unprocessed": "true"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with alertmanager(tmp_path_factory.mktemp("alertmanager")) as running:
        yield running


def alerts(server: RunningServer, **labels: str) -> list[dict[str, Any]]:
    """Alertmanager's alerts carrying these labels (every state it lists)."""
    filters = [f'{key}="{value}"' for key, value in labels.items()]
    response = httpx.get(
        f"{server.url}/api/v2/alerts", params={**EVERY_ALERT, "filter": filters}, timeout=5
    )
    response.raise_for_status()
    found: list[dict[str, Any]] = response.json()
    return found


def wait_until(condition: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "Alertmanager did not get there in time"
        time.sleep(0.05)


def test_a_firing_page_is_active_with_its_labels_then_resolves(server: RunningServer) -> None:
    notifier = AlertmanagerNotifier("am", server.url)
    message = firing(group=(("environment", "production"), ("query_type", "billing")))
    notifier.send(message)

    (alert,) = alerts(server, alertname="coverage_low", query_type="billing")
    assert alert["labels"] == {
        "alertname": "coverage_low",
        "severity": "page",
        "service": "observer",
        "environment": "production",
        "query_type": "billing",
        "incident": message.dedup_key,
    }
    assert alert["status"]["state"] == "active"
    assert alert["annotations"]["summary"] == message.summary
    assert alert["annotations"]["langfuse_url"] == message.trace_urls[0]
    assert alert["annotations"]["runbook_url"] == message.runbook_url

    notifier.send(resolved(message))
    assert alerts(server, alertname="coverage_low", query_type="billing") == []


def test_an_alert_not_reposted_ends_after_its_ttl_and_a_repost_keeps_it(
    server: RunningServer,
) -> None:
    ttl_s = 60.0
    ends_in_s = 5.0  # time to post both and see them active, on a busy machine too
    notifier = AlertmanagerNotifier("am", server.url, firing_ttl_s=ttl_s)
    now = datetime.now(UTC)
    # Two alerts whose last post was almost a TTL ago: both would end in `ends_in_s`.
    last_post = now - timedelta(seconds=ttl_s - ends_in_s)
    kept = firing(rule="kept_alive", group=(("environment", "e2e"),), sent_at=last_post)
    left = firing(rule="left_alone", group=(("environment", "e2e"),), sent_at=last_post)
    notifier.send(kept)
    notifier.send(left)
    assert len(alerts(server, environment="e2e")) == 2

    notifier.send(dataclasses.replace(kept, sent_at=datetime.now(UTC)))  # the engine's re-post
    wait_until(
        lambda: (
            [a["labels"]["alertname"] for a in alerts(server, environment="e2e")] == ["kept_alive"]
        ),
        timeout_s=ends_in_s + 30,
    )
    # Past the first end (sent in whole milliseconds, as `iso` writes it): the re-post kept it.
    first_end = (now + timedelta(seconds=ends_in_s)).replace(
        microsecond=(now.microsecond // 1000) * 1000
    )
    assert datetime.now(UTC) >= first_end

    notifier.send(resolved(kept))
    assert alerts(server, environment="e2e") == []


def test_a_warning_keeps_its_severity_and_a_group_without_query_type_has_no_such_label(
    server: RunningServer,
) -> None:
    notifier = AlertmanagerNotifier("am", server.url)
    notifier.send(
        firing(rule="ungrounded_rate", severity="warn", group=(("environment", "staging"),))
    )
    (alert,) = alerts(server, alertname="ungrounded_rate")
    assert alert["labels"]["severity"] == "warn"
    assert alert["labels"]["environment"] == "staging"
    assert "query_type" not in alert["labels"]


# -- the helper every real-server test uses -----------------------------------


def test_require_binary_finds_an_installed_program() -> None:
    assert require_binary("sh").endswith("/sh")


def test_a_missing_server_skips_unless_servers_are_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y prometheus"):
        require_binary("/nonexistent/prometheus", required=False)
    with pytest.raises(pytest.fail.Exception, match="OBSERVER_REQUIRE_SERVERS=1 requires it"):
        require_binary("/nonexistent/prometheus", required=True)
    monkeypatch.setenv("OBSERVER_REQUIRE_SERVERS", "1")
    with pytest.raises(pytest.fail.Exception, match="requires it"):
        require_binary("no-such-server-binary-here")
