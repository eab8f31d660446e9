"""`[otlp]` in the daemon (observer.app.event_path): what is refused at start, the poller's
longer delay beside the receiver, and the receiver's port opened and closed with the
daemon."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from observer import app
from observer.app.daemon import Daemon
from observer.app.event_path import check, with_backstop
from observer.background import Deadline
from observer.config import ConfigError, Settings
from tests.fakes.langfuse_server import FakeLangfuse
from tests.otlp.harness import (
    basic,
    emit_answer,
    langfuse_client,
    post,
    settings_for,
    start_observer,
    unique_keys,
)
from tests.otlp.test_receiver import _export_body

KEYS = {"public_key": "pk-lf-x", "secret_key": "sk-lf-x"}


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "[::]", "observer.internal"])
def test_beyond_loopback_without_credentials_is_refused_naming_the_key(host: str) -> None:
    settings = Settings(otlp={"listen": f"{host}:4318"})
    with pytest.raises(ConfigError, match=r"otlp\.listen.*LANGFUSE_PUBLIC_KEY"):
        check(settings)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "127.0.0.9"])
def test_loopback_needs_no_credentials(host: str) -> None:
    check(Settings(otlp={"listen": f"{host}:4318"}))


def test_beyond_loopback_with_the_langfuse_keys_or_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    check(Settings(otlp={"listen": "0.0.0.0:4318"}, langfuse=KEYS))
    monkeypatch.setenv("OTLP_TOKEN", "secret")
    check(Settings(otlp={"listen": "0.0.0.0:4318", "secret_env": "OTLP_TOKEN"}))
    monkeypatch.delenv("OTLP_TOKEN")
    with pytest.raises(ConfigError, match=r"otlp\.secret_env.*OTLP_TOKEN"):
        check(Settings(otlp={"listen": "0.0.0.0:4318", "secret_env": "OTLP_TOKEN"}))


def test_the_receiver_does_not_run_in_a_fleet() -> None:
    with pytest.raises(ConfigError, match="loadbalancing"):
        check(Settings(otlp={"enabled": True}, fleet={}))


def test_a_grace_longer_than_the_settle_time_is_refused_naming_both_keys() -> None:
    check(Settings(otlp={"enabled": True, "root_grace_s": 2.0, "settle_s": 2.0}))
    with pytest.raises(ConfigError, match=r"otlp\.root_grace_s: 3 .*otlp\.settle_s \(2\)"):
        check(Settings(otlp={"enabled": True, "root_grace_s": 3.0}))


def test_off_by_default_and_on_with_a_listen_address() -> None:
    assert not Settings().otlp.on
    assert Settings(otlp={"enabled": True}).otlp.address == ("127.0.0.1", 4318)
    assert Settings(otlp={"listen": "0.0.0.0:4318"}).otlp.on
    assert not Settings(otlp={"listen": "0.0.0.0:4318", "enabled": False}).otlp.on


def test_beside_the_receiver_the_poller_waits_the_backstop_delay() -> None:
    settings = with_backstop(Settings(otlp={"enabled": True}))
    assert settings.source.settle_s == 300.0
    assert settings.source.poll_interval_s == 60.0
    alone = with_backstop(Settings(otlp={"enabled": True, "poller": "off"}))
    assert alone.source.settle_s == Settings().source.settle_s
    assert with_backstop(Settings()) == Settings()


def test_the_daemon_opens_the_receiver_and_closes_it_on_shutdown(tmp_path: Path) -> None:
    with FakeLangfuse() as fake:
        unique_keys(fake)
        parts = app.build(settings_for(fake), mode="solo", state_path=tmp_path / "s.sqlite")
        assert parts.receiver is not None
        daemon = Daemon(parts)
        daemon.start()
        url = parts.receiver.url
        assert url is not None
        try:
            assert post(url, _export_body(), basic(fake)).status_code == 200
            assert parts.metrics.value("observer_otlp_spans_total") == 1
        finally:
            parts.stop(Deadline.within(5))
        with pytest.raises(httpx.ConnectError):  # the port is closed
            post(url, _export_body(), basic(fake))


COUNTED = {
    "defaults": False,
    "rules": [
        {
            "name": "answers_counted",
            "signal": "ungrounded == false",  # every answer: the two are grounded
            "aggregate": "count",
            "op": ">=",
            "threshold": 2,
            "window": "10m",
            "min_samples": 1,
            "for": "0s",
        }
    ],
}


def test_with_the_receiver_alone_the_rules_on_traces_evaluate_up_to_its_mark(
    tmp_path: Path,
) -> None:
    """`otlp.poller = off`: no pass reads Langfuse, yet the rules on traces evaluate, up to
    the receiver's mark (the earliest span still waiting, at most `LATE_S` ago)."""
    wall = [datetime.now(UTC)]
    with FakeLangfuse() as fake:
        unique_keys(fake)
        observer = start_observer(
            fake, tmp_path / "s.sqlite", clock=lambda: wall[0], alerts=COUNTED, poller="off"
        )
        try:
            client = langfuse_client(observer.url, fake.public_key, fake.secret_key)
            for _ in range(2):
                emit_answer(client)
            daemon = Daemon(observer.parts, clock=lambda: wall[0])
            observer.settle()
            state = observer.parts.state

            def evaluated(outcome: str) -> float:  # what the daemon's evaluator did
                return observer.metric(
                    "observer_alert_evaluations_total", rule="answers_counted", outcome=outcome
                )

            assert state.watermark() is None  # the poller's: nothing was read
            mark = state.scored_through()
            assert mark is not None and mark <= wall[0] - timedelta(seconds=30)
            daemon.tick()
            observer.parts.evaluator.catch_up()
            assert evaluated("firing") == 0  # the answers lie after the mark
            wall[0] += timedelta(minutes=2)  # no span for two minutes: the mark moves on
            observer.settle()
            daemon.tick()
            observer.parts.evaluator.catch_up()
            assert evaluated("firing") >= 1
            moved = state.scored_through()
            assert moved is not None
            assert abs(moved - (wall[0] - timedelta(seconds=30))) < timedelta(milliseconds=1)
        finally:
            observer.close()
