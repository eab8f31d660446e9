"""deploy/README.md names every file of deploy/, and its links resolve."""

from __future__ import annotations

import re

from tests.deploy.support import DEPLOY, ROOT

README = DEPLOY / "README.md"
LINK = re.compile(r"\]\(([^()\s]+)\)")


def test_every_relative_link_resolves() -> None:
    for target in LINK.findall(README.read_text()):
        if target.startswith(("http://", "https://", "#")):
            continue
        path = (DEPLOY / target.split("#")[0]).resolve()
        assert path.exists() and path.is_relative_to(ROOT), target


def test_every_deploy_file_is_described() -> None:
    text = README.read_text()
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file() and path != README:
            relative = path.relative_to(DEPLOY).as_posix()
            named = f"({relative})" in text or (
                path.name.endswith("_test.yml") and "prometheus/*_test.yml" in text
            )
            assert named, f"deploy/README.md does not describe {relative}"
