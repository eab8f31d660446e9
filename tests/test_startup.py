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


LOADED = """
import sys
from observer.cli import main
try:
    main(sys.argv[1:], prog_name="observer")
except SystemExit:
    pass
print(",".join(sorted(m for m in sys.modules if m.startswith("observer."))))
"""
# What `observer score` may load: the configuration's reader and its signal sections, the
# record, the signals and what prints them (no alerting, state, judge or client).
SCORE_LOADS = (
    "observer.config.",
    "observer.signals",
    "observer.mapping",
    "observer.views",
    "observer.commands",  # the command line's families: click and light helpers at the top
)
SCORE_ALSO = {
    "observer.app",  # the package's lazy face only
    "observer.app.score_file",
    "observer.cli",
    "observer.config",
    "observer.errors",
    "observer.model",
    "observer.records",
    "observer.times",
    "observer.urls",
}


def test_score_loads_only_config_mapping_and_signals() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBSERVER_", "LANGFUSE_"))}
    env["OBSERVER_CRAG__HIGH"] = "0.7"  # the signal sections read, not only the defaults
    records = str(ROOT / "examples" / "records.jsonl")
    done = subprocess.run(
        [sys.executable, "-c", LOADED, "score", records],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    loaded = set(done.stdout.splitlines()[-1].split(","))
    others = {m for m in loaded - SCORE_ALSO if not m.startswith(SCORE_LOADS)}
    assert "observer.config.signals" in loaded and not others


def test_the_configuration_loads_no_alerting_state_or_judge_module() -> None:
    probe = (
        "import sys, observer.config.settings; "
        "print(','.join(m for m in sys.modules if m.startswith("
        "('observer.alerts', 'observer.state', 'observer.judge'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""
