"""The demo: the daemon pipeline over the bundled traces, and serving its HTTP port."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from importlib import resources
from pathlib import Path

from observer.app.daemon import signals_set
from observer.app.once import OnceResult, run_once
from observer.app.parts import Parts, build, start_http
from observer.config import ConfigError, Settings
from observer.sinks.jsonl import JsonlScoreSink
from observer.sources.replay import ReplaySource


def demo_traces_path() -> Path:
    return Path(str(resources.files("observer") / "data" / "demo_traces.jsonl"))


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
    started(server.url)
    with signals_set(parts.stop):
        while not parts.stop.wait(beat_s):
            health.beat()
    server.stop()


def demo(settings: Settings, out: Path, state_path: Path) -> tuple[OnceResult, Parts]:
    """The daemon pipeline over the bundled traces, scores to a JSONL file."""
    replay = ReplaySource(demo_traces_path())
    earliest, latest = replay.time_range()
    parts = build(settings, state_path=state_path, source=replay, sink=JsonlScoreSink(out))
    # The bundled traces are from the past: a clock just after them, a window over all of
    # them on every run (so a rerun on the same state reports them unchanged).
    now = latest + timedelta(seconds=settings.source.settle_s + 60)
    return run_once(parts, now, window_start=earliest - timedelta(minutes=1)), parts
