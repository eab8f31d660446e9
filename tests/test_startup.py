"""Commands that do not talk to Langfuse do not load its client, openai or apscheduler."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.daemon_helpers import ROOT

PROBE = """
import sys
from observer.cli import main
try:
    main(sys.argv[1:], prog_name="observer")
except SystemExit:
    pass
print(",".join(sorted(m for m in ("langfuse", "openai", "apscheduler") if m in sys.modules)))
"""


@pytest.mark.parametrize(
    "args",
    [["--help"], ["score", str(ROOT / "examples" / "records.jsonl")], ["config", "show"]],
    ids=["help", "score", "config-show"],
)
def test_light_commands_load_no_client(args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBSERVER_", "LANGFUSE_"))}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == ""  # none of them was imported


def test_check_with_a_bad_configuration_exits_before_loading_the_client() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBSERVER_", "LANGFUSE_"))}
    env["LANGFUSE_BASE_URL"] = "localhost:3000"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "check"], capture_output=True, text=True, env=env, timeout=60
    )
    assert "langfuse.base_url (LANGFUSE_BASE_URL)" in done.stderr
    assert done.stdout.splitlines()[-1] == ""
