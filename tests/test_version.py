"""One version, from pyproject: what `observer --version` says, what /metrics says, what
every request observer makes says it is (Langfuse, the judge's endpoint, a notifier)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import observer
from observer import app
from observer.alerts.notifiers.webhook import WebhookNotifier
from observer.cli import main
from observer.telemetry.metrics import Metrics
from tests.alerts.notifiers.samples import firing
from tests.daemon_helpers import after, configure, demo_observations
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.openai_stub import OpenAIStub
from tests.fakes.receiver import Receiver

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_version_is_pyprojects() -> None:
    assert observer.__version__ == VERSION
    shown = CliRunner().invoke(main, ["--version"])
    assert shown.output == f"observer, version {VERSION}\n"


def test_metrics_carry_the_version() -> None:
    assert Metrics().value("observer_build_info", version=VERSION) == 1.0


def test_every_request_says_it_is_observer_at_this_version(
    monkeypatch: pytest.MonkeyPatch, judge_stub: OpenAIStub, tmp_path: Path
) -> None:
    agent = f"observer/{VERSION}"
    with FakeLangfuse() as fake:
        fake.add_observations(demo_observations())
        settings = configure(monkeypatch, fake, OBSERVER_JUDGE__ENABLED="true")
        with app.build(settings, state_path=tmp_path / "s.sqlite") as parts:
            app.run_once(parts, after(demo_observations()))
        paths = {r.path for r in fake.requests}
        assert {"/api/public/v2/observations", "/api/public/scores"} <= paths
        assert {r.headers.get("user-agent") for r in fake.requests} == {agent}
    assert judge_stub.request_headers
    assert {h.get("user-agent") for h in judge_stub.request_headers} == {agent}
    with Receiver() as receiver:
        notifier = WebhookNotifier("hook", receiver.url)
        notifier.send(firing())
        (request,) = receiver.wait_for(1)
        assert request.headers["user-agent"] == agent


def test_the_changelog_opens_with_this_version_and_says_how_to_upgrade_to_each() -> None:
    import re

    from packaging.version import Version

    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.M)
    assert releases[0] == VERSION
    assert [Version(v) for v in releases] == sorted(map(Version, releases), reverse=True)
    assert releases[-1] == "0.1.0"  # every release since the first
    bodies = re.split(r"^## \[\d+\.\d+\.\d+\].*$", text, flags=re.M)[1:]
    for version, body in zip(releases[:-1], bodies[:-1], strict=True):
        assert "### Upgrading" in body, f"{version} says nothing about upgrading to it"
    for version, body in zip(releases, bodies, strict=True):
        if "**Breaking**" in body:
            assert "### Upgrading" in body, version
