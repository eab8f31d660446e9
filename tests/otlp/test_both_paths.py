"""Both paths give the same record, fingerprint and scores, byte for byte
(docs/daemon.md#the-event-path, "The same record as a poll").

Every captured app of tests/instrumentations goes through both:
- **polled**: its observations, as the Observations API v2 returns them, served by the
  fake Langfuse and read by the daemon's pipeline (LangfuseSource over HTTP);
- **received**: its raw OTLP export, sent as protobuf to the receiver over HTTP, decoded,
  converted by Langfuse's rules, assembled, settled on an injected clock.

Each path scores into a state file of its own; the records (as serialised: what the
fingerprint hashes), the fingerprints and the score rows in the outbox (ids, values,
comments, timestamps) must be identical. Then the poller runs over the receiver's state:
every trace is unchanged, nothing more is queued, so a trace received and later swept by
the backstop is never scored twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from observer.model import RagRecord, Signals
from observer.pipeline.traces import TraceRecorder
from observer.state import State
from observer.state.rows import Row
from observer.times import parse_time
from tests.fakes.langfuse_server import FakeLangfuse
from tests.instrumentations.scenarios import PROJECT_ID
from tests.instrumentations.test_instrumentations import APPS, FIXTURES
from tests.otlp.harness import basic, post, protobuf_export, start_observer, unique_keys


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        unique_keys(server)
        server.project_id = PROJECT_ID  # the fixtures' project
        yield server


def capture(recorder: TraceRecorder) -> dict[str, bytes]:
    """The records a recorder scores, serialised as the fingerprint hashes them."""
    records: dict[str, bytes] = {}

    def scored(record: RagRecord, _signals: Signals, _row: Row) -> None:
        records[record.trace_id] = orjson.dumps(record)

    recorder.on_scored = scored
    return records


def outcome(state: State, trace_ids: list[str]) -> tuple[dict[str, str], list[bytes]]:
    """Fingerprints and the outbox, as rows (scores serialised, in a stable order)."""
    rows = sorted(orjson.dumps(p.score) + p.op.encode() for p in state.due(1e12, 100_000))
    return state.fingerprints(trace_ids), rows


@pytest.mark.parametrize("app", APPS)
def test_a_trace_received_and_the_same_trace_polled_are_one_record(
    app: str, fake: FakeLangfuse, tmp_path: Path
) -> None:
    otlp = json.loads((FIXTURES / f"{app}.otlp.json").read_text())
    observations = json.loads((FIXTURES / f"{app}.observations.json").read_text())
    trace_ids = sorted({o["traceId"] for o in observations})
    fake.clear_observations()
    fake.add_observations(observations, delay_s=0)

    poller = start_observer(fake, tmp_path / "polled.sqlite")
    receiver = start_observer(fake, tmp_path / "received.sqlite")
    try:
        polled_records = capture(poller.parts.pipeline.traces)
        received_records = capture(receiver.receiver.recorder)
        poller.parts.pipeline.process_window(*_window(observations))
        answer = post(receiver.url, protobuf_export(otlp), basic(fake))
        assert answer.status_code == 200, answer.text
        receiver.settle()

        assert received_records, f"{app}: nothing scored from the received spans"
        assert received_records == polled_records
        assert outcome(receiver.parts.state, trace_ids) == outcome(poller.parts.state, trace_ids)

        # The backstop: the poller over the receiver's state finds nothing new.
        queued = receiver.parts.state.outbox_size()
        result = receiver.parts.pipeline.process_window(*_window(observations))
        assert (result.scored, result.rescored) == (0, 0)
        assert result.unchanged == len(received_records)
        assert receiver.parts.state.outbox_size() == queued
    finally:
        poller.close()
        receiver.close()


def _window(observations: list[dict[str, Any]]) -> tuple[datetime, datetime, datetime]:
    """A pass over every observation, an hour after the last: all settled."""
    times = [t for o in observations if (t := parse_time(o["startTime"])) is not None]
    later = max(times) + timedelta(hours=1)
    return min(times) - timedelta(minutes=5), later, later
