"""Fleet members in-process for tests: each its own Parts and state file, one Redis."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from observer import app
from observer.background import Deadline
from observer.config import FleetSettings, Settings
from observer.fleet.member import Member
from tests.daemon_helpers import configure, packed_traces
from tests.fakes.langfuse_server import FakeLangfuse


def fleet_settings(
    monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse, url: str, **fleet: Any
) -> Settings:
    monkeypatch.setenv("FLEET_REDIS", url)
    settings = configure(monkeypatch, fake, OBSERVER_SOURCE__LOOKBACK_S="7200")
    return settings.model_copy(
        update={"fleet": FleetSettings(secret_env="FLEET_REDIS", name="t", **fleet)}
    )


def judge_every_trace(monkeypatch: pytest.MonkeyPatch, judge_url: str) -> None:
    """The judge on, every answer sampled, against an OpenAI-compatible stub at `judge_url`."""
    for key, value in {
        "OBSERVER_JUDGE__ENABLED": "true",
        "OBSERVER_JUDGE__RATE": "1.0",
        "OBSERVER_JUDGE__RISK_OVERSAMPLING": "false",
        "OBSERVER_JUDGE_BASE_URL": judge_url + "/v1",
        "OBSERVER_JUDGE_MODEL": "stub-judge",
        "OPENAI_API_KEY": "sk-test",
    }.items():
        monkeypatch.setenv(key, value)


def traces(count_copies: int = 1, *, tag: str = "") -> list[dict[str, Any]]:
    """The demo's traces under new ids, rooted in the last hour (settled, in the lookback)."""
    start = datetime.now(UTC) - timedelta(minutes=50)
    return packed_traces(start, 2.0, count_copies, tag)


@contextmanager
def members(settings: Settings, workdir: Path, names: list[str]) -> Iterator[list[Member]]:
    """Members named `names`, built (not started); their dispatchers running."""
    with ExitStack() as stack:
        built: list[Member] = []
        for name in names:
            client = redis.Redis.from_url(settings.fleet_url(), socket_timeout=5)
            parts = stack.enter_context(
                app.build(
                    settings,
                    mode="member",
                    state_path=workdir / f"{name}.sqlite",
                    redis_client=client,
                    member_name=name,
                )
            )
            member = parts.member
            assert member is not None
            member.parts = parts  # type: ignore[attr-defined]  # tests reach the other parts
            member.worker.batch = 10  # small batches: every member gets some of the demo's 80
            member.stream.ensure_group()
            parts.dispatcher.start()
            stack.callback(lambda p=parts: p.dispatcher.shutdown(Deadline.within(5.0)))
            built.append(member)
        yield built


@contextmanager
def keeping(member: Member) -> Iterator[None]:
    """The member's lease kept while the block runs, as its keeper thread keeps it in the
    daemon (there every lease_s / 3; here every lease_s / 10, so that a busy machine cannot
    let a short lease lapse in the middle of a pass the test runs by hand)."""
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(member.lease_s / 10):
            member.keep()

    keeper = threading.Thread(target=keep, name="test-keeper", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()


def drain(fleet: list[Member], *, rounds: int = 200) -> int:
    """Every member's worker steps until the stream has nothing left for them, their scores
    delivered and their entries acknowledged (only then: docs/decisions.md); entries read."""
    read = 0
    for _ in range(rounds):
        done = [m.worker.step(block_ms=0) for m in fleet]
        read += sum(d.read for d in done)
        if not any(d.read for d in done):
            for m in fleet:
                assert m.parts.dispatcher.flush(10.0)  # type: ignore[attr-defined]
                m.worker.settle()
            if fleet[0].stream.unacked() == 0:
                return read
    raise AssertionError(f"not drained: {fleet[0].stream.unacked()} entries unacknowledged")
