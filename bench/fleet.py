"""A fleet's throughput and failover: `python bench/fleet.py` prints two tables.

A real redis-server on loopback, the fake Langfuse in its own process (real HTTP,
service-like pages), N traces (the demo's, cloned). For one daemon without
[fleet] and for 1, 2 and 3 members (`observer run` subprocesses with [fleet],
fresh state files, a fresh Redis database): the time from the first page read
to every answer trace's scores stored in the fake, traces/s, and the CPU the
processes used per trace from then (user + system, from /proc; Redis' own CPU
apart). Then, with three members idle
and caught up, the reader is SIGKILLed: the time until the next reader's first
observation request (the lease's time to live, `fleet.lease_s`, plus up to a
third of it for the keeper's round).

Everything shares this machine's cores: members, the fake and Redis compete, so
past the core count more members do not add throughput here.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pipeline import make_traces  # noqa: E402
from tests.servers import RedisServer, free_port  # noqa: E402

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
    from observer.mapping.convention import Skip, map_trace

    rules = Settings().mapping_rules()
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in observations:
        by_trace.setdefault(observation["traceId"], []).append(observation)
    return sum(not isinstance(map_trace(t, o, rules), Skip) for t, o in by_trace.items())


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


def _wait(condition: Any, timeout_s: float, what: str, every_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: not within {timeout_s:g} s: {what}")
        time.sleep(every_s)


def throughput(
    members: int,
    workdir: Path,
    env: dict[str, str],
    conn: Connection,
    client: redis.Redis,
    answers: int,
    server: RedisServer,
) -> tuple[float, float, float, int]:
    """(seconds, members' CPU seconds, Redis CPU seconds, duplicates) to score every answer."""
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
    conn.send("duplicates")
    return took, cpu, redis_cpu, int(conn.recv())


def failover(
    workdir: Path, env: dict[str, str], conn: Connection, client: redis.Redis, answers: int
) -> float:
    """Seconds from the reader's SIGKILL to the next reader's first observation request."""
    client.flushall()
    processes = _start(3, workdir, env, "failover")
    try:

        def caught_up() -> bool:
            conn.send("scored")
            return bool(conn.recv() >= answers) and client.zcard("{bench}:inflight") == 0

        _wait(caught_up, 300, "caught up", every_s=0.1)
        holder = client.get("{bench}:reader")
        assert holder is not None
        member = holder.decode().rsplit(":", 1)[0]
        pid = int(client.hget(f"{{bench}}:member:{member}", "pid") or 0)
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        found: list[float] = []

        def next_page() -> bool:
            conn.send(("first_page_after", killed_at + 0.001))
            at = conn.recv()
            value = client.get("{bench}:reader")
            if at is not None and value is not None and value != holder:
                found.append(at)
                return True
            return False

        _wait(next_page, 120, "the next reader's first page")
        return found[0] - killed_at
    finally:
        _stop(processes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=3000)
    parser.add_argument("--lease-s", type=float, default=15.0)
    args = parser.parse_args()
    from datetime import UTC, datetime, timedelta

    observations = make_traces(args.traces, datetime.now(UTC) - timedelta(minutes=5))
    answers = _answers(observations)
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        (workdir / "observer.toml").write_text(
            CONFIG.format(lease_s=args.lease_s, claim_idle_s=max(60.0, args.lease_s))
        )
        (workdir / "single.toml").write_text(CONFIG.split("[fleet]")[0])
        server = RedisServer("redis-server", workdir, free_port())
        server.start()
        client = redis.Redis.from_url(server.url)
        try:
            runs = {}
            for n in (0, 1, 2, 3):  # a fresh fake (a project without scores) for each
                with _fake(observations, server) as (env, parent):
                    runs[n] = throughput(n, workdir, env, parent, client, answers, server)
            with _fake(observations, server) as (env, parent):
                switch_s = failover(workdir, env, parent, client, answers)
        finally:
            server.stop()
    table = Table(
        title=f"a fleet over {args.traces:,} traces ({len(observations):,} observations), "
        f"fake Langfuse and redis-server on loopback, {os.cpu_count()} cores"
    )
    for column in (
        "members",
        "time",
        "traces/s",
        "members' CPU per trace",
        "Redis CPU per trace",
        "duplicates",
    ):
        table.add_column(column, justify="right")
    for n, (took, cpu, redis_cpu, duplicates) in runs.items():
        table.add_row(
            "one daemon, no [fleet]" if n == 0 else str(n),
            f"{took:.1f} s",
            f"{answers / took:,.0f}",
            f"{1000 * cpu / answers:.2f} ms",
            f"{1000 * redis_cpu / answers:.2f} ms",
            str(duplicates),
        )
    Console(width=120).print(table)
    failover_table = Table(title=f"reader SIGKILLed (fleet.lease_s = {args.lease_s:g})")
    failover_table.add_column("measure")
    failover_table.add_column("value", justify="right")
    failover_table.add_row("SIGKILL to the next reader's first page", f"{switch_s:.1f} s")
    Console(width=120).print(failover_table)


if __name__ == "__main__":
    main()
