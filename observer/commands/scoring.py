"""The commands over records: `score`, and the judge's (`judge FILE`, `agreement`, `canary`)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from observer.commands.common import (
    config_option,
    quiet_logging,
    settings_of,
    stderr_line,
)
from observer.times import parse_duration
from observer.urls import without_credentials
from observer.views.console import console

if TYPE_CHECKING:
    from observer.config import Settings
    from observer.views.lines import JudgeTally

T = TypeVar("T")


@click.command(short_help="Compute the signals of RagRecord JSON lines.")
@click.argument("source", type=click.File("rb"), default="-", metavar="[PATH|-]")
@config_option
@click.option("--strict", is_flag=True, help="Exit 1 when any input line is not a valid record.")
@click.option(
    "--summary", "show_summary", is_flag=True, help="Print a summary table instead of JSON."
)
def score(source: IO[bytes], config_path: str | None, strict: bool, show_summary: bool) -> None:
    """Compute the signals of RagRecord JSON lines (one object per line).

    Writes one JSON object per record to stdout, in input order. A line that is
    not a valid record is reported on stderr as {"line": N, "column": C,
    "error": "..."} (column only when the error has one, such as broken JSON)
    and skipped; an error already reported is counted, and said once at the end as
    {"error": "...", "more_lines": K, "last_line": N}. Exit 2 for a file of
    Langfuse observations (read by `observer discover --file`).
    """
    from observer.app.score_file import score_lines, signal_params_for
    from observer.signals.output import dumps_line
    from observer.signals.summary import Summary
    from observer.views.lines import BadLines
    from observer.views.summary import summary_table

    params = signal_params_for(config_path)
    out = sys.stdout.buffer

    def emit(obj: dict[str, Any]) -> None:
        out.write(dumps_line(obj))

    bad_lines = BadLines(stderr_line)
    summary = Summary()
    score_lines(source, params, None if show_summary else emit, bad_lines, summary)
    out.flush()
    bad_lines.close()
    if show_summary:
        console().print(
            summary_table(summary, title=f"observer score: {getattr(source, 'name', '-')}")
        )
    if strict and summary.bad_lines:
        raise SystemExit(1)


class _JudgeCommands(click.Group):
    """`observer judge FILE` judges a file (the command `file`); `observer judge agreement`
    compares the judge with people: a first word that names no command is the file's."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["file", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_JudgeCommands, short_help="Judge records offline, or compare with people.")
def judge() -> None:
    """The LLM judge: judge a file of records, or compare it with people's labels.

    `observer judge FILE` is `observer judge file FILE`.
    """


@judge.command("agreement", short_help="The judge against people's labels in Langfuse.")
@click.option(
    "--since", default="7d", show_default=True, help="Labels made this long ago up to now."
)
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
@config_option
def judge_agreement_command(since: str, as_json: bool, config_path: str | None) -> None:
    """How far the judge agrees with the people who label answers in Langfuse.

    Pairs people's scores named judge.human_score (source ANNOTATION) with the
    judge's faithfulness scores on the same traces: pairs, Cohen's kappa,
    precision and recall on unfaithful answers, the disagreements with their
    Langfuse links, per judge model and prompt. A figure with nothing to
    compute it from is null, never 0 or 1.
    """
    from observer.app.judge_agreement import judge_agreement
    from observer.views.judge import agreement_lines

    settings = settings_of(config_path)
    quiet_logging(settings)
    try:
        window = parse_duration(since)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--since") from None
    end = datetime.now(UTC)
    found, link, empty = judge_agreement(settings, end - window, end)
    if as_json:
        extra = {"empty": empty.as_dict()} if empty is not None else {}
        click.echo(json.dumps({**found.as_dict(link), **extra}, indent=2))
        return
    for line in agreement_lines(found, link, empty):
        click.echo(line)


@judge.command("canary", short_help="Judge the canary now, against its labels.")
@click.argument("path", type=click.Path(path_type=Path), required=False, metavar="[PATH]")
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
@config_option
def judge_canary_command(path: Path | None, as_json: bool, config_path: str | None) -> None:
    """Judge every case of a canary file once now and compare with its labels.

    PATH defaults to judge.canary_file. A canary is JSON lines of RagRecords, each
    with a "label" ("faithful" or "unfaithful") and an optional "why"; the daemon
    judges it on a schedule (judge.canary_every_h) and holds the judge's pages when
    its agreement falls. Prints the agreement, kappa and each disagreement with its
    why. Needs the judge's model and key, as `observer judge`.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from observer.app.judge_canary import canary_cases, judge_canary
    from observer.views.judge import canary_lines
    from observer.views.lines import JudgeTally

    settings = settings_of(config_path)
    quiet_logging(settings)
    cases = canary_cases(settings, path)
    progress = Progress(
        TextColumn("[bold]canary"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console(stderr=True),
        disable=not sys.stderr.isatty(),
    )
    tally = JudgeTally()
    with progress:
        task = progress.add_task("canary", total=len(cases))

        def each(_case: Any, result: Any) -> None:
            tally.add(result)
            progress.advance(task)

        found, tokens = judge_canary(settings, cases, each)
    if as_json:
        click.echo(json.dumps({**found.as_dict(cases), "tokens": tokens}, indent=2))
    else:
        for line in canary_lines(found, cases):
            click.echo(line)
        click.echo(f"tokens used: {tokens:,}")
    _exit_if_unreachable(settings, tally)


@judge.command("file", short_help="Judge RagRecord JSON lines offline with the LLM.")
@click.argument("source", type=click.File("rb"), default="-", metavar="[PATH|-]")
@config_option
@click.option("--strict", is_flag=True, help="Exit 1 when any line was bad or could not be judged.")
def judge_file(source: IO[bytes], config_path: str | None, strict: bool) -> None:
    """Judge RagRecord JSON lines offline with the configured LLM (every line, no sampling).

    Writes `observer score`'s object plus claims, verdicts, faithfulness,
    citation_accuracy, critical_unsupported, abstained, calls, tokens and
    judge_error, one per record, in input order. Needs OBSERVER_JUDGE_MODEL and
    OPENAI_API_KEY (or OBSERVER_JUDGE_BASE_URL for a keyless endpoint). With a
    [resolver] configured, the cited chunks are looked up first (missing_chunks,
    stale_chunks) and the judge's funnel applies, as in the daemon.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from observer.app.judge_file import FileJudge
    from observer.signals.output import dumps_line
    from observer.views.lines import BadLines, JudgeTally, judge_json

    settings = settings_of(config_path)
    quiet_logging(settings)
    out = sys.stdout.buffer
    tally = JudgeTally()
    progress = Progress(
        TextColumn("[bold]judging"),
        BarColumn(),
        TextColumn("{task.completed} done"),
        TimeElapsedColumn(),
        console=console(stderr=True),
        disable=not sys.stderr.isatty(),
    )

    bad_lines = BadLines(stderr_line)
    with FileJudge(settings) as file_judge, progress:
        task = progress.add_task("judge", total=None)
        for each in file_judge.judge(source, bad_lines):
            tally.add(each.result)
            out.write(dumps_line(judge_json(each.signals, each.result, each.findings)))
            progress.advance(task)
    out.flush()
    bad_lines.close()
    tally.bad_lines = bad_lines.count
    # The output lines say it per record; this says it at once, where a person looks.
    click.echo(tally.line(), err=True)
    _exit_if_unreachable(settings, tally)
    if strict and (tally.bad_lines or tally.failed):
        raise SystemExit(1)


def _exit_if_unreachable(settings: Settings, tally: JudgeTally) -> None:
    """Exit 3, naming the endpoint, when no call of the judge reached it."""
    from observer import app

    if tally.none_reached():
        endpoint = without_credentials(settings.judge.base_url) or "the OpenAI API"
        click.echo(f"observer: the judge endpoint could not be reached ({endpoint})", err=True)
        raise SystemExit(app.EXIT_UNREACHABLE)
