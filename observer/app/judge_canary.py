"""`observer judge canary`: the canary judged once now, its figures against its labels.

What the daemon does on its schedule (observer.judge.canary_run), at once and
without the state file: every case judged by the configured judge, in turn, with
no resolver (the canary's chunks live in the file, not in the store). A first run
has no run before it: no flip rate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from observer.app.builders import build_judge_client
from observer.config import ConfigError, Settings
from observer.judge.canary import Case, Figures, figures
from observer.judge.canary_run import judge_cases, load_cases
from observer.judge.outcome import JudgeResult
from observer.signals import compute


def canary_cases(settings: Settings, path: Path | None) -> tuple[Case, ...]:
    """The cases of the file named on the command line, else of judge.canary_file;
    ConfigError without either, or for a file that is no canary."""
    found = path or settings.judge.canary_file
    if found is None:
        raise ConfigError(
            "no canary: name a file (observer judge canary FILE) or set judge.canary_file "
            "(an example: examples/canary.jsonl)"
        )
    return load_cases(found)


def judge_canary(
    settings: Settings,
    cases: tuple[Case, ...],
    each: Callable[[Case, JudgeResult], None] = lambda _case, _result: None,
) -> tuple[Figures, int]:
    """The cases' figures and the tokens used; `each` is told of every case."""
    client = build_judge_client(settings)
    params = settings.signal_params()
    verdicts, tokens = judge_cases(
        cases,
        lambda record: client.judge(record, compute(record, params)),
        settings.judge.faithful_at,
        each=each,
    )
    return figures(cases, verdicts), tokens
