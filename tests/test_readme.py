"""The README's Quickstart stays true: two commands, the second is what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quickstart() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_exactly_two_commands_demo_then_tests() -> None:
    demo, tests = quickstart()
    assert demo.endswith("observer demo")
    assert "pytest" in tests and "mypy --strict observer" in tests and "ruff check" in tests


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert quickstart()[1] in ci
