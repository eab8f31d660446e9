"""A fleet member's parts (docs/operating.md#running-a-fleet): Redis connected before
the state file, the reader's marks and publisher in the stream, the shared alerts and
judge budget. The member itself, its worker scoring with the pipeline's recorder, is
wired by observer.app.parts.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import redis

from observer.config import ConfigError, Settings
from observer.fleet.alerts import FleetAlerts, publish_row
from observer.fleet.budget import FleetBudget, provisional_s
from observer.fleet.epoch import KnownEpoch
from observer.fleet.keys import Keys
from observer.fleet.lease import Lease
from observer.fleet.reader import FleetMarks, StreamPublisher
from observer.fleet.stream import TraceStream
from observer.health import Health
from observer.pipeline import Marks
from observer.state import State
from observer.state.rows import Row
from observer.telemetry.metrics import Metrics


@dataclass
class FleetParts:
    """The fleet's pieces that come before the state file and the pipeline."""

    client: redis.Redis
    keys: Keys
    name: str
    lease: Lease
    stream: TraceStream
    budget: FleetBudget
    epoch: KnownEpoch  # the lease and the judge's claims act only in the epoch it holds

    def on_row(self, settings: Settings) -> Callable[[Row], None]:
        """Each signal row this member records, published for the others' histories."""
        assert settings.fleet is not None
        return functools.partial(
            publish_row, self.client, self.keys, self.name, settings.fleet.stream_maxlen
        )

    def alerts(self, settings: Settings, state: State) -> FleetAlerts:
        """The trace rules' claims and the rows shared across the fleet."""
        assert settings.fleet is not None
        return FleetAlerts(
            self.client,
            self.keys,
            state,
            self.name,
            maxlen=settings.fleet.stream_maxlen,
            provisional_s=provisional_s(settings.fleet.claim_idle_s),
        )


def connect_fleet(
    closing: ExitStack,
    settings: Settings,
    state_path: str | Path,
    client: redis.Redis | None,
    name: str | None,
) -> FleetParts:
    from observer.fleet.connect import connect
    from observer.fleet.member import member_name

    fleet = settings.fleet
    if fleet is None:
        raise ConfigError("mode member needs a [fleet] section (fleet.redis_url)")
    client = client or connect(settings)
    closing.callback(client.close)
    if name is None:
        probe = State(state_path)  # the name this state file's member had before, or a new one
        try:
            name = member_name(probe)
        finally:
            probe.close()
    keys = Keys(fleet.name)
    epoch = KnownEpoch()  # the member sets it (observer.fleet.member)
    return FleetParts(
        client,
        keys,
        name,
        Lease(client, keys, name, fleet.lease_s, epoch=epoch),
        TraceStream(client, keys, maxlen=fleet.stream_maxlen),
        FleetBudget(client, keys, provisional_s=provisional_s(fleet.claim_idle_s), epoch=epoch),
        epoch,
    )


def reader_wiring(
    settings: Settings,
    fleet: FleetParts | None,
    metrics: Metrics,
    health: Health,
    stop: threading.Event,
    local: Callable[[], datetime | None],
) -> tuple[Marks | None, StreamPublisher | None, Callable[[], bool]]:
    """Where the pipeline keeps its marks and hands its traces: the state file and its own
    recorder alone, or a fleet's stream while this member holds the reader's lease."""
    if fleet is None:
        return None, None, beating(health, stop)
    src = settings.source
    publisher = StreamPublisher(
        fleet.stream,
        fleet.lease,
        metrics,
        settle_s=src.settle_s,
        overlap_s=src.overlap_s,
        stop=stop,
    )
    marks = FleetMarks(fleet.stream, fleet.lease, local)
    return marks, publisher, _reading_while_held(health, stop, fleet.lease)


def _reading_while_held(health: Health, stop: threading.Event, lease: Lease) -> Callable[[], bool]:
    """A fleet reader's pass goes on while the reader's lease is held (and no stop)."""
    alive = beating(health, stop)
    return lambda: alive() or not lease.held()


def beating(health: Health, stop: threading.Event) -> Callable[[], bool]:
    """The pipeline asks whether to stop once per page it read: a heartbeat for /healthz,
    and proof for /readyz that Langfuse answers, also during a pass of many pages."""

    def should_stop() -> bool:
        health.beat()
        health.langfuse_answered()
        return stop.is_set()

    return should_stop
