"""deploy/Dockerfile: clean under hadolint, and the image's commands work.

No image can be built here (no registry for the base image), so the image's
contract is read from the Dockerfile and its commands run as subprocesses from
the virtualenv: the entrypoint, the HEALTHCHECK against a small local server,
and the daemon itself with the image's environment, probed by that HEALTHCHECK
and stopped with the image's STOPSIGNAL.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from observer.config import load_settings
from tests.daemon_helpers import demo_observations
from tests.deploy.support import DEPLOY, ROOT, daemon_env, run, tool
from tests.fakes.langfuse_server import FakeLangfuse
from tests.servers import free_port

DOCKERFILE = DEPLOY / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1]) for text in logical]


def last(name: str) -> str:
    found = [args for instruction, args in instructions() if instruction == name]
    assert found, f"no {name} in {DOCKERFILE}"
    return found[-1]


def runtime_env() -> dict[str, str]:
    """The ENV of the final stage (KEY=value pairs; values here hold no spaces)."""
    stages = [i for i, (name, _) in enumerate(instructions()) if name == "FROM"]
    env: dict[str, str] = {}
    for name, args in instructions()[stages[-1] :]:
        if name == "ENV":
            for pair in args.split():
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def healthcheck_command() -> list[str]:
    args = last("HEALTHCHECK")
    command: list[str] = json.loads(args.split("CMD", 1)[1])
    return command


def venv_command(command: list[str]) -> list[str]:
    """The image's command with its programs taken from this virtualenv."""
    program = sys.executable if command[0] == "python" else tool(command[0])
    return [program, *command[1:]]


# -- lint and contract ------------------------------------------------------------------------


def test_hadolint_finds_nothing() -> None:
    done = run([tool("hadolint"), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == ""


def test_two_stages_wheels_gathered_then_installed_offline() -> None:
    froms = [args for name, args in instructions() if name == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS build") and froms[1].endswith(" AS runtime")
    image = next(args for name, args in instructions() if name == "ARG")
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11-slim\S*", image)
    runs = [args for name, args in instructions() if name == "RUN"]
    assert any("pip wheel" in r and "--wheel-dir /wheels" in r for r in runs)
    assert any("--no-index" in r and "/wheels/observer-" in r for r in runs)


def test_runs_as_a_fixed_non_root_user() -> None:
    user = last("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) >= 1000 and gid.isdigit(), user
    # The Kubernetes manifests run as the same uid (runAsUser) and let it write the volume.
    for name in ("observer-sidecar.yaml", "observer-deployment.yaml"):
        manifest = (DEPLOY / "kubernetes" / name).read_text()
        assert f"runAsUser: {uid}" in manifest and f"fsGroup: {gid}" in manifest, name


def test_state_on_a_volume_port_exposed_entrypoint_observer_run() -> None:
    env = runtime_env()
    assert env["OBSERVER_HTTP_HOST"] == "0.0.0.0"
    port = env["OBSERVER_HTTP_PORT"]
    assert port == "9464" and last("EXPOSE") == port
    volume = json.loads(last("VOLUME"))
    assert volume == ["/var/lib/observer"]
    assert Path(env["OBSERVER_STATE__PATH"]).parent == Path(volume[0])
    assert json.loads(last("ENTRYPOINT")) == ["observer"]
    assert json.loads(last("CMD")) == ["run"]
    assert last("STOPSIGNAL") == "SIGTERM"
    assert "/healthz" in " ".join(healthcheck_command())


def test_the_environment_the_image_sets_is_valid_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in runtime_env().items():
        monkeypatch.setenv(key, value)
    settings = load_settings()  # the defaults, then the environment
    assert settings.http.host == "0.0.0.0" and settings.http.port == 9464
    assert settings.state.path == "/var/lib/observer/observer.sqlite"


def test_the_build_context_is_the_release_wheel_only() -> None:
    kept = [
        line
        for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert kept == ["*", "!dist/*.whl"]
    copied = [args for name, args in instructions() if name == "COPY" and "--from" not in args]
    assert copied == ["dist/ ./"]
    runs = " ".join(args for name, args in instructions() if name == "RUN")
    assert "observer-${VERSION}-py3-none-any.whl" in runs


def test_the_image_is_labelled_with_the_wheels_version_and_every_file_names_it() -> None:
    """One version, pyproject's: the build arg names the wheel and the label; the files that
    build or run the image name that version (a test keeps them in step with pyproject)."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    labels = last("LABEL")
    assert 'org.opencontainers.image.version="${VERSION}"' in labels
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in labels
    pinned = re.compile(r"observer[:-](\d+\.\d+\.\d+)")
    files = [
        DOCKERFILE,
        DEPLOY / "README.md",
        DEPLOY / "docker-compose.yml",
        DEPLOY / "docker-compose.fleet.yml",
        *sorted((DEPLOY / "kubernetes").glob("*.yaml")),
        ROOT / "docs" / "licenses.md",
    ]
    for path in files:
        for found in pinned.findall(path.read_text()):
            assert found == version, f"{path.name} names observer {found}, pyproject {version}"
    for compose in ("docker-compose.yml", "docker-compose.fleet.yml"):
        assert f'VERSION: "{version}"' in (DEPLOY / compose).read_text(), compose


# -- the commands, run --------------------------------------------------------------------------


def test_the_entrypoint_runs() -> None:
    entrypoint = json.loads(last("ENTRYPOINT")) + json.loads(last("CMD"))
    for extra in (["--help"], ["--version"]):
        done = run(venv_command([*entrypoint[:1], *extra]))
        assert done.returncode == 0, done.stderr
    done = run(venv_command([*entrypoint, "--help"]))
    assert done.returncode == 0, done.stderr
    assert "Run the daemon" in done.stdout


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        code = self.status if self.path == "/healthz" else 404
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[tuple[int, type[_Health]]]:
    handler = type("Handler", (_Health,), {"status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()


def healthcheck(port: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OBSERVER_HTTP_PORT": str(port)}
    return run(venv_command(healthcheck_command()), env=env)


def test_healthcheck_passes_on_200_and_fails_on_503_or_nothing_listening(
    health_server: tuple[int, type[_Health]],
) -> None:
    port, handler = health_server
    assert healthcheck(port).returncode == 0
    handler.status = 503
    done = healthcheck(port)
    assert done.returncode != 0 and "503" in done.stderr
    assert healthcheck(free_port()).returncode != 0


def test_the_image_command_serves_healthz_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """`observer run` with the image's environment: healthy by its HEALTHCHECK, exit 0 on SIGTERM.

    Two changes from the image: the port binds 127.0.0.1 (a test opens no port to the
    network) and the state file sits in a temporary directory instead of the volume.
    """
    port = free_port()
    with FakeLangfuse() as fake:
        fake.add_observations(demo_observations())
        # The image's environment, then the test's own: loopback, a temporary state file.
        env = {**daemon_env(fake, port, tmp_path / "observer.sqlite"), **runtime_env()}
        env.update(
            OBSERVER_HTTP_HOST="127.0.0.1",
            OBSERVER_HTTP_PORT=str(port),
            OBSERVER_STATE__PATH=str(tmp_path / "observer.sqlite"),
        )
        command = venv_command(json.loads(last("ENTRYPOINT")) + json.loads(last("CMD")))
        proc = subprocess.Popen(
            command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            deadline = time.monotonic() + 120  # against a hang: a busy machine starts slowly
            while healthcheck(port).returncode != 0:
                assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
                assert time.monotonic() < deadline, "the HEALTHCHECK never passed"
                time.sleep(0.2)
            proc.send_signal(getattr(signal, last("STOPSIGNAL")))
            _, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert (tmp_path / "observer.sqlite").exists()
