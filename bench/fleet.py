"""A fleet's hand-over, scoring, Redis memory and takeover: `python bench/fleet.py`.

One run prints four tables, over N traces (the demo's, cloned) served by the
fake Langfuse as the service pages (its own process, real HTTP, pages cut short
and empty with a cursor) and a real redis-server on loopback (AOF,
`appendfsync everysec` as deployed):

a. the reader's hand-over: one reader's pass (this process, the member's own
   pipeline, marks and publisher, no worker) pages every observation and
   publishes each complete trace to the stream; beside it the bare cost of
   paging the same observations with the SDK's API client and no Redis.
b. scoring: one daemon without [fleet], then 1, 2 and 3 members (`observer run`
   subprocesses, fresh state files, a fresh Redis database): the time from the
   first page read to every answer trace's scores stored in the fake, traces/s,
   the CPU used per trace from then (/proc), and scores stored twice (must be 0).
c. Redis memory: bytes per key kind, `MEMORY USAGE` of the keys the fleet wrote
   (the hand-over's stream entries and seen marks, the members' signal rows, judge
   and trace-rule claims written by `FleetBudget` and `FleetAlerts` as a member
   writes them), with what Redis gives back when they are deleted; and from them
   what 1,000 traces/s keeps, each kind bounded by its TTL or trim.
d. takeover: three members caught up, the reader SIGKILLed (then the next one):
   the time until the next reader's first observation request, beside what the
   docs promise (`fleet.lease_s` plus a third of it: the lease runs out, the next
   keeper round takes it).

Everything shares this machine's cores (members, the fake, Redis, and whatever
else runs): past the core count more members do not add throughput here.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

import redis
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pipeline import make_traces, page_all  # noqa: E402
from tests.servers import RedisServer, free_port  # noqa: E402

NAME = "bench"
FLEET_NAMES = ("{bench}",)
CONFIG = """\
[source]
poll_interval_s = 1
lookback_s = 7200
requests_per_minute = 100000

[http]
enabled = false

[log]
level = "warning"

[fleet]
secret_env = "FLEET_REDIS"
name = "bench"
lease_s = {lease_s}
claim_idle_s = {claim_idle_s}
"""


def _serve(conn: Connection, observations: list[dict[str, Any]]) -> None:
    from tests.fakes.langfuse_server import FakeLangfuse

    with FakeLangfuse.service_like(seed=1, ingestion_jitter_s=0.0) as fake:
        fake.add_observations(observations)
        conn.send((fake.url, fake.public_key, fake.secret_key))
        while True:
            command = conn.recv()
            if command == "scored":
                conn.send(fake.scored_traces())
            elif command == "duplicates":
                conn.send(len(fake.duplicates()))
            elif command == "observation_requests":
                conn.send(fake.observation_requests())
            elif isinstance(command, tuple) and command[0] == "first_page_after":
                after = command[1]
                times = [
                    r.time
                    for r in fake.requests
                    if r.method == "GET" and "observations" in r.path and r.time > after
                ]
                conn.send(min(times) if times else None)
            else:
                return


@contextmanager
def _fake(
    observations: list[dict[str, Any]], server: RedisServer
) -> Iterator[tuple[dict[str, str], Connection]]:
    """The fake Langfuse in its own process; the members' environment and its pipe."""
    parent, child = mp.Pipe()
    fake = mp.get_context("spawn").Process(target=_serve, args=(child, observations), daemon=True)
    fake.start()
    url, pk, sk = parent.recv()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBSERVER_", "LANGFUSE_"))}
    env.update(
        LANGFUSE_PUBLIC_KEY=pk,
        LANGFUSE_SECRET_KEY=sk,
        LANGFUSE_BASE_URL=url,
        FLEET_REDIS=server.url,
        PYTHONPATH=str(ROOT),
    )
    try:
        yield env, parent
    finally:
        parent.send("stop")
        fake.join(timeout=10)


def _answers(observations: list[dict[str, Any]]) -> int:
    """How many of the traces one daemon scores (the pure core, no I/O)."""
    from observer.config import Settings
    from observer.mapping.convention import map_trace
    from observer.mapping.rules import Skip

    rules = Settings().mapping_rules()
    by_trace = _by_trace(observations)
    return sum(not isinstance(map_trace(t, o, rules), Skip) for t, o in by_trace.items())


def _by_trace(observations: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in observations:
        by_trace.setdefault(observation["traceId"], []).append(observation)
    return by_trace


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start(
    count: int, workdir: Path, env: dict[str, str], tag: str, *, single: bool = False
) -> list[subprocess.Popen[bytes]]:
    """`count` members (or, `single`, one daemon without [fleet]) on fresh state files."""
    config = workdir / ("single.toml" if single else "observer.toml")
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "observer",
                "run",
                "--config",
                str(config),
                "--state",
                str(workdir / f"{tag}-{i}.sqlite"),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(workdir / f"{tag}-{i}.log").open("wb"),
        )
        for i in range(count)
    ]


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def _wait(
    condition: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: not within {timeout_s:g} s: {what}")
        time.sleep(every_s)


def _used(client: redis.Redis) -> int:
    return int(cast(dict[str, Any], client.info("memory"))["used_memory"])


def _usage(client: redis.Redis, key: str) -> int:
    """MEMORY USAGE of one key, every element counted (SAMPLES 0)."""
    return int(cast(int, client.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0")))


def _keys(client: redis.Redis, pattern: str) -> list[str]:
    return [k.decode() for k in client.scan_iter(match=pattern, count=1000)]


def _freed_per_key(client: redis.Redis, keys: list[str]) -> float:
    """What Redis gives back per key when `keys` are deleted (its expiry entries too)."""
    before = _used(client)
    for i in range(0, len(keys), 1000):
        client.delete(*keys[i : i + 1000])
    return (before - _used(client)) / max(1, len(keys))


# -- c. what each kind of key costs ----------------------------------------------------


@dataclass
class KeyKind:
    """One kind of key the fleet writes, as measured."""

    name: str
    key: str
    bytes_each: float  # MEMORY USAGE per key or per entry
    freed_each: float | None  # what deleting them gave back, per key or entry
    sampled: int
    ttl_s: float | None = None  # as Redis reported it on a sampled key


@dataclass
class Memory:
    kinds: dict[str, KeyKind] = field(default_factory=dict)

    def sample_small(self, client: redis.Redis, kind: str, pattern: str, *, free: bool) -> None:
        """Single-value keys matching `pattern`: their mean MEMORY USAGE and TTL."""
        keys = _keys(client, pattern)
        if not keys:
            raise SystemExit(f"bench: no {kind} keys ({pattern}) to measure")
        sample = keys[:2000]
        usage = sum(_usage(client, k) for k in sample) / len(sample)
        ttl_ms = int(cast(int, client.pttl(sample[0])))
        freed = _freed_per_key(client, keys) if free else None
        self.kinds[kind] = KeyKind(
            kind, pattern, usage, freed, len(keys), ttl_ms / 1000 if ttl_ms > 0 else None
        )

    def sample_stream(self, client: redis.Redis, kind: str, key: str, *, free: bool) -> None:
        """A stream (or sorted set): MEMORY USAGE per entry."""
        stream = client.type(key) == b"stream"
        count = int(cast(int, client.xlen(key) if stream else client.zcard(key)))
        if not count:
            raise SystemExit(f"bench: {key} is empty")
        usage = _usage(client, key) / count
        freed = _freed_per_key(client, [key]) / count if free else None
        self.kinds[kind] = KeyKind(kind, key, usage, freed, count)


def claims(client: redis.Redis, workdir: Path, trace_ids: list[str], memory: Memory) -> None:
    """Judge and trace-rule claims, written and confirmed as a member writes them."""
    from observer.fleet.alerts import FleetAlerts
    from observer.fleet.budget import FleetBudget
    from observer.fleet.keys import Keys
    from observer.state import State

    keys = Keys(NAME)
    budget = FleetBudget(client, keys)
    now = datetime.now(UTC)
    hour, day = now.strftime("%Y-%m-%dT%H"), now.strftime("%Y-%m-%d")
    owner = "bench-host-0a1b2c3d"
    for trace_id in trace_ids:
        basis = hashlib.sha256(trace_id.encode()).hexdigest()[:16]  # as answer_basis
        taken = budget.claim(
            trace_id, basis, hour, day, 700, owner=owner, max_judged=10**9, max_tokens=10**12
        )
        assert taken == "taken", taken
        budget.confirm(trace_id, basis, 700, owner)
    memory.sample_small(client, "judge claim", keys.judged("*", "*"), free=True)
    state = State(workdir / "claims.sqlite")
    try:
        alerts = FleetAlerts(client, keys, state, owner, maxlen=100_000)
        for trace_id in trace_ids:
            assert alerts.admit("critical_claim_unsupported", trace_id, hour, 10**9) == "notify"
            alerts.confirm("critical_claim_unsupported", trace_id)
    finally:
        state.close()
    memory.sample_small(client, "trace-rule claim", keys.trace_alert("*", "*"), free=True)


# -- a. the reader's hand-over -----------------------------------------------------------


@dataclass
class HandOver:
    bare_s: float
    bare_observations: int
    reader_s: float
    published: int
    requests: int
    used_per_trace: float  # Redis's used_memory after the pass, less before, per trace


def bare_paging(url: str, pk: str, sk: str, start: datetime, end: datetime) -> tuple[float, int]:
    """Seconds to page every observation with the SDK's API client, following the cursor
    through cut and empty pages; and how many."""
    from observer.langfuse_api import build_api

    api = build_api(url, pk, sk, 60)
    began = time.perf_counter()
    seen = page_all(api, start, end)
    return time.perf_counter() - began, seen


def hand_over(
    workdir: Path,
    env: dict[str, str],
    conn: Connection,
    client: redis.Redis,
    memory: Memory,
    rounds: int,
) -> HandOver:
    """Best of `rounds` for each: bare paging, then one reader's pass publishing every
    complete trace (a fresh Redis database and state file each round; no worker)."""
    from observer import app
    from observer.config import load_settings
    from observer.telemetry.logging import configure_logging

    configure_logging("json", "warning")
    os.environ.update(env)
    settings = load_settings(workdir / "observer.toml")
    url, pk, sk = env["LANGFUSE_BASE_URL"], env["LANGFUSE_PUBLIC_KEY"], env["LANGFUSE_SECRET_KEY"]
    best: HandOver | None = None
    for round_ in range(rounds):
        end = datetime.now(UTC)
        bare_s, seen = bare_paging(url, pk, sk, end - timedelta(seconds=7200), end)
        client.flushall()
        used = _used(client)
        conn.send("observation_requests")
        asked = int(conn.recv())
        with app.build(
            settings,
            mode="member",
            state_path=workdir / f"reader-{round_}.sqlite",
            redis_client=redis.Redis.from_url(settings.fleet_url(), socket_timeout=30),
            member_name=f"reader-{round_}",
        ) as parts:
            member = parts.member
            assert member is not None
            member.check_epoch()
            assert member.lease.keep(), "the lease, in a fresh database"
            began = time.perf_counter()
            parts.passes.tick()
            reader_s = time.perf_counter() - began
        stream = member.stream
        published = stream.length()
        conn.send("observation_requests")
        requests = int(conn.recv()) - asked
        found = HandOver(
            bare_s, seen, reader_s, published, requests, (_used(client) - used) / max(1, published)
        )
        if best is None or found.reader_s / found.bare_s < best.reader_s / best.bare_s:
            best = found
    assert best is not None
    keys = stream.keys
    memory.sample_small(client, "seen mark", keys.seen("*"), free=False)
    memory.sample_stream(client, "pending entry", keys.stream, free=False)
    memory.sample_stream(client, "in-flight root", keys.inflight, free=False)
    for kind, key in (("pending entry", keys.stream), ("in-flight root", keys.inflight)):
        count = memory.kinds[kind].sampled
        memory.kinds[kind].freed_each = _freed_per_key(client, [key]) / count
    seen_keys = _keys(client, keys.seen("*"))
    memory.kinds["seen mark"].freed_each = _freed_per_key(client, seen_keys)
    return best


# -- b. scoring ----------------------------------------------------------------------------


@dataclass
class Scoring:
    took_s: float
    cpu_s: float
    redis_cpu_s: float
    duplicates: int


def throughput(
    members: int,
    workdir: Path,
    env: dict[str, str],
    conn: Connection,
    client: redis.Redis,
    answers: int,
    server: RedisServer,
    memory: Memory | None,
) -> Scoring:
    """Time, CPU and duplicates to score every answer; with `memory`, the signal rows the
    members shared measured after."""
    client.flushall()
    started = time.time()
    processes = _start(max(1, members), workdir, env, f"n{members}", single=members == 0)
    try:
        first: list[float] = []

        def paging() -> bool:
            conn.send(("first_page_after", started))
            at = conn.recv()
            if at is not None:
                first.append(at)
            return at is not None

        _wait(paging, 60, "a first page read")
        began = time.monotonic() - (time.time() - first[0])
        # From here: the members' start-up (imports, connections) is not the traces' cost.
        cpu_before = sum(_cpu_s(p.pid) for p in processes)
        redis_cpu = _cpu_s(server.pid)

        def scored() -> bool:
            conn.send("scored")
            return bool(conn.recv() >= answers)

        _wait(scored, 300, "every answer scored", every_s=0.1)
        took = time.monotonic() - began
        cpu = sum(_cpu_s(p.pid) for p in processes) - cpu_before
        redis_cpu = _cpu_s(server.pid) - redis_cpu
    finally:
        _stop(processes)
    if memory is not None:
        memory.sample_stream(client, "signal row", "{bench}:signals", free=True)
    conn.send("duplicates")
    return Scoring(took, cpu, redis_cpu, int(conn.recv()))


# -- d. takeover -----------------------------------------------------------------------------


def takeovers(
    workdir: Path,
    env: dict[str, str],
    conn: Connection,
    client: redis.Redis,
    answers: int,
    kills: int,
) -> list[float]:
    """Seconds from each reader's SIGKILL to the next reader's first observation request:
    three members caught up, the reader killed, then the next one (`kills` <= 2)."""
    client.flushall()
    processes = _start(3, workdir, env, "takeover")
    found: list[float] = []
    try:

        def caught_up() -> bool:
            conn.send("scored")
            return bool(conn.recv() >= answers) and client.zcard("{bench}:inflight") == 0

        _wait(caught_up, 300, "caught up", every_s=0.1)
        for _ in range(kills):
            holder = cast(bytes | None, client.get("{bench}:reader"))
            assert holder is not None
            member = holder.decode().rsplit(":", 1)[0]
            pid = int(cast(bytes, client.hget(f"{{bench}}:member:{member}", "pid") or b"0"))
            time.sleep(1.0)  # a keeper round in the lease's life: where it is is left to chance
            killed_at = time.time()
            os.kill(pid, signal.SIGKILL)
            pages: list[float] = []

            def next_page(
                killed_at: float = killed_at, holder: bytes = holder, pages: list[float] = pages
            ) -> bool:
                conn.send(("first_page_after", killed_at + 0.001))
                at = conn.recv()
                value = client.get("{bench}:reader")
                if at is not None and value is not None and value != holder:
                    pages.append(at)
                    return True
                return False

            _wait(next_page, 120, "the next reader's first page")
            found.append(pages[0] - killed_at)
    finally:
        _stop(processes)
    return found


# -- the tables --------------------------------------------------------------------------------


def _mb(value: float) -> str:
    return f"{value / 1e6:,.1f} MB" if value < 1e9 else f"{value / 1e9:,.2f} GB"


def _n(value: float) -> str:
    return f"{value:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=3000, help="traces for tables a, b and d")
    parser.add_argument("--lease-s", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2, help="table a: best of this many")
    parser.add_argument("--kills", type=int, default=2, choices=(1, 2), help="table d")
    parser.add_argument("--members", type=int, nargs="*", default=[0, 1, 2, 3], help="table b")
    parser.add_argument(
        "--alert-share", type=float, default=0.01, help="table c: traces a trace rule raises"
    )
    args = parser.parse_args()
    began = time.monotonic()
    observations = make_traces(args.traces, datetime.now(UTC) - timedelta(minutes=5))
    answers = _answers(observations)
    trace_ids = list(_by_trace(observations))
    memory = Memory()
    runs: dict[int, Scoring] = {}
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        (workdir / "observer.toml").write_text(
            CONFIG.format(lease_s=args.lease_s, claim_idle_s=max(60.0, args.lease_s))
        )
        (workdir / "single.toml").write_text(CONFIG.split("[fleet]")[0])
        server = RedisServer("redis-server", workdir, free_port(), appendfsync="everysec")
        server.start()
        client = redis.Redis.from_url(server.url)
        try:
            with _fake(observations, server) as (env, parent):
                handed = hand_over(workdir, env, parent, client, memory, args.rounds)
            client.flushall()
            claims(client, workdir, trace_ids[:1000], memory)
            for n in args.members:  # a fresh fake (a project without scores) for each
                with _fake(observations, server) as (env, parent):
                    runs[n] = throughput(
                        n,
                        workdir,
                        env,
                        parent,
                        client,
                        answers,
                        server,
                        memory if n == 1 else None,
                    )
            with _fake(observations, server) as (env, parent):
                switches = takeovers(workdir, env, parent, client, answers, args.kills)
        finally:
            server.stop()
    console = Console(width=140)
    cores = f"{os.cpu_count()} cores shared with other jobs"
    print_hand_over(console, args, observations, handed, cores)
    print_scoring(console, args, observations, answers, runs, cores)
    print_memory(console, args, memory)
    print_takeover(console, args, switches)
    console.print(f"whole bench: {time.monotonic() - began:.0f} s")
    duplicates = sum(r.duplicates for r in runs.values())
    if duplicates:
        raise SystemExit(f"bench: {duplicates} scores stored twice")


def print_hand_over(
    console: Console, args: Any, observations: list[dict[str, Any]], h: HandOver, cores: str
) -> None:
    table = Table(
        title=f"a. the reader's hand-over: {args.traces:,} traces ({len(observations):,} "
        f"observations), service-like fake Langfuse, best of {args.rounds}; {cores}"
    )
    for column in ("", "time", "traces/s", "observations/s", "vs bare paging"):
        table.add_column(column, justify="right")
    table.add_row(
        "bare paging (SDK API client, no Redis)",
        f"{h.bare_s:.2f} s",
        _n(args.traces / h.bare_s),
        _n(h.bare_observations / h.bare_s),
        "1.00x",
    )
    table.add_row(
        f"reader: one pass, paged and published ({h.published:,} entries, {h.requests} requests)",
        f"{h.reader_s:.2f} s",
        _n(h.published / h.reader_s),
        _n(len(observations) / h.reader_s),
        f"{h.reader_s / h.bare_s:.2f}x",
    )
    console.print(table)
    console.print(
        f"Redis used_memory after the pass, less before: {h.used_per_trace:,.0f} bytes "
        "per published trace (entry, in-flight root, seen mark)"
    )


def print_scoring(
    console: Console,
    args: Any,
    observations: list[dict[str, Any]],
    answers: int,
    runs: dict[int, Scoring],
    cores: str,
) -> None:
    table = Table(
        title=f"b. scoring {args.traces:,} traces ({answers:,} answers, {len(observations):,} "
        f"observations): first page to every answer's scores stored; {cores}"
    )
    table.add_column("members", justify="right", no_wrap=True)
    for column in (
        "time",
        "traces/s",
        "members' CPU per trace",
        "Redis CPU per trace",
        "scores stored twice",
    ):
        table.add_column(column, justify="right")
    for n, run in runs.items():
        table.add_row(
            "one daemon, no \\[fleet]" if n == 0 else str(n),
            f"{run.took_s:.1f} s",
            _n(answers / run.took_s),
            f"{1000 * run.cpu_s / answers:.2f} ms",
            "–" if n == 0 else f"{1000 * run.redis_cpu_s / answers:.2f} ms",
            str(run.duplicates),
        )
    console.print(table)


def print_memory(console: Console, args: Any, memory: Memory) -> None:
    from observer.config import FleetSettings, JudgeSettings, SourceSettings
    from observer.fleet.alerts import TRACE_ALERT_KEPT_S
    from observer.fleet.budget import DAY_S
    from observer.fleet.reader import MARKS_KEPT
    from observer.fleet.stream import DEAD_KEPT

    fleet, source, judge = FleetSettings(), SourceSettings(), JudgeSettings()
    rate = 1000.0
    marks_s = source.overlap_s + MARKS_KEPT.total_seconds()
    pending = max(1, fleet.stream_maxlen // 2)
    judged = judge.max_judged_per_hour * DAY_S / 3600
    raised = rate * args.alert_share * TRACE_ALERT_KEPT_S
    k = memory.kinds

    def each(kind: str) -> float:
        found = k[kind]
        return max(found.bytes_each, found.freed_each or 0.0)

    entry = each("pending entry") + each("in-flight root")
    rows = [
        (
            "seen mark",
            k["seen mark"],
            f"TTL source.overlap_s + MARKS_KEPT = {marks_s:,.0f} s "
            f"(measured {k['seen mark'].ttl_s or 0:,.0f} s)",
            f"{_n(rate * marks_s)} (1,000/s x {marks_s:,.0f} s)",
            rate * marks_s * each("seen mark"),
        ),
        (
            "pending entry (+ in-flight root)",
            k["pending entry"],
            f"acknowledged and deleted once delivered; the reader stops at "
            f"fleet.stream_maxlen / 2 = {pending:,} unacknowledged",
            f"at most {_n(pending)}",
            pending * entry,
        ),
        (
            "signal row",
            k["signal row"],
            f"XADD MAXLEN ~ fleet.stream_maxlen = {fleet.stream_maxlen:,} "
            f"({fleet.stream_maxlen / rate:,.0f} s of rows at 1,000/s)",
            f"~{_n(fleet.stream_maxlen)}",
            fleet.stream_maxlen * each("signal row"),
        ),
        (
            "judge claim",
            k["judge claim"],
            f"TTL DAY_S = {DAY_S / 3600:g} h once confirmed; one per judged answer, "
            f"judge.max_judged_per_hour = {judge.max_judged_per_hour}",
            f"at most {_n(judged)} ({judge.max_judged_per_hour}/h x {DAY_S / 3600:g} h)",
            judged * each("judge claim"),
        ),
        (
            "trace-rule claim",
            k["trace-rule claim"],
            f"TTL TRACE_ALERT_KEPT_S = {TRACE_ALERT_KEPT_S / 86400:g} d once confirmed; "
            f"one per trace a rule raises, over max_per_hour too",
            f"{_n(raised)} ({args.alert_share:.0%} of 1,000/s x {TRACE_ALERT_KEPT_S / 86400:g} d)",
            raised * each("trace-rule claim"),
        ),
        (
            "dead entry",
            k["pending entry"],
            f"XADD MAXLEN ~ DEAD_KEPT = {DEAD_KEPT:,}, whatever the rate",
            f"at most ~{_n(DEAD_KEPT)}",
            DEAD_KEPT * each("pending entry"),
        ),
    ]
    table = Table(
        title="c. Redis memory: MEMORY USAGE of keys the fleet wrote (per key or entry), "
        "what deleting them gave back, and what 1,000 traces/s keeps (defaults)"
    )
    for column, justify in (
        ("key", "left"),
        ("measured on", "right"),
        ("bytes", "right"),
        ("freed", "right"),
        ("bounded by", "left"),
        ("kept at 1,000 traces/s", "right"),
        ("memory", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for label, kind, bound, kept, total in rows:
        bytes_each = f"{kind.bytes_each:,.0f}"
        freed = f"{kind.freed_each:,.0f}" if kind.freed_each is not None else "–"
        if label.startswith("pending"):
            root = k["in-flight root"]
            bytes_each += f" + {root.bytes_each:,.0f}"
            freed += f" + {root.freed_each or 0:,.0f}"
        table.add_row(label, f"{kind.sampled:,}", bytes_each, freed, bound, kept, _mb(total))
    console.print(table)
    steady = sum(r[4] for r in rows[:4]) + rows[5][4]
    console.print(
        f"Bounded whatever the traffic's shape: {_mb(steady)} at 1,000 traces/s with every "
        f"bound reached (seen marks {_mb(rows[0][4])}); trace-rule claims add "
        f"{_mb(rows[4][4])} per {args.alert_share:.0%} of traces raised, and grow with the "
        "share of traces a rule raises, not with max_per_hour."
    )


def print_takeover(console: Console, args: Any, switches: list[float]) -> None:
    lease = args.lease_s
    table = Table(
        title=f"d. takeover: three members caught up, the reader SIGKILLed "
        f"(fleet.lease_s = {lease:g}, keeper every {lease / 3:g} s)"
    )
    table.add_column("kill")
    table.add_column("SIGKILL to the next reader's first page", justify="right")
    table.add_column("docs' bound: lease_s + lease_s / 3", justify="right")
    for i, took in enumerate(switches, 1):
        table.add_row(str(i), f"{took:.1f} s", f"{lease * 4 / 3:.1f} s")
    console.print(table)


if __name__ == "__main__":
    main()
