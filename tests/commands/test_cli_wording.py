"""What the commands say: a count's noun in the singular for one (`1 trace rule`,
`1 document`), and `observer --help` a whole line for each command, never cut with `...`."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from observer import app
from observer.cli import main
from observer.state import State
from observer.views.words import counted


def groups() -> list[tuple[list[str], click.Group]]:
    found: list[tuple[list[str], click.Group]] = [([], main)]
    for name, command in sorted(main.commands.items()):
        if isinstance(command, click.Group):
            found.append(([name], command))
    return found


@pytest.mark.parametrize(
    ("path", "group"), groups(), ids=[" ".join(path) or "observer" for path, _ in groups()]
)
def test_help_gives_each_command_a_whole_line(
    path: list[str], group: click.Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    listed = result.stdout.split("\nCommands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed] == sorted(group.commands)  # one line each
    for line in listed:
        assert not line.endswith("..."), line
        assert len(line) <= 80, line
        assert re.fullmatch(r"  \S+\s+\S.*", line), line


@pytest.mark.parametrize(
    ("count", "noun", "plural", "said"),
    [
        (0, "trace", None, "0 traces"),
        (1, "trace", None, "1 trace"),
        (2, "trace rule", None, "2 trace rules"),
        (1_200, "copy", "copies", "1,200 copies"),
        (1, "copy", "copies", "1 copy"),
        (3.0, "page", None, "3 pages"),
    ],
)
def test_counted(count: float, noun: str, plural: str | None, said: str) -> None:
    assert counted(count, noun, plural) == said


def test_alerts_status_counts_one_trace_rule(tmp_path: Path) -> None:
    """The default configuration: fourteen window rules, the release regression and one
    trace rule."""
    State(tmp_path / "s.sqlite").close()
    result = CliRunner().invoke(main, ["alerts", "status", "--state", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    assert (
        "14 window rules, 1 release regression rule, 1 trace rule; windows end at the "
        "watermark (none)" in result.stdout
    )


def test_explain_counts_one_document(tmp_path: Path) -> None:
    """The demo's Chinese refusal retrieved one source."""
    trace_id = hashlib.sha256(b"demo-refusal-zh").hexdigest()[:32]
    args = ["explain", trace_id, "--file", str(app.demo_traces_path())]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "output: 1 document\n" in result.stdout
    assert "1 documents" not in result.stdout
