"""Fleet members as real `observer run` processes, for the end-to-end tests: started,
SIGKILLed and restarted on their state files, their logs read."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import redis

from tests.daemon_helpers import ROOT


def wait_for(
    what: str,
    condition: Callable[[], object],
    timeout_s: float = 60.0,
    explain: Callable[[], str] | None = None,
) -> None:
    """Wait until `condition()` is true (a deadline against a hang, not a speed check);
    when it is not, the failure says `explain()` (what the fleet was doing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        time.sleep(0.05)
    said = ""
    if explain is not None:
        try:
            said = "\n" + explain()
        except Exception as error:  # the explanation must never hide the failure
            said = f"\n(could not explain: {error!r})"
    raise AssertionError(f"not within {timeout_s:g} s: {what}{said}")


def redis_state(client: redis.Redis, fleet: str) -> str:
    """What a fleet `fleet` holds in Redis, for a failure to explain itself: the stream and
    its group, each pending entry (consumer, idle, deliveries), the consumers, `inflight`,
    the lease, the watermark, the epoch, the dead stream, the members' figures."""
    stream, lines = f"{{{fleet}}}:traces", []

    def say(what: str, read: Callable[[], object]) -> None:
        try:
            lines.append(f"{what}: {read()!r}")
        except redis.RedisError as error:
            lines.append(f"{what}: {error!r}")

    say("stream length", lambda: client.xlen(stream))
    say("groups", lambda: client.xinfo_groups(stream))
    say("consumers", lambda: client.xinfo_consumers(stream, "workers"))
    say("pending", lambda: client.xpending_range(stream, "workers", "-", "+", 50))
    say("inflight", lambda: client.zrange(f"{{{fleet}}}:inflight", 0, 50, withscores=True))
    say("dead", lambda: client.xlen(f"{{{fleet}}}:dead"))
    for key in ("lease", "watermark", "epoch"):
        say(key, lambda k=key: (client.get(f"{{{fleet}}}:{k}"), client.pttl(f"{{{fleet}}}:{k}")))
    say("members", lambda: client.zrange(f"{{{fleet}}}:members", 0, -1, withscores=True))
    for key in sorted(client.scan_iter(f"{{{fleet}}}:member:*")):
        say(key.decode(), lambda k=key: client.hgetall(k))
    return "Redis:\n  " + "\n  ".join(lines)


class Fleet:
    def __init__(self, workdir: Path, env: dict[str, str], config: str) -> None:
        self.workdir = workdir
        self.env = env
        self.config = workdir / "observer.toml"
        self.config.write_text(config)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.started_all: list[subprocess.Popen[bytes]] = []  # to stop whatever happens

    def start(self, name: str) -> None:
        old = self.processes.get(name)
        assert old is None or old.poll() is not None, f"{name} is running already"
        log = (self.workdir / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "observer",
                "run",
                "--config",
                str(self.config),
                "--state",
                str(self.workdir / f"{name}.sqlite"),
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )
        self.started_all.append(self.processes[name])

    def name_of(self, pid: int) -> str:
        return next(n for n, p in self.processes.items() if p.pid == pid)

    def kill(self, name: str) -> None:
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def stop_all(self) -> dict[str, int]:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        return {n: p.wait(30) for n, p in self.processes.items()}

    def started(self, name: str) -> int:
        """How many times the member's log says it started."""
        return self.logged(name, "observer_started")

    def logged(self, name: str, event: str) -> int:
        """How many times the member's log has `event`."""
        return (self.workdir / f"{name}.log").read_text().count(f'"{event}"')

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-tail:]}" for p in sorted(self.workdir.glob("*.log"))
        )

    def wait(self, what: str, condition: Callable[[], object], timeout_s: float = 60.0) -> None:
        """`wait_for`, a failure explained by what the members logged and Redis holds."""
        wait_for(what, condition, timeout_s, explain=self.explain)

    def explain(self) -> str:
        """Why a wait failed: each member's exit code, what each logged beyond the
        routine, and what the fleet holds in Redis."""
        codes = {n: p.poll() for n, p in self.processes.items()}
        parts = [f"members (None: running): {codes}"]
        for path in sorted(self.workdir.glob("*.log")):
            lines = path.read_text().splitlines()
            told = [line for line in lines if '"level": "info"' not in line]
            parts.append(f"--- {path.name}: {len(lines)} lines; beyond info, the last 40:")
            parts.extend(line[:400] for line in told[-40:])  # a traceback's head is enough
            parts.append(f"--- {path.name}: the last 15 lines:")
            parts.extend(line[:400] for line in lines[-15:])
        fleet = tomllib.loads(self.config.read_text())["fleet"]
        client = redis.Redis.from_url(self.env[fleet["secret_env"]], socket_timeout=2)
        with client:
            parts.append(redis_state(client, fleet["name"]))
        return "\n".join(parts)
