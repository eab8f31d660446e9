"""Secrets never leave the process: not in output, logs, errors, /metrics or the state file.

Distinctive secrets are set for every kind observer knows (Langfuse keys, the
judge's key, a notifier's secret), every command and its error paths are run
as a user runs them (subprocesses, JSON logs at debug), and everything they
wrote is searched for them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from observer.health import Health
from observer.telemetry.http import HttpServer
from tests.daemon_helpers import DEMO_LOOKBACK_S, ROOT, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.receiver import Receiver

LANGFUSE_SECRET = "sk-lf-SECRET-1b2c3d4e5f"
OPENAI_SECRET = "sk-OPENAI-SECRET-9a8b7c6d"
WEBHOOK_SECRET = (
    "whsec_U0VDUkVULXdlYmhvb2stc2lnbmluZy1rZXk="  # base64 of SECRET-webhook-signing-key
)
PROXY_PASSWORD = "SECRET-proxy-password"  # in a URL: https://user:password@host
SECRETS = (
    LANGFUSE_SECRET,
    OPENAI_SECRET,
    WEBHOOK_SECRET,
    "U0VDUkVU",
    "SECRET-webhook",
    PROXY_PASSWORD,
)


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        server.secret_key = LANGFUSE_SECRET
        server.add_observations(demo_observations())
        yield server


def environment(fake: FakeLangfuse, receiver: Receiver, config: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OBSERVER_", "LANGFUSE_", "OPENAI_", "OTEL_"))
    }
    env.update(
        LANGFUSE_PUBLIC_KEY=fake.public_key,
        LANGFUSE_SECRET_KEY=LANGFUSE_SECRET,
        LANGFUSE_BASE_URL=fake.url,
        OPENAI_API_KEY=OPENAI_SECRET,
        OBSERVER_JUDGE_BASE_URL="http://127.0.0.1:9/v1",  # a judge that is down
        OBSERVER_JUDGE_MODEL="judge-model",
        OBSERVER_JUDGE__ENABLED="true",
        OBSERVER_JUDGE__RATE="1.0",
        OBSERVER_JUDGE__MAX_RETRIES="0",
        OBSERVER_JUDGE__TIMEOUT_S="1",
        HOOK_SECRET=WEBHOOK_SECRET,
        OBSERVER_CONFIG=str(config),
        OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S,
        OBSERVER_SOURCE__REQUESTS_PER_MINUTE="6000",
        OBSERVER_SOURCE__MAX_ATTEMPTS="1",
        OBSERVER_SOURCE__FIRST_CONTACT_S="2",  # the failures here are what is said, not how long
        OBSERVER_RUN__SHUTDOWN_GRACE_S="2",
        OBSERVER_LOG__FORMAT="json",
        OBSERVER_LOG__LEVEL="debug",
        OBSERVER_HTTP_PORT="0",
    )
    return env


def observer(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "observer", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    return done.stdout + done.stderr


def test_no_secret_in_anything_observer_writes(fake: FakeLangfuse, tmp_path: Path) -> None:
    with Receiver() as receiver:
        config = tmp_path / "observer.toml"
        config.write_text(
            "[[alerts.notifiers]]\n"
            'name = "hook"\nkind = "webhook"\n'
            f'url = "{receiver.url}"\nsecret_env = "HOOK_SECRET"\n'
        )
        env = environment(fake, receiver, config)
        state = str(tmp_path / "s.sqlite")
        written = [
            observer(env, "config", "show"),
            observer(env, "check", "--state", state),
            observer(env, "run", "--once", "--state", state),  # judge down: errors logged
            observer(env, "alerts", "status", "--state", state),
            observer(env, "alerts", "test"),
            observer(env, "score", "examples/records.jsonl"),
        ]
        receiver.fail(100, status=500)
        written.append(observer(env, "alerts", "test"))  # the notifier fails
        fake.stop()
        written.append(observer(env, "run", "--once", "--state", state))  # Langfuse down
        written.append(observer(env, "check", "--state", state))
        fake.start()
        wrong = dict(env, LANGFUSE_SECRET_KEY=LANGFUSE_SECRET + "-wrong")
        written.append(observer(wrong, "run", "--once", "--state", state))  # keys refused
        written.append(observer(dict(env, OBSERVER_SOURCE__PAGE_LIMIT="0"), "config", "show"))
        bad_secret_file = dict(env, LANGFUSE_SECRET_KEY="", LANGFUSE_SECRET_KEY_FILE="/nope")
        written.append(observer(bad_secret_file, "check"))
        swapped = dict(
            env, LANGFUSE_PUBLIC_KEY=LANGFUSE_SECRET, LANGFUSE_SECRET_KEY=fake.public_key
        )
        for args in (("check",), ("config", "show"), ("run", "--once", "--state", state)):
            written.append(observer(swapped, *args))  # refused by shape, never printed
        proxied = fake.url.replace("http://", f"http://observer:{PROXY_PASSWORD}@")
        behind_a_proxy = dict(
            env, LANGFUSE_BASE_URL=proxied, REDIS_URL=f"redis://:{PROXY_PASSWORD}@127.0.0.1:9/0"
        )
        written.append(observer(behind_a_proxy, "check", "--state", state))
        written.append(observer(behind_a_proxy, "config", "show"))
        fake.stop()
        written.append(observer(behind_a_proxy, "run", "--once", "--state", state))  # down
        written.append(observer(dict(behind_a_proxy, OBSERVER_FLEET__NAME="f"), "run"))
        fake.start()
        received = [r.text + str(r.headers) for r in receiver.requests]
    assert any('"event"' in text for text in written)  # JSON logs were produced
    state_bytes = b"".join(p.read_bytes() for p in tmp_path.glob("s.sqlite*"))
    for secret in SECRETS:
        for number, text in enumerate(written):
            assert secret not in text, f"output {number} holds {secret!r}:\n{text[-3000:]}"
        assert secret.encode() not in state_bytes
        for body in received:
            assert secret not in body


def test_no_secret_in_metrics(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from observer import app
    from tests.daemon_helpers import after, configure

    settings = configure(monkeypatch, fake)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", LANGFUSE_SECRET)
    parts = app.build(settings, state_path=tmp_path / "s.sqlite")
    app.run_once(parts, after(demo_observations()))
    health = Health(
        stale_after_s=None,
        langfuse_within_s=None,
        max_lag_s=1,
        lag_s=lambda: 0,
        outbox=lambda: 0,
        max_outbox=1,
    )
    server = HttpServer("127.0.0.1", 0, parts.metrics.registry, health).start()
    try:
        with urllib.request.urlopen(server.url + "/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.stop()
        parts.state.close()
    assert "observer_traces_total" in text
    for secret in SECRETS:
        assert secret not in text
