"""The demo's report: the pass, the signals of the answers read, and what to try next."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from observer.views.console import self_command
from observer.views.passes import pass_table
from observer.views.words import counted

if TYPE_CHECKING:
    from datetime import datetime

    from rich.console import RenderableType

    from observer.app import OnceResult, Parts


def demo_report(
    parts: Parts, outcome: OnceResult, written: int, out: str, state: str
) -> list[RenderableType]:
    """What the demo prints, in order; `written`: how many scores went to `out`."""
    from observer.views.summary import summary_table

    shown: list[RenderableType] = []
    if outcome.report is not None:
        extra = {}
        if not written:
            extra = {
                "scores file": "none: every trace is unchanged since the last run on "
                f"this state, which wrote its scores ({out} left as it was)"
            }
        shown.append(
            pass_table(
                "observer demo: bundled Langfuse traces",
                outcome.report,
                extra,
                out,
            )
        )
    records = parts.summary.records
    shown.append(
        summary_table(
            parts.summary,
            title=f"signals of the {counted(records, 'answer trace')} read",
        )
    )
    since = outcome.passed.start if outcome.passed is not None else None
    shown.append(next_steps(out, state, since))
    return shown


def next_steps(out: str, state: str, since: datetime | None = None) -> str:
    """Where to look next, with observer named as this process was started; a command a
    line, to be printed unwrapped (`soft_wrap`) so that a pipe gets each one whole.
    `since`: where the demo's history starts, for the backtest."""
    observer = self_command()
    commands = [
        ("the scores Langfuse would get:", f"head -3 {out}"),
        ("the alerts on the demo's history:", f"{observer} alerts status --state {state}"),
    ]
    if since is not None:
        commands.append(
            (
                "when they would have fired:",
                f"{observer} alerts backtest --state {state} "
                f"--from {since:%Y-%m-%d}T00:00:00Z --to {since + timedelta(days=1):%Y-%m-%d}"
                "T00:00:00Z --rule ungrounded_rate_high",
            )
        )
    commands.append(("score records of your own:", f"{observer} score FILE.jsonl --summary"))
    width = max(len(label) for label, _ in commands)
    return "\n".join(
        [
            "",
            "[bold]Next[/bold]",
            *(f"  {label:<{width}} {command}" for label, command in commands),
            "  then your own Langfuse:",
            "    export LANGFUSE_PUBLIC_KEY=pk-lf-... LANGFUSE_SECRET_KEY=sk-lf-...",
            "    export LANGFUSE_BASE_URL=https://cloud.langfuse.com",
            f"    {observer} check",
            f"    {observer} run --once",
            "  and in Langfuse, open a trace: the scores sit on its answer generation",
            "  (confidence, citation_coverage, crag_grade, ungrounded ...).",
        ]
    )
