"""A Console for the commands, and how to run observer again as this process was run."""

from __future__ import annotations

import io
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def closed_pipe_exit() -> None:
    """`observer ... | head` ends quietly with 0, the Unix convention for a reader that left."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's last flush cannot fail
    except (OSError, ValueError, io.UnsupportedOperation):
        pass
    raise SystemExit(0)


def console(**kwargs: Any) -> Console:
    """A rich Console that ends quietly on a closed pipe (rich itself exits 1 there)."""
    from rich.console import Console

    class QuietOnClosedPipe(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            closed_pipe_exit()

    return QuietOnClosedPipe(**kwargs)


def two_columns(title: str, rows: list[tuple[str, str]]) -> Table:
    """A key and its value a row, no header: the reports of check, a pass, fleet status."""
    from rich.table import Table

    table = Table(title=title, show_header=False)
    table.add_column("")
    table.add_column("", overflow="fold")
    for key, value in rows:
        table.add_row(key, value)
    return table


def self_command() -> str:
    """How to run observer again, as this process was run: `observer` when that is on
    PATH, else the path it was started by (`.venv/bin/observer` from the checkout)."""
    started = Path(sys.argv[0])
    if started.name == "__main__.py" and started.parent.name == "observer":
        return f"{shown_path(Path(sys.executable))} -m observer"
    if started.name != "observer":  # called from another program (a test runner, a script)
        started = Path(sys.executable).parent / "observer"
        if not started.exists():
            return "observer"
    on_path = shutil.which(started.name)
    if on_path and Path(on_path).resolve() == started.resolve():
        return started.name
    return shown_path(started)


def shown_path(path: Path) -> str:
    """`path` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
