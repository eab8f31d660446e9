"""First contact (observer/app/contact.py): the state file knows the Langfuse project it
was written for, takes it at its first run (an older observer's file too), follows the
project to another address, and refuses another project's keys: exit 2, both projects
named, and how to start afresh, before anything is read.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from observer.cli import main
from tests.daemon_helpers import DEMO_LOOKBACK_S, configure, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        server.add_observations(demo_observations())
        configure(monkeypatch, server, OBSERVER_SOURCE__LOOKBACK_S=DEMO_LOOKBACK_S)
        yield server


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def recorded(state: Path) -> dict[str, str] | None:
    with sqlite3.connect(state) as db:
        row = db.execute("SELECT value FROM meta WHERE key = 'note:langfuse_project'").fetchone()
    db.close()
    return json.loads(row[0]) if row else None


def words(text: str) -> str:
    """`text` with a table's borders and line breaks gone: one line of words."""
    return " ".join(text.replace("│", " ").split())


def test_the_state_file_takes_its_project_and_refuses_another(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    state = tmp_path / "s.sqlite"
    assert run("run", "--once", "--state", state).exit_code == 0
    first = {"id": "fake-project", "name": "fake project", "host": fake.url}
    assert recorded(state) == first

    fake.project_id, fake.project_name = "prj-other", "other team"
    read = fake.observation_requests()
    refusal = (
        f"state file {state} was written for Langfuse project 'fake project' (fake-project) "
        f"at {fake.url}, but the keys are for project 'other team' (prj-other) at {fake.url}. "
        "A state file serves one project: give this one its own (--state, state.path), or, "
        f"to start afresh, move {state} away (the next run then reads the last "
        f"{int(DEMO_LOOKBACK_S) // 86400}d, "
        "source.lookback_s)"
    )
    window = ("--from", "2026-11-27T00:00:00Z", "--to", "2026-11-29T00:00:00Z")
    for args in (
        ("run", "--once", "--state", state),
        ("run", "--once", "--dry-run", "-", "--state", state),  # the copy named as the file
        ("backfill", *window, "--state", state),
    ):
        result = run(*args)
        assert result.exit_code == 2, result.output
        assert result.stderr == f"observer: {refusal}\n"
    checked = run("check", "--state", state)
    assert checked.exit_code == 2
    said = words(checked.stdout)  # a table's cells fold long paths: their words, then
    assert "project REFUSED: state file" in said and "(prj-other)" in said
    assert "Langfuse project 'fake project' (fake-project)" in said
    assert fake.observation_requests() == read  # refused before anything was read
    assert recorded(state) == first  # and the file still says whose it is

    fresh = tmp_path / "other.sqlite"
    assert run("run", "--once", "--state", fresh).exit_code == 0  # its own file: fine
    assert recorded(fresh) == {"id": "prj-other", "name": "other team", "host": fake.url}


@pytest.mark.parametrize("release", ["0.1.0", "0.3.0"])
def test_an_older_observers_state_file_takes_its_project_at_the_first_run(
    fake: FakeLangfuse, tmp_path: Path, release: str
) -> None:
    state = tmp_path / "s.sqlite"
    shutil.copy(FIXTURES / f"observer-{release}.sqlite", state)
    assert recorded(state) is None
    result = run("run", "--once", "--state", state)
    assert result.exit_code == 0, result.output
    assert recorded(state) == {"id": "fake-project", "name": "fake project", "host": fake.url}


def test_the_same_project_at_another_address_is_the_same_state_file(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = tmp_path / "s.sqlite"
    assert run("run", "--once", "--state", state).exit_code == 0
    other_address = fake.url.replace("127.0.0.1", "localhost")
    monkeypatch.setenv("LANGFUSE_BASE_URL", other_address)
    assert run("run", "--once", "--state", state).exit_code == 0
    found = recorded(state)
    assert found is not None and found["host"] == other_address


def test_a_server_that_says_less_leaves_the_project_unchecked_or_reads_what_it_says(
    fake: FakeLangfuse, tmp_path: Path
) -> None:
    """Servers before the project's organization was added to the answer send none (the
    SDK's model wants one: observer reads the JSON itself); a proxy that does not pass
    the route on answers 404, and the project is then not checked, never refused."""
    fake.project_organization = False
    state = tmp_path / "s.sqlite"
    assert run("run", "--once", "--state", state).exit_code == 0
    assert recorded(state) == {"id": "fake-project", "name": "fake project", "host": fake.url}

    fake.fail_next(404, count=100, path_prefix="/api/public/projects")
    fake.project_id = "prj-other"  # not told: not refused
    elsewhere = tmp_path / "elsewhere.sqlite"
    assert run("run", "--once", "--state", elsewhere).exit_code == 0
    assert recorded(elsewhere) is None


def test_a_url_with_credentials_is_shown_without_them(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Langfuse behind a proxy's basic auth: the password reaches no output, no
    state file and no link."""
    with_password = fake.url.replace("http://", "http://proxyuser:hunter2@")
    monkeypatch.setenv("LANGFUSE_BASE_URL", with_password)
    state = tmp_path / "s.sqlite"
    outputs = [
        run("check", "--state", state),
        run("run", "--once", "--state", state),
        run("config", "show"),
        run("discover"),
    ]
    fake.stop()
    outputs.append(run("run", "--once", "--state", state))  # the error names the URL
    for result in outputs:
        assert "hunter2" not in result.output and "proxyuser" not in result.output
    assert fake.url in outputs[-1].stderr
    assert b"hunter2" not in b"".join(p.read_bytes() for p in tmp_path.glob("s.sqlite*"))
