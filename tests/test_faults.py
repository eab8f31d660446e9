"""The state file's disk fills up while the daemon runs: it stops taking new traces, says
so in /readyz and the log, keeps what it has, and carries on once there is room again."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.app.test_shutdown import daemon_env
from tests.daemon_helpers import demo_counts, packed_traces
from tests.fakes.langfuse_server import FakeLangfuse
from tests.servers import free_port
from tests.waiting import wait_until


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MB filesystem of its own (a tmpfs; needs the right to mount, as root has)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def readyz(port: int) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def wait(what: str, check: Callable[[], bool]) -> None:
    """Until `check()` (a probe that fails counts as not yet); two minutes against a hang,
    as a busy machine takes its time over the daemon's start and its passes."""
    wait_until(check, what, timeout_s=120, interval_s=0.1, ignoring=(OSError, ValueError))


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    # Unbuffered: a buffered file keeps the part a failed flush could not write and
    # raises again when it closes, outside the suppress.
    with filler.open("wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65536)
    return filler


def test_a_full_disk_pauses_polling_and_readiness_until_there_is_room(
    small_disk: Path, tmp_path: Path
) -> None:
    with FakeLangfuse() as fake:
        now = datetime.now(UTC)
        first = packed_traces(now - timedelta(minutes=10), spacing_s=1)
        fake.add_observations(first)
        port = free_port()
        env = daemon_env(fake)
        env.update(OBSERVER_HTTP_PORT=str(port), OBSERVER_SOURCE__LOOKBACK_S="3600")
        # Longer than the fake's ingestion jitter: what lands late is still ahead of the
        # watermark (a settle of 0 leaves late data to the next sweep, a minute on).
        env["OBSERVER_SOURCE__SETTLE_S"] = "12"
        log = tmp_path / "daemon.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "observer", "run", "--state", str(small_disk / "s.sqlite")],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            try:
                wait("the first pass", lambda: readyz(port)[0] == 200)
            except AssertionError:
                raise AssertionError(f"{readyz(port)}\n{log.read_text()[-3000:]}") from None
            scored_before = {s["traceId"] for s in fake.scores}
            filler = fill(small_disk)
            later = packed_traces(
                datetime.now(UTC) - timedelta(seconds=30), 0.1, copies=3, tag="later"
            )
            fake.add_observations(later)
            wait("not ready", lambda: readyz(port)[0] == 503)
            _, body = readyz(port)
            assert "the state file cannot be written" in body["reasons"]  # type: ignore[operator]
            filler.unlink()  # room again
            wait("ready again", lambda: readyz(port)[0] == 200)
            later_ids = {o["traceId"] for o in later}
            wanted = demo_counts().scored * 3
            wait(
                "the new traces scored",
                lambda: len({s["traceId"] for s in fake.scores} & later_ids) == wanted,
            )
            assert scored_before <= {s["traceId"] for s in fake.scores}
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        text = log.read_text()
        assert proc.returncode == 0, text[-3000:]
        assert '"event": "state_unwritable"' in text and '"event": "state_writable_again"' in text
        assert fake.duplicates() == []
