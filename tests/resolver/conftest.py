"""A throwaway PostgreSQL cluster on 127.0.0.1 for the resolver's postgres adapter.

``initdb`` (Debian keeps it in /usr/lib/postgresql/*/bin: ``require_binary``
finds it there) makes a cluster in a fresh temporary directory with trust
authentication; ``pg_ctl`` starts it on a free port of 127.0.0.1 with its
socket in that directory, and stops it (``-m fast``) afterwards. The server
refuses to run as root, so as root everything runs as the ``postgres`` user.
Skipped when PostgreSQL is not installed, failed when
``OBSERVER_REQUIRE_SERVERS=1``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.servers import free_port, require_binary


@dataclass
class PostgresCluster:
    initdb: str
    pg_ctl: str
    datadir: Path
    port: int
    user: str  # the OS user the server runs as; also the database superuser

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        extra: dict[str, Any] = {}
        if os.geteuid() == 0:
            extra = {"user": self.user, "group": pwd.getpwnam(self.user).pw_gid}
        return subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=self.datadir,
            env={**os.environ, "LC_ALL": "C"},
            **extra,
        )

    def create(self) -> None:
        done = self._run(
            self.initdb,
            "-D",
            str(self.datadir / "data"),
            "-A",
            "trust",
            "-E",
            "UTF8",
            "-U",
            self.user,
            "--no-sync",
        )
        if done.returncode:
            raise RuntimeError(f"initdb failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1 -c fsync=off"
        done = self._run(
            self.pg_ctl,
            "start",
            "-w",
            "-t",
            "30",
            "-D",
            str(self.datadir / "data"),
            "-l",
            str(self.datadir / "server.log"),
            "-o",
            options,
        )
        if done.returncode:
            log = (self.datadir / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl start failed:\n{done.stdout}\n{done.stderr}\n{log}")

    def stop(self) -> None:
        self._run(self.pg_ctl, "stop", "-w", "-m", "fast", "-D", str(self.datadir / "data"))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """A running cluster for the whole session; its superuser's DSN is `.dsn`."""
    initdb = require_binary("initdb")
    pg_ctl = require_binary("pg_ctl")
    user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    datadir = Path(tempfile.mkdtemp(prefix="observer-pg-"))  # not under pytest's 0700 root dir
    if os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        os.chown(datadir, entry.pw_uid, entry.pw_gid)
    cluster = PostgresCluster(initdb, pg_ctl, datadir, free_port(), user)
    try:
        cluster.create()
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(datadir, ignore_errors=True)
