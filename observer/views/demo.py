"""The demo's report: the pass, the signals of the answers read, and what to try next."""

from __future__ import annotations

from typing import TYPE_CHECKING

from observer.views.console import self_command
from observer.views.passes import pass_table

if TYPE_CHECKING:
    from rich.console import RenderableType

    from observer.app import OnceResult, Parts


def demo_report(
    parts: Parts, outcome: OnceResult, written: int, out: str, state: str
) -> list[RenderableType]:
    """What the demo prints, in order; `written`: how many scores went to `out`."""
    from observer.views.summary import summary_table

    shown: list[RenderableType] = []
    if outcome.passed is not None:
        if written:
            extra = {"scores written to": f"{out} ({written:,} scores)"}
        else:
            extra = {
                "scores written": "none: every trace is unchanged since the last run on "
                f"this state, which wrote its scores ({out} left as it was)"
            }
        shown.append(
            pass_table(
                "observer demo: bundled Langfuse traces",
                outcome.passed,
                parts,
                extra,
                outcome.waiting,
            )
        )
    shown.append(
        summary_table(
            parts.summary, title=f"signals of the {parts.summary.records} answer traces read"
        )
    )
    shown.append(next_steps(out, state))
    return shown


def next_steps(out: str, state: str) -> str:
    """Where to look next, with observer named as this process was started."""
    observer = self_command()
    return "\n".join(
        [
            "",
            "[bold]Next[/bold]",
            f"  the scores Langfuse would get:  head -3 {out}",
            f"  the alerts on the demo's history: {observer} alerts status --state {state}",
            f"  score records of your own:      {observer} score FILE.jsonl --summary",
            "  then your own Langfuse:",
            "    export LANGFUSE_PUBLIC_KEY=pk-lf-... LANGFUSE_SECRET_KEY=sk-lf-...",
            "    export LANGFUSE_BASE_URL=https://cloud.langfuse.com",
            f"    {observer} check",
            f"    {observer} run --once",
            "  and in Langfuse, open a trace: the scores sit on its answer generation",
            "  (confidence, citation_coverage, crag_grade, ungrounded ...).",
        ]
    )
