"""Soak: `python bench/soak.py` runs the daemon for ten minutes under faults and prints a table.

The daemon as deployed, against a live stream:

- a fake Langfuse in its own process (real HTTP on 127.0.0.1, so its CPU does not
  count as the daemon's), fed through a pipe with new traces at a steady rate:
  the bundled demo traces cloned under new ids, each root starting "now" as it
  is added (100,000 traces over 10 minutes by default, about 170 a second). The
  fake is `tests.fakes.langfuse_server.FakeLangfuse` with a start-time index for
  the daemon's query (a full scan per page of 400,000 observations would make
  the fake the thing measured) and a running tally instead of every request kept;
- `observer run` as a subprocess (`python -m observer run --state ...`), polling
  every few seconds, with defaults otherwise (overlap, settle, outbox, grace);
- faults on a schedule: SIGTERM + restart twice (once while score posts fail, so
  the outbox crosses the restart) and one SIGKILL + restart, all in the first 30 %
  so the last process runs long enough to show memory growth; then 5xx bursts on
  reads (within the retries, and beyond them), 5xx on score posts, 429 storms with
  Retry-After, and a Langfuse outage of about 30 s (the port closed);
- every 2 s: the daemon's RSS (psutil, else /proc/<pid>/status),
  `observer_watermark_lag_seconds` from its /metrics (left out while it reads 0:
  a process knows no watermark before its first complete pass), and, as a
  cross-check, the lag by the watermark in the state file (a read-only read).

The daemon runs from a copy of the `observer` package taken at the start, so
edits made to the checkout during the soak do not reach a restarted process;
the report names the commit and any uncommitted files in that copy. `--set
OBSERVER_X=V` changes a daemon setting (the pure core sees it too).

At the end the feed stops, the daemon gets time to catch up (until every trace
added has all its scores, or a timeout), and is stopped with SIGTERM. The same
observations are then mapped and scored with the pure core (as
`tests.daemon_helpers.demo_counts` does) to know which traces must have scores
and which score ids: lost = scorable traces without a score, duplicated = score
subjects the fake stored twice. Exit 1 when a trace or a score is lost or
duplicated. Logs, state file and samples stay in the printed directory.

`--quick` is a one-minute, small version for trying it. Everything is bounded by
timeouts, and everything talks only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import hashlib
import json
import math
import multiprocessing as mp
import os
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from observer.app import demo_traces_path  # noqa: E402
from observer.times import iso, parse_time  # noqa: E402
from tests.fakes.langfuse_server import (  # noqa: E402
    DEFAULT_ENVIRONMENT,
    DEFAULT_PROJECT_ID,
    FIELD_GROUPS,
    OBSERVATIONS_PATH,
    SCORES_PATH,
    FakeLangfuse,
    _decode_cursor,
    _encode_cursor,
    _parse_time,
    _Response,
    _StoredObservation,
    _to_us,
    _truncate_metadata,
)

HOST = "127.0.0.1"
SAMPLE_EVERY_S = 2.0
FEED_TICK_S = 0.25
WARMUP_S = 120.0
RSS_SPAN_S = 30.0
TIME_KEYS = ("startTime", "endTime", "createdAt", "updatedAt", "completionStartTime")
JsonDict = dict[str, Any]


# -- the stream: demo traces under new ids, roots at a steady rate ------------------------


@dataclass(frozen=True)
class Template:
    """One demo trace: its observations and each time field as an offset from the root."""

    observations: tuple[JsonDict, ...]
    offsets: tuple[dict[str, timedelta], ...]


def load_templates() -> list[Template]:
    observations = [json.loads(line) for line in demo_traces_path().read_text().splitlines()]
    by_trace: dict[str, list[JsonDict]] = {}
    for observation in observations:
        by_trace.setdefault(observation["traceId"], []).append(observation)
    templates = []
    for trace in by_trace.values():
        roots = [o for o in trace if o.get("isRootObservation")] or trace
        root_start = parse_time(roots[0]["startTime"])
        assert root_start is not None
        offsets = tuple(
            {
                key: moment - root_start
                for key in TIME_KEYS
                if (moment := parse_time(o.get(key))) is not None
            }
            for o in trace
        )
        templates.append(Template(tuple(trace), offsets))
    return templates


@dataclass(frozen=True)
class Feed:
    """Trace `index` is template `index % len(templates)`, its root at `start + index / rate`."""

    start_unix: float
    rate: float

    def root(self, index: int) -> datetime:
        return datetime.fromtimestamp(self.start_unix + index / self.rate, UTC)


def trace_id_of(index: int) -> str:
    return hashlib.sha256(f"soak-{index}".encode()).hexdigest()[:32]


def trace_observations(templates: list[Template], index: int, root: datetime) -> list[JsonDict]:
    """Trace `index` of the stream: shallow clones (nested values are shared, never mutated)."""
    template = templates[index % len(templates)]
    trace_id = trace_id_of(index)

    def new_id(old: str) -> str:
        return hashlib.sha256(f"{trace_id}/{old}".encode()).hexdigest()[:16]

    out = []
    for observation, offsets in zip(template.observations, template.offsets, strict=True):
        clone = dict(observation)
        clone["traceId"] = trace_id
        clone["id"] = new_id(observation["id"])
        if observation.get("parentObservationId"):
            clone["parentObservationId"] = new_id(observation["parentObservationId"])
        for key, offset in offsets.items():
            clone[key] = iso(root + offset)
        out.append(clone)
    return out


# -- the fake Langfuse, in its own process --------------------------------------------------

_INDEXED_PARAMS = frozenset(
    {"fields", "expandMetadata", "limit", "cursor", "fromStartTime", "toStartTime"}
)


class SoakLangfuse(FakeLangfuse):
    """The fake with an index by (startTime, id) and bounded bookkeeping.

    The daemon's query (a time window, a cursor, field groups) is answered from the
    index with the same ordering, bounds and cursor as the fake's full scan; any other
    query goes to the fake itself. Observations are stored as given (not deep-copied:
    the stream's clones share nested values). Requests are tallied, not kept.
    """

    def __init__(self) -> None:
        super().__init__()
        self._index: list[tuple[int, str]] = []
        self._tally: Counter[tuple[str, str, int]] = Counter()
        self._confidence_traces: set[str] = set()

    def add_observations(self, observations: Iterable[dict[str, Any]]) -> None:
        prepared = []
        for observation in observations:
            data = dict(observation)
            data.setdefault("projectId", DEFAULT_PROJECT_ID)
            data.setdefault("environment", DEFAULT_ENVIRONMENT)
            data.setdefault("isRootObservation", data.get("parentObservationId") is None)
            end = data.get("endTime")
            prepared.append(
                _StoredObservation(
                    data=data,
                    start_us=_to_us(_parse_time(data["startTime"])),
                    end_us=_to_us(_parse_time(end)) if isinstance(end, str) else None,
                )
            )
        with self._lock:
            for stored in prepared:
                obs_id = str(stored.data["id"])
                old = self._observations.get(obs_id)
                if old is not None:
                    at = bisect.bisect_left(self._index, old.sort_key)
                    if at < len(self._index) and self._index[at] == old.sort_key:
                        del self._index[at]
                self._observations[obs_id] = stored
                key = stored.sort_key
                if not self._index or key > self._index[-1]:
                    self._index.append(key)
                else:
                    bisect.insort(self._index, key)

    def clear_observations(self) -> None:
        with self._lock:
            self._observations.clear()
            self._index.clear()

    def _list_observations(self, query: dict[str, list[str]]) -> JsonDict:
        if not set(query) <= _INDEXED_PARAMS or any(len(v) != 1 for v in query.values()):
            return super()._list_observations(query)
        one = {name: values[0] for name, values in query.items()}
        try:
            lower = _to_us(_parse_time(one["fromStartTime"])) if "fromStartTime" in one else None
            upper = _to_us(_parse_time(one["toStartTime"])) if "toStartTime" in one else None
        except ValueError:
            return super()._list_observations(query)  # its 400
        groups = self._parse_fields(one.get("fields"))
        expand = frozenset(
            k.strip() for k in (one.get("expandMetadata") or "").split(",") if k.strip()
        )
        limit = self._parse_limit(one.get("limit"))
        after = _decode_cursor(one["cursor"]) if one.get("cursor") else None
        with self._lock:
            index = self._index
            lo = 0 if lower is None else bisect.bisect_left(index, (lower, ""))
            hi = len(index) if upper is None else bisect.bisect_left(index, (upper, ""))
            if after is not None:
                hi = min(hi, bisect.bisect_left(index, after))
            page = [self._observations[key[1]] for key in reversed(index[max(lo, hi - limit) : hi])]
            more = hi - lo > limit
        return {
            "data": [_project(obs.data, groups, expand) for obs in page],
            "meta": {"cursor": _encode_cursor(page[-1].sort_key) if more and page else None},
        }

    def _create_scores(self, body: bytes) -> _Response:
        response = super()._create_scores(body)
        if response.status == 202:
            traces = {s.get("traceId") for s in json.loads(body) if s.get("name") == "confidence"}
            with self._lock:
                self._confidence_traces.update(str(t) for t in traces if t)
        return response

    def tally(self) -> dict[tuple[str, str, int], int]:
        """Requests by (method, route, status) so far; status 0: cut off by an outage."""
        with self._lock:
            records, self._requests = self._requests, []
            self._score_posts = []  # kept by the fake for tests; not needed here
        for record in records:
            route = {OBSERVATIONS_PATH: "observations", SCORES_PATH: "scores"}.get(
                record.path, record.path
            )
            self._tally[(record.method, route, record.status)] += 1
        return dict(self._tally)

    def progress(self) -> tuple[int, int]:
        """(traces with a confidence score, scores stored)."""
        with self._lock:
            return len(self._confidence_traces), len(self._scores)

    def final(self) -> JsonDict:
        with self._lock:
            stored = list(self._scores.values())
        return {
            "score_ids": [str(s.get("id")) for s in stored],
            "confidence_traces": sorted(
                {str(s.get("traceId")) for s in stored if s.get("name") == "confidence"}
            ),
            "duplicates": self.duplicates(),
        }


def _project(data: JsonDict, groups: list[str], expand: frozenset[str]) -> JsonDict:
    """The fake's projection without its deep copies (the page is serialised at once)."""
    out: JsonDict = {}
    for group in groups:
        for key in FIELD_GROUPS[group]:
            value = data.get(key)
            out[key] = _truncate_metadata(value, expand) if key == "metadata" else value
    return out


def _serve(conn: Connection) -> None:
    """The fake's process: serve, and obey the controller's commands until `quit`."""
    templates = load_templates()
    fake = SoakLangfuse().start()
    conn.send((fake.url, fake.public_key, fake.secret_key))
    try:
        while True:
            try:
                command, *args = conn.recv()
            except EOFError:  # the controller is gone
                return
            answer: Any = True
            if command == "add":
                first, count, start_unix, rate = args
                feed = Feed(start_unix, rate)
                batch: list[JsonDict] = []
                for index in range(first, first + count):
                    batch += trace_observations(templates, index, feed.root(index))
                fake.add_observations(batch)
                answer = len(batch)
            elif command == "fail":
                fake.fail_next(*args)
            elif command == "clear":
                fake.clear_failures()
            elif command == "outage":
                fake.stop()
            elif command == "recover":
                fake.start()
            elif command == "tally":
                answer = fake.tally()
            elif command == "progress":
                answer = fake.progress()
            elif command == "final":
                answer = fake.final()
            elif command == "quit":
                conn.send(True)
                return
            conn.send(answer)
    finally:
        fake.stop()


class FakeClient:
    """The controller's end of the pipe; one command at a time, from any thread."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def call(self, *command: Any, timeout_s: float = 120.0) -> Any:
        with self._lock:
            self._conn.send(command)
            if not self._conn.poll(timeout_s):
                raise RuntimeError(f"the fake Langfuse did not answer {command[0]!r}")
            return self._conn.recv()


# -- the daemon ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def daemon_env(
    url: str, public_key: str, secret_key: str, poll_interval_s: float
) -> dict[str, str]:
    """The daemon's environment: defaults but for keys, poll interval, request cap, port."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OBSERVER_", "LANGFUSE_", "OTEL_", "OPENAI_"))
    }
    env.update(
        LANGFUSE_PUBLIC_KEY=public_key,
        LANGFUSE_SECRET_KEY=secret_key,
        LANGFUSE_BASE_URL=url,
        OBSERVER_SOURCE__POLL_INTERVAL_S=str(poll_interval_s),
        OBSERVER_SOURCE__REQUESTS_PER_MINUTE="60000",
        OBSERVER_HTTP_HOST=HOST,
        OBSERVER_LOG__FORMAT="json",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    return env


@dataclass
class Stop:
    """One stop of a daemon process."""

    how: str  # SIGTERM, SIGKILL, unexpected
    at_s: float
    seconds: float
    exit_code: int | None
    killed_after_grace: bool = False


class Daemon:
    """`observer run` as a subprocess, restarted on the same state file."""

    def __init__(self, env: dict[str, str], state: Path, log_path: Path, clock: Clock) -> None:
        self.env = env
        self.state = state
        self.log_path = log_path
        self.clock = clock
        self.grace_s = float(env.get("OBSERVER_RUN__SHUTDOWN_GRACE_S", "20"))
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.stopping = False
        self.starts = 0
        self.stops: list[Stop] = []

    def start(self) -> None:
        with self.lock:
            port = free_port()
            with self.log_path.open("ab") as log:
                log.write(f"=== soak: start #{self.starts + 1} at {self.clock():.1f} s\n".encode())
                log.flush()
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "observer", "run", "--state", str(self.state)],
                    env={**self.env, "OBSERVER_HTTP_PORT": str(port)},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.state.parent,  # not the checkout: the snapshot is imported
                )
            self.port = port
            self.starts += 1
            self.stopping = False

    def target(self) -> tuple[int, int] | None:
        """(pid, metrics port) of the running process, or None between processes."""
        with self.lock:
            if self.proc is None or self.stopping or self.proc.poll() is not None:
                return None
            return self.proc.pid, self.port

    def stop(self, how: signal.Signals) -> Stop:
        with self.lock:
            self.stopping = True
            proc = self.proc
        assert proc is not None
        began = time.monotonic()
        at = self.clock()
        killed = False
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(how)
        try:
            proc.wait(timeout=self.grace_s + 15)
        except subprocess.TimeoutExpired:
            killed = True
            proc.kill()
            proc.wait(timeout=15)
        record = Stop(how.name, at, time.monotonic() - began, proc.returncode, killed)
        self.stops.append(record)
        return record

    def restart(self, how: signal.Signals) -> None:
        self.stop(how)
        self.start()

    def revive_if_dead(self) -> None:
        """A process that exited without being told to is recorded and started again."""
        with self.lock:
            proc = self.proc
            dead = proc is not None and not self.stopping and proc.poll() is not None
        if dead and proc is not None and len(self.stops) < 20:
            self.stops.append(Stop("unexpected", self.clock(), 0.0, proc.returncode))
            self.start()

    def kill_if_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=15)


class Clock:
    """Seconds since the soak began."""

    def __init__(self) -> None:
        self.began = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.began


# -- sampling -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    at_s: float
    pid: int
    rss_mb: float | None
    lag_s: float | None  # the gauge; None while it reads 0 (no pass completed in this process)
    gauge_s: float | None  # the gauge as read
    passes: float  # observer_pass_duration_seconds_count (failed passes count too)
    state_lag_s: float | None  # now - the watermark in the state file
    outbox: float | None
    state_mb: float


def rss_mb(pid: int) -> float | None:
    try:
        import psutil  # type: ignore[import-untyped, unused-ignore]

        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except ImportError:
        pass
    except Exception:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def scrape(port: int) -> dict[str, float]:
    """Unlabelled samples of the daemon's /metrics (labelled ones summed by name)."""
    with _OPENER.open(f"http://{HOST}:{port}/metrics", timeout=2) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0]
        with contextlib.suppress(ValueError):
            values[name] = values.get(name, 0.0) + float(value)
    return values


def state_mb(state: Path) -> float:
    total = 0
    for path in (state, state.with_name(state.name + "-wal")):
        with contextlib.suppress(OSError):
            total += path.stat().st_size
    return total / 2**20


def state_lag_s(state: Path) -> float | None:
    """The lag by the watermark in the state file (read-only, a short read)."""
    try:
        db = sqlite3.connect(f"file:{state}?mode=ro", uri=True, timeout=1)
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    moment = parse_time(row[0]) if row else None
    return None if moment is None else time.time() - moment.timestamp()


def sample_forever(daemon: Daemon, samples: list[Sample], stop: threading.Event) -> None:
    while not stop.wait(SAMPLE_EVERY_S):
        daemon.revive_if_dead()
        target = daemon.target()
        if target is None:
            continue
        pid, port = target
        try:
            metrics = scrape(port)
        except OSError:
            metrics = {}
        lag = metrics.get("observer_watermark_lag_seconds")
        samples.append(
            Sample(
                at_s=daemon.clock(),
                pid=pid,
                rss_mb=rss_mb(pid),
                # After a good pass the lag is at least settle_s; 0 means no watermark yet.
                lag_s=lag if lag else None,
                gauge_s=lag,
                passes=metrics.get("observer_pass_duration_seconds_count", 0.0),
                state_lag_s=state_lag_s(daemon.state),
                outbox=metrics.get("observer_outbox_scores"),
                state_mb=state_mb(daemon.state),
            )
        )


# -- faults -------------------------------------------------------------------------------


@dataclass
class Fault:
    at_s: float  # from the start of the feed
    label: str
    action: Callable[[], None]
    injected: bool = True  # False: the end of a fault window
    done_at_s: float | None = None


def fault_schedule(
    fake: FakeClient, daemon: Daemon, feed_s: float, window_s: float, outage_s: float
) -> list[Fault]:
    """The faults at shares of the feed: restarts early, the rest after the warm-up."""
    faults: list[Fault] = []
    every = 10**6
    obs, scores = OBSERVATIONS_PATH, SCORES_PATH

    def at(share: float, label: str, action: Callable[[], None], injected: bool = True) -> None:
        faults.append(Fault(share * feed_s, label, action, injected))

    def window(share: float, seconds: float, label: str, begin: Callable[[], None]) -> None:
        at(share, label, begin)
        at(share + seconds / feed_s, f"end of: {label}", clear, injected=False)

    def fail(
        status: int, count: int, retry_after: float | None, path: str, method: str | None
    ) -> Callable[[], None]:
        def inject() -> None:
            fake.call("fail", status, count, retry_after, path, method)

        return inject

    def clear() -> None:
        fake.call("clear")

    def restart(how: signal.Signals) -> Callable[[], None]:
        return lambda: daemon.restart(how)

    def outage() -> None:
        fake.call("outage")

    def recover() -> None:
        fake.call("recover")

    w = f"{window_s:.0f} s"
    at(0.06, "5xx on reads: 3 x 503 (within the retries)", fail(503, 3, None, obs, "GET"))
    window(
        0.10, window_s, f"5xx on score posts: 503 for {w}", fail(503, every, None, scores, "POST")
    )
    at(
        0.10 + window_s / feed_s / 2,
        "SIGTERM + restart, score posts failing",
        restart(signal.SIGTERM),
    )
    at(0.20, "SIGTERM + restart", restart(signal.SIGTERM))
    at(0.30, "SIGKILL + restart", restart(signal.SIGKILL))
    window(
        0.55,
        window_s,
        f"429 storm, every route, Retry-After 2, for {w}",
        fail(429, every, 2.0, "/api/public", None),
    )
    window(
        0.63,
        window_s,
        f"5xx on reads: 502 for {w} (beyond the retries)",
        fail(502, every, None, obs, "GET"),
    )
    at(0.72, f"Langfuse outage: port closed for {outage_s:.0f} s", outage)
    at(0.72 + outage_s / feed_s, "end of the outage", recover, injected=False)
    window(
        0.82, window_s, f"5xx on score posts: 502 for {w}", fail(502, every, None, scores, "POST")
    )
    at(0.86, "5xx on reads: 4 x 503 (within the retries)", fail(503, 4, None, obs, "GET"))
    at(0.90, "429 on score posts: 5 x, Retry-After 5", fail(429, 5, 5.0, scores, "POST"))
    return sorted(faults, key=lambda f: f.at_s)


def run_faults(
    faults: list[Fault], feed_began_s: float, clock: Clock, stop: threading.Event
) -> None:
    for fault in faults:
        if stop.wait(max(0.0, feed_began_s + fault.at_s - clock())):
            return
        fault.done_at_s = clock() - feed_began_s
        try:
            fault.action()
        except Exception as error:  # report it; the soak goes on
            fault.label += f" (failed: {error!r})"


# -- what must be there: the pure core over the same observations ---------------------------


@dataclass
class Expected:
    scorable: int = 0
    scores: int = 0
    score_ids: dict[str, list[str]] = field(default_factory=dict)  # trace id -> score ids
    skipped: Counter[str] = field(default_factory=Counter)


def template_counts(templates: list[Template]) -> list[int]:
    """Scores per trace of each template (0: skipped): the catch-up target while feeding."""
    from observer.config import Settings
    from observer.mapping.convention import Skip, map_trace
    from observer.scores import score_events
    from observer.signals import compute

    settings = Settings()
    rules, params = settings.mapping_rules(), settings.signal_params()
    counts = []
    for index in range(len(templates)):
        trace = trace_observations(templates, index, datetime.now(UTC))
        mapped = map_trace(trace_id_of(index), trace, rules)
        if isinstance(mapped, Skip):
            counts.append(0)
        else:
            counts.append(len(score_events(mapped, compute(mapped, params), params)))
    return counts


def expected_scores(templates: list[Template], feed: Feed, added: int) -> Expected:
    """Map and score every trace added, as the daemon should have (pure core, no I/O)."""
    from observer.config import Settings
    from observer.mapping.convention import Skip, map_trace
    from observer.scores import score_events
    from observer.signals import compute

    settings = Settings()
    rules, params = settings.mapping_rules(), settings.signal_params()
    expected = Expected()
    for index in range(added):
        trace_id = trace_id_of(index)
        mapped = map_trace(trace_id, trace_observations(templates, index, feed.root(index)), rules)
        if isinstance(mapped, Skip):
            expected.skipped[mapped.reason] += 1
            continue
        events = score_events(mapped, compute(mapped, params), params)
        expected.scorable += 1
        expected.scores += len(events)
        expected.score_ids[trace_id] = [e.id for e in events]
    return expected


# -- the report ---------------------------------------------------------------------------


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}{unit}"


def verdict(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "MISSED")


@dataclass
class Outcome:
    rows: list[tuple[str, str, str, str]]
    fault_rows: list[tuple[str, str, str, str, str]]
    lost: list[str]
    incomplete: list[str]
    failed: bool


def median_rss(samples: list[Sample], start: float, end: float) -> float | None:
    values = [s.rss_mb for s in samples if start <= s.at_s < end and s.rss_mb is not None]
    return statistics.median(values) if values else None


def lags_between(
    samples: list[Sample], start: float, end: float, *, true: bool = False
) -> list[float]:
    """Lags sampled in [start, end): the gauge's, or (`true`) by the state file's watermark."""
    values = [s.state_lag_s if true else s.lag_s for s in samples if start <= s.at_s < end]
    return [v for v in values if v is not None]


def log_events(log_path: Path) -> Counter[str]:
    """The daemon's JSON log: events by name, `level:<level>` counts, and skipped polls."""
    events: Counter[str] = Counter()
    with log_path.open("rb") as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            name = str(event.get("event", ""))
            if "maximum number of running instances reached" in name:
                name = "apscheduler: poll skipped, a pass still running"
            events[name] += 1
            events[f"level:{event.get('level')}"] += 1
    return events


def report(
    *,
    args: argparse.Namespace,
    feed_s: float,
    rate: float,
    added: int,
    feed_began: float,
    feed_ended: float,
    caught_up_s: float | None,
    expected: Expected,
    final: JsonDict,
    tally: dict[tuple[str, str, int], int],
    samples: list[Sample],
    daemon: Daemon,
    final_stop: Stop,
    final_pid: int | None,
    faults: list[Fault],
    state_end_mb: float,
    events: Counter[str],
) -> Outcome:
    stored_ids: Counter[str] = Counter(final["score_ids"])
    confidence = set(final["confidence_traces"])
    lost = [t for t, ids in expected.score_ids.items() if not any(i in stored_ids for i in ids)]
    incomplete = [
        t
        for t, ids in expected.score_ids.items()
        if t not in lost and not all(i in stored_ids for i in ids)
    ]
    wanted = {i for ids in expected.score_ids.values() for i in ids}
    unexpected = sum(n for i, n in stored_ids.items() if i not in wanted)
    duplicated = len(final["duplicates"])

    feed_lags = lags_between(samples, feed_began, feed_ended)
    all_lags = [s.lag_s for s in samples if s.lag_s is not None]
    blind = [s for s in samples if s.lag_s is None]
    true_lags = lags_between(samples, feed_began, feed_ended, true=True)
    all_true = [s.state_lag_s for s in samples if s.state_lag_s is not None]
    first = samples[0] if samples else None
    rss_start = next((s.rss_mb for s in samples if first and s.pid == first.pid and s.rss_mb), None)
    # The last process: the median RSS over RSS_SPAN_S after its warm-up, and at its end
    # (one sample moves by a few MB either way).
    final_samples = [s for s in samples if s.pid == final_pid and s.rss_mb is not None]
    warm_at = final_samples[0].at_s + min(WARMUP_S, 0.2 * feed_s) if final_samples else 0.0
    end_at = final_samples[-1].at_s - RSS_SPAN_S if final_samples else 0.0
    rss_warm = median_rss(final_samples, warm_at, warm_at + RSS_SPAN_S)
    rss_end = median_rss(final_samples, end_at, math.inf)
    growth = None if rss_warm is None or rss_end is None else 100 * (rss_end - rss_warm) / rss_warm
    peak = max((s.rss_mb for s in samples if s.rss_mb is not None), default=None)
    state_peak = max((s.state_mb for s in samples), default=0.0)

    def count(route: str, test: Callable[[int], bool], method: str | None = None) -> int:
        return sum(
            n
            for (m, r, status), n in tally.items()
            if r == route and test(status) and (method is None or m == method)
        )

    ok_reads = count("observations", lambda s: s == 200)
    posts_ok = count("scores", lambda s: s == 202)
    injected_5xx = sum(n for (_, _, s), n in tally.items() if s in (502, 503))
    injected_429 = sum(n for (_, _, s), n in tally.items() if s == 429)
    crashed = sum(n for (_, _, s), n in tally.items() if s == 500)
    cut = sum(n for (_, _, s), n in tally.items() if s == 0)
    term_stops = [s for s in daemon.stops if s.how == "SIGTERM"]
    kinds = Counter(s.how for s in daemon.stops if s is not final_stop)
    grace = daemon.grace_s
    slowest_term = max((s.seconds for s in term_stops), default=None)
    bad_exits = [s for s in term_stops if s.exit_code != 0 or s.killed_after_grace]
    injected = [f for f in faults if f.injected]

    rows = [
        ("feed", f"{feed_s / 60:.1f} min at {rate:,.1f} traces/s", "", ""),
        ("traces added", f"{added:,}", "", ""),
        ("traces scorable (pure core)", f"{expected.scorable:,}", "", ""),
        (
            "traces scored (confidence score)",
            f"{len(confidence):,}",
            f"{expected.scorable:,}",
            verdict(len(confidence) >= expected.scorable),
        ),
        ("lost (scorable, no score)", f"{len(lost):,}", "0", verdict(not lost)),
        ("incomplete (some scores missing)", f"{len(incomplete):,}", "0", verdict(not incomplete)),
        ("duplicated (subjects stored twice)", f"{duplicated:,}", "0", verdict(duplicated == 0)),
        (
            "scores stored",
            f"{sum(stored_ids.values()):,} ({unexpected:,} unexpected)",
            f"{expected.scores:,}",
            verdict(sum(stored_ids.values()) == expected.scores and unexpected == 0),
        ),
        (
            "lag p50 / p95 during the feed (/metrics)",
            f"{fmt(percentile(feed_lags, 0.5))} / {fmt(percentile(feed_lags, 0.95))} s",
            "",
            "",
        ),
        (
            "lag max (/metrics); samples kept / reading 0",
            f"{fmt(max(all_lags, default=None))} s; {len(all_lags)} / {len(blind)}",
            "",
            "",
        ),
        (
            "lag p50 / p95 / max by the state file's watermark",
            f"{fmt(percentile(true_lags, 0.5))} / {fmt(percentile(true_lags, 0.95))} / "
            f"{fmt(max(all_true, default=None))} s",
            "",
            "",
        ),
        (
            "catch-up after the feed stopped",
            "timed out" if caught_up_s is None else f"{caught_up_s:.0f} s",
            f"<= {args.catch_up_s:.0f} s",
            verdict(caught_up_s is not None),
        ),
        ("RSS at start", fmt(rss_start, " MB", 0), "", ""),
        (
            "RSS after warm-up (last process, median)",
            fmt(rss_warm, " MB", 0) + f" at {warm_at - feed_began:.0f}-"
            f"{warm_at - feed_began + RSS_SPAN_S:.0f} s",
            "",
            "",
        ),
        ("RSS at the end (median, last 30 s)", fmt(rss_end, " MB", 0), "", ""),
        (
            "RSS growth after warm-up",
            fmt(growth, " %"),
            "< 10 %",
            verdict(None if growth is None else growth < 10),
        ),
        ("RSS peak (any process)", fmt(peak, " MB", 0), "", ""),
        (
            "state file (db + -wal) at the end / peak",
            f"{state_end_mb:.1f} / {state_peak:.1f} MB",
            "",
            "",
        ),
        (
            "daemon restarts",
            ", ".join(f"{n} {how}" for how, n in sorted(kinds.items())) or "none",
            "",
            "",
        ),
        (
            "SIGTERM: slowest exit",
            fmt(slowest_term, " s") + ("" if not bad_exits else f" ({len(bad_exits)} not clean)"),
            f"<= {grace + 2:.0f} s (grace + 2), exit 0",
            verdict(None if slowest_term is None else slowest_term <= grace + 2 and not bad_exits),
        ),
        ("faults injected", f"{len(injected)}", "", ""),
        ("  injected 5xx / 429 answered", f"{injected_5xx:,} / {injected_429:,}", "", ""),
        ("  requests cut by the outage", f"{cut:,}", "", ""),
        ("observation pages read / score posts accepted", f"{ok_reads:,} / {posts_ok:,}", "", ""),
        ("fake Langfuse errors (500)", f"{crashed:,}", "0", verdict(crashed == 0)),
        (
            "daemon log: poll_completed / poll_failed",
            f"{events['poll_completed']:,} / {events['poll_failed']:,}",
            "",
            "",
        ),
        (
            "daemon log: score pushes failed / polls skipped",
            f"{events['score_push_failed']:,} / "
            f"{events['apscheduler: poll skipped, a pass still running']:,}",
            "",
            "",
        ),
        (
            "daemon log: warnings / errors",
            f"{events['level:warning']:,} / {events['level:error'] + events['level:critical']:,}",
            "",
            "",
        ),
    ]

    fault_rows = []
    marks = [f.done_at_s for f in injected if f.done_at_s is not None]
    for fault in injected:
        if fault.done_at_s is None:
            fault_rows.append(("-", fault.label, "", "", "not run"))
            continue
        at = feed_began + fault.done_at_s
        later = [m for m in marks if m > fault.done_at_s]
        until = feed_began + later[0] if later else feed_ended
        cells = []
        for true in (False, True):
            earlier = lags_between(samples, 0.0, at, true=true)
            later_lags = lags_between(samples, at, until, true=true)
            cells.append(
                (
                    fmt(earlier[-1] if earlier else None, digits=0),
                    fmt(max(later_lags, default=None), digits=0),
                    fmt(later_lags[-1] if later_lags else None, digits=0),
                )
            )
        lag_before, lag_max, lag_then = (f"{m} / {s}" for m, s in zip(*cells, strict=True))
        fault_rows.append((f"{fault.done_at_s:.0f}", fault.label, lag_before, lag_max, lag_then))
    failed = bool(lost or incomplete or duplicated)
    return Outcome(rows, fault_rows, lost, incomplete, failed)


def snapshot_observer(workdir: Path) -> tuple[Path, str]:
    """A copy of the observer package the daemon runs from, whatever others edit meanwhile.

    Returns its directory (for PYTHONPATH) and what it is: the commit and the files under
    observer/ that differ from it.
    """
    src = workdir / "src"
    shutil.copytree(
        ROOT / "observer", src / "observer", ignore=shutil.ignore_patterns("__pycache__")
    )

    def git(*command: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *command], capture_output=True, text=True, check=False
        )
        return done.stdout.rstrip("\n")

    changed = git("status", "--porcelain", "--", "observer").splitlines()
    described = f"observer at {git('rev-parse', '--short', 'HEAD') or 'unknown commit'}"
    if changed:
        described += f" with uncommitted changes: {', '.join(c[3:] for c in changed)}"
    return src, described


def print_report(outcome: Outcome, title: str, workdir: Path, code: str) -> None:
    console = Console(width=130)
    table = Table(title=title)
    for column in ("measure", "value", "target", ""):
        table.add_column(column, justify="right")
    for row in outcome.rows:
        table.add_row(*row)
    console.print(table)
    faults = Table(title="faults: lag in s, from /metrics / by the state file's watermark")
    for column in ("at (s)", "fault", "lag before", "max until next fault", "lag then"):
        faults.add_column(column, justify="right" if column != "fault" else "left")
    for fault_row in outcome.fault_rows:
        faults.add_row(*fault_row)
    console.print(faults)
    console.print(f"daemon log, state file and samples: {workdir}")
    console.print(f"daemon code: {code}")


# -- the run ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=None, help="feed duration (10)")
    parser.add_argument("--rate", type=float, default=None, help="traces/s (100,000 in all)")
    parser.add_argument("--quick", action="store_true", help="1 minute at 30 traces/s")
    parser.add_argument("--poll-interval-s", type=float, default=None, help="daemon poll (3)")
    parser.add_argument("--catch-up-s", type=float, default=None, help="wait after the feed")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="OBSERVER_X=V",
        help="a daemon setting, e.g. OBSERVER_SOURCE__OVERLAP_S=60 (also seen by the pure core)",
    )
    args = parser.parse_args(argv)
    for item in args.set:
        name, sep, _ = item.partition("=")
        if not sep or not name.startswith("OBSERVER_"):
            parser.error(f"--set wants OBSERVER_NAME=VALUE, got {item!r}")
    args.minutes = args.minutes or (1.0 if args.quick else 10.0)
    feed_s = args.minutes * 60
    args.rate = args.rate or (30.0 if args.quick else 100_000 / feed_s)
    args.poll_interval_s = args.poll_interval_s or (2.0 if args.quick else 3.0)
    args.catch_up_s = args.catch_up_s or max(120.0, feed_s)
    if args.minutes <= 0 or args.rate <= 0:
        parser.error("--minutes and --rate must be positive")
    return args


@contextlib.contextmanager
def fake_langfuse() -> Iterator[tuple[FakeClient, str, str, str]]:
    parent, child = mp.Pipe()
    server = mp.get_context("spawn").Process(target=_serve, args=(child,), daemon=True)
    server.start()
    try:
        if not parent.poll(60):
            raise RuntimeError("the fake Langfuse did not start")
        url, pk, sk = parent.recv()
        client = FakeClient(parent)
        yield client, url, pk, sk
        with contextlib.suppress(Exception):
            client.call("quit", timeout_s=15)
    finally:
        server.join(timeout=10)
        if server.is_alive():
            server.terminate()
            server.join(timeout=5)


def wait_ready(daemon: Daemon, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        target = daemon.target()
        if target is not None:
            with contextlib.suppress(OSError):
                scrape(target[1])
                return True
        time.sleep(0.2)
    return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    feed_s = args.minutes * 60
    rate = args.rate
    total = round(rate * feed_s)
    window_s = min(20.0, max(4.0, feed_s / 30))
    outage_s = min(30.0, max(5.0, feed_s / 20))
    workdir = Path(tempfile.mkdtemp(prefix="observer-soak-"))
    state = workdir / "state.sqlite"
    src, code = snapshot_observer(workdir)
    for key in [k for k in os.environ if k.startswith("OBSERVER_")]:
        del os.environ[key]  # the pure core must see the daemon's settings
    overrides = dict(item.split("=", 1) for item in args.set)
    os.environ.update(overrides)
    templates = load_templates()
    per_template = template_counts(templates)
    clock = Clock()
    samples: list[Sample] = []
    stop_sampling = threading.Event()
    stop_faults = threading.Event()
    console = Console(stderr=True)

    with fake_langfuse() as (fake, url, pk, sk):
        env = {**daemon_env(url, pk, sk, args.poll_interval_s), **overrides}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
        daemon = Daemon(env, state, workdir / "daemon.log", clock)
        sampler = threading.Thread(
            target=sample_forever, args=(daemon, samples, stop_sampling), daemon=True
        )
        try:
            daemon.start()
            if not wait_ready(daemon, 60):
                raise SystemExit(f"the daemon did not serve /metrics; see {daemon.log_path}")
            sampler.start()
            feed_began = clock()
            feed = Feed(time.time(), rate)
            faults = fault_schedule(fake, daemon, feed_s, window_s, outage_s)
            fault_thread = threading.Thread(
                target=run_faults, args=(faults, feed_began, clock, stop_faults), daemon=True
            )
            fault_thread.start()
            console.print(
                f"soak: {total:,} traces over {feed_s / 60:.1f} min into {url}, "
                f"daemon log {daemon.log_path}"
            )

            added = 0
            hard_stop = feed_began + feed_s + 120
            tallied = clock()
            while added < total and clock() < hard_stop:
                due = min(total, math.floor((time.time() - feed.start_unix) * rate) + 1)
                if due > added:
                    fake.call("add", added, due - added, feed.start_unix, rate)
                    added = due
                if clock() - tallied > 30:  # the fake keeps every request until tallied
                    fake.call("tally")
                    tallied = clock()
                time.sleep(FEED_TICK_S)
            feed_ended = clock()
            fault_thread.join(timeout=60)
            stop_faults.set()
            fault_thread.join(timeout=60)

            want_traces = sum(1 for i in range(added) if per_template[i % len(templates)])
            want_scores = sum(per_template[i % len(templates)] for i in range(added))
            console.print(
                f"soak: feed done ({added:,} traces); waiting up to {args.catch_up_s:.0f} s "
                f"for {want_traces:,} traces / {want_scores:,} scores"
            )
            caught_up_s: float | None = None
            deadline = clock() + args.catch_up_s
            while clock() < deadline:
                traces_done, scores_done = fake.call("progress")
                fake.call("tally")
                if traces_done >= want_traces and scores_done >= want_scores:
                    caught_up_s = clock() - feed_ended
                    break
                time.sleep(5)
            time.sleep(SAMPLE_EVERY_S * 1.5)  # one more sample of the settled daemon
            target = daemon.target()
            final_pid = target[0] if target else None
            stop_sampling.set()
            sampler.join(timeout=10)
            final_stop = daemon.stop(signal.SIGTERM)
            final = fake.call("final", timeout_s=300)
            tally = fake.call("tally")
        finally:
            stop_faults.set()
            stop_sampling.set()
            daemon.kill_if_alive()

    console.print("soak: mapping every trace added with the pure core ...")
    expected = expected_scores(templates, feed, added)
    outcome = report(
        args=args,
        feed_s=feed_s,
        rate=rate,
        added=added,
        feed_began=feed_began,
        feed_ended=feed_ended,
        caught_up_s=caught_up_s,
        expected=expected,
        final=final,
        tally=tally,
        samples=samples,
        daemon=daemon,
        final_stop=final_stop,
        final_pid=final_pid,
        faults=faults,
        state_end_mb=state_mb(state),
        events=log_events(daemon.log_path),
    )
    (workdir / "samples.json").write_text(
        json.dumps(
            {
                "feed_began_s": feed_began,
                "feed_ended_s": feed_ended,
                "samples": [asdict(s) for s in samples],
                "stops": [asdict(s) for s in daemon.stops],
                "faults": [
                    {"at_s": f.done_at_s, "label": f.label, "injected": f.injected} for f in faults
                ],
                "tally": [[*key, n] for key, n in sorted(tally.items(), key=str)],
                "lost_traces": outcome.lost,
                "incomplete_traces": outcome.incomplete,
            },
            indent=1,
        )
    )
    title = (
        f"observer run, soak of {added:,} traces over {feed_s / 60:.1f} min with faults "
        f"(poll {args.poll_interval_s:g} s{''.join(', ' + item for item in args.set)}, "
        "fake Langfuse on loopback)"
    )
    print_report(outcome, title, workdir, code)
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
