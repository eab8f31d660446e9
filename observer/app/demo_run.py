"""The demo: the daemon pipeline over the bundled traces and an hour of traffic made of
copies of them, and serving its HTTP port."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from observer.app.builders import start_http
from observer.app.daemon import signals_set
from observer.app.once import OnceResult, run_once
from observer.app.parts import Parts, build
from observer.config import ConfigError, Settings
from observer.sinks.jsonl import JsonlScoreSink
from observer.sources.replay import ReplaySource, read_jsonl
from observer.times import iso, parse_time

# The times an observation carries, moved with its copy.
_TIMES = ("startTime", "endTime", "completionStartTime", "createdAt", "updatedAt")


def demo_traces_path() -> Path:
    return Path(str(resources.files("observer") / "data" / "demo_traces.jsonl"))


def demo_traffic_path() -> Path:
    return Path(str(resources.files("observer") / "data" / "demo_traffic.jsonl"))


def _hex(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def copy_trace(observations: list[dict[str, Any]], at: datetime) -> list[dict[str, Any]]:
    """A trace again, its root started at `at`: every time moved by as much, and ids of its
    own (traceId: sha256 of `<traceId>@<at>`, 32 hex; an observation's: sha256 of
    `<new traceId>/<its id>`, 16 hex), so the copy is scored as a trace of its own."""
    root = next(o for o in observations if not o.get("parentObservationId"))
    moved = at - _time(root["startTime"])
    trace_id = _hex(f"{root['traceId']}@{iso(at)}", 32)
    copies = []
    for observation in observations:
        copy = dict(observation, traceId=trace_id, id=_hex(f"{trace_id}/{observation['id']}", 16))
        if observation.get("parentObservationId"):
            copy["parentObservationId"] = _hex(
                f"{trace_id}/{observation['parentObservationId']}", 16
            )
        for key in _TIMES:
            if observation.get(key):
                copy[key] = iso(_time(observation[key]) + moved)
        copies.append(copy)
    return copies


def _time(value: str) -> datetime:
    moment = parse_time(value)
    if moment is None:
        raise ValueError(f"not a time: {value!r}")
    return moment


def demo_observations() -> list[dict[str, Any]]:
    """What the demo reads: the bundled traces (one of each kind, over a day), then the hour
    of traffic demo_traffic.jsonl lays out, each line a copy of one of them (`at`: when its
    root starts, `of`: the traceId it copies). examples/make_demo_traces.py writes both."""
    bundled = read_jsonl(demo_traces_path())
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in bundled:
        by_trace.setdefault(observation["traceId"], []).append(observation)
    traffic = [
        copy
        for line in read_jsonl(demo_traffic_path())
        for copy in copy_trace(by_trace[line["of"]], _time(line["at"]))
    ]
    return bundled + traffic


def serve_until_stopped(
    parts: Parts, started: Callable[[str], None], *, beat_s: float = 5.0
) -> None:
    """Serve the HTTP port of a finished run until SIGTERM/SIGINT (`demo --serve`).

    The run read no Langfuse, so /readyz does not ask for it (ready: the run is done,
    its lag and outbox judged as always); /healthz watches this serving loop, which
    beats every `beat_s` while it serves (stale, as the daemon's, after three poll
    intervals, at least 60 s)."""
    health = parts.health
    health.heartbeat_of = "the demo's serving loop"
    health.langfuse_not_used = "not used: the demo read its bundled traces, and its run is done"
    health.beat()
    server = start_http(parts.settings, parts.metrics, health)
    if server is None:
        raise ConfigError("http.enabled is false: nothing to serve")
    # The run stopped its parts (observer.app.parts: the one stop); serving is a loop of
    # its own, until the next signal.
    parts.stopping.clear()
    started(server.url)
    with signals_set(parts.stopping):
        while not parts.stopping.wait(beat_s):
            health.beat()
    server.stop()


def demo(settings: Settings, out: Path, state_path: Path) -> tuple[OnceResult, Parts]:
    """The daemon pipeline over the demo's traces, scores to a JSONL file."""
    replay = ReplaySource(demo_observations())
    earliest, latest = replay.time_range()
    parts = build(settings, state_path=state_path, source=replay, sink=JsonlScoreSink(out))
    # The bundled traces are from the past: a clock just after them, a window over all of
    # them on every run (so a rerun on the same state reports them unchanged).
    now = latest + timedelta(seconds=settings.source.settle_s + 60)
    # The lag as the daemon would see it at that clock, not against today's.
    parts.metrics.set_watermark(None, clock=now.timestamp)
    outcome = run_once(parts, now, window_start=earliest - timedelta(minutes=1))
    if outcome.passed is not None:
        # Every trace before it handled, as after a daemon's pass: `alerts status` on the
        # demo's state evaluates its windows ending there.
        watermark = now - timedelta(seconds=settings.source.settle_s)
        parts.state.set_watermark(watermark)
        parts.metrics.set_watermark(watermark.timestamp())
    return outcome, parts
