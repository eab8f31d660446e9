"""Fleet members as real `observer run` processes, for the end-to-end tests: started,
SIGKILLed and restarted on their state files, their logs read."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

from tests.daemon_helpers import ROOT


def wait_for(what: str, condition: Callable[[], object], timeout_s: float = 60.0) -> None:
    """Wait until `condition()` is true (a deadline against a hang, not a speed check)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s:g} s: {what}")


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

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.workdir.glob("*.log"))
        )
