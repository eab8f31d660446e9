"""`observer check` passes exactly when `run` starts, and refuses with `run`'s words.

Each case sets up one thing `run` needs and gets wrong (a notifier's secret, the fleet's
Redis URL, the keys, the state file), then runs `check` and the `run` that would meet it
(`run --once`; the daemon for the fleet, which only the daemon joins): the same exit code,
and `check`'s row holds `run`'s message. With nothing wrong, both pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from observer.cli import main
from tests.daemon_helpers import configure, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.old_redis import OldRedis
from tests.servers import free_port


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        server.add_observations(demo_observations())
        configure(monkeypatch, server, COLUMNS="1000")  # check's table: one line a row
        yield server


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    path = tmp_path / "observer.toml"
    path.write_text(text)
    monkeypatch.setenv("OBSERVER_CONFIG", str(path))


def nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse) -> None:
    pass


def notifier_secret_unset(tmp_path: Path, mp: pytest.MonkeyPatch, fake: FakeLangfuse) -> None:
    config(
        tmp_path,
        mp,
        '[[alerts.notifiers]]\nname = "pd"\nkind = "pagerduty"\nsecret_env = "PD_KEY"\n',
    )


def fleet_variable_unset(tmp_path: Path, mp: pytest.MonkeyPatch, fake: FakeLangfuse) -> None:
    config(tmp_path, mp, '[fleet]\nsecret_env = "FLEET_REDIS"\n')


def fleet_unreachable(tmp_path: Path, mp: pytest.MonkeyPatch, fake: FakeLangfuse) -> None:
    config(tmp_path, mp, '[fleet]\nsecret_env = "FLEET_REDIS"\n')
    mp.setenv("FLEET_REDIS", f"redis://:hunter2@127.0.0.1:{free_port()}/0")


def fleet_redis_too_old(tmp_path: Path, mp: pytest.MonkeyPatch, fake: FakeLangfuse) -> None:
    config(tmp_path, mp, '[fleet]\nsecret_env = "OLD_REDIS"\n')  # tests.fakes.old_redis


def keys_swapped(tmp_path: Path, mp: pytest.MonkeyPatch, fake: FakeLangfuse) -> None:
    mp.setenv("LANGFUSE_PUBLIC_KEY", fake.secret_key)
    mp.setenv("LANGFUSE_SECRET_KEY", fake.public_key)


def state_of_another_project(tmp_path: Path, mp: pytest.MonkeyPatch, fake: FakeLangfuse) -> None:
    assert run("run", "--once", "--state", str(tmp_path / "s.sqlite")).exit_code == 0
    fake.project_id = "prj-other"


def state_not_a_database(tmp_path: Path, mp: pytest.MonkeyPatch, fake: FakeLangfuse) -> None:
    (tmp_path / "s.sqlite").write_bytes(b"not a database" * 100)


@pytest.fixture(scope="module")
def old_redis() -> Iterator[OldRedis]:
    with OldRedis() as server:
        yield server


Setup = Callable[[Path, pytest.MonkeyPatch, FakeLangfuse], None]
CASES: list[tuple[Setup, str, int]] = [
    (nothing, "run --once", 0),
    (notifier_secret_unset, "run --once", 2),
    (fleet_variable_unset, "run", 2),
    (fleet_unreachable, "run", 3),
    (fleet_redis_too_old, "run", 2),
    (keys_swapped, "run --once", 2),
    (state_of_another_project, "run --once", 2),
    (state_not_a_database, "run --once", 2),
]


@pytest.mark.parametrize(("setup", "runs", "code"), CASES, ids=[c[0].__name__ for c in CASES])
def test_check_fails_exactly_where_run_refuses_and_with_its_words(
    fake: FakeLangfuse,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    setup: Setup,
    runs: str,
    code: int,
    old_redis: OldRedis,
) -> None:
    monkeypatch.setenv("OLD_REDIS", f"redis://:hunter2@127.0.0.1:{old_redis.port}/0")
    setup(tmp_path, monkeypatch, fake)
    state = ("--state", str(tmp_path / "s.sqlite"))
    checked = run("check", *state)
    assert checked.exit_code == code, checked.output
    if code == 0:
        assert run("run", "--once", *state).exit_code == 0
        return
    ran = run(*runs.split(), *state)
    assert ran.exit_code == code, ran.output
    refused = ran.stderr.strip().splitlines()[-1].removeprefix("observer: ")
    said = checked.stdout + checked.stderr
    assert refused in said  # run's words, in check's row (or its line, for the config)
    assert "hunter2" not in said + ran.output
    assert fake.secret_key not in said + ran.output  # swapped: the secret is in no row


def test_check_shows_the_public_key_by_its_shape_and_the_judges_endpoint(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, judge_stub: object
) -> None:
    fake.public_key = "pk-lf-0123456789abcdef"
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", fake.public_key)
    monkeypatch.setenv("OBSERVER_JUDGE__ENABLED", "true")
    checked = run("check")
    assert checked.exit_code == 0, checked.output
    rows = {
        cells[1].strip(): cells[2].strip()
        for line in checked.stdout.splitlines()
        if len(cells := line.split("│")) == 4
    }
    assert rows["public key"] == "pk-lf-…cdef"
    assert "0123456789ab" not in checked.stdout
    # The stub serves no /models: reachable all the same (it answered).
    assert rows["judge"].endswith("/v1: reachable (model stub-judge; it lists no models: 404)")
