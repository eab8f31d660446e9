"""The judge's own health looked at on the daemon's schedule: its agreement with people
(judge.human_score, an hourly read) and its canary (judge.canary_file): each a job run
every minute whose step knows whether it is due. Never in a one-shot run; in a fleet
only the member that evaluates the rules looks (`active`), its samples being the ones
read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

from langfuse.api.client import LangfuseAPI

from observer.background import Periodic
from observer.config import Settings
from observer.judge.service import JudgeService
from observer.sources.ratelimit import RateLimiter
from observer.state import State
from observer.telemetry.metrics import Metrics


def judge_checks(
    settings: Settings,
    in_daemon: bool,
    api: LangfuseAPI | None,
    limiter: RateLimiter,
    judge: JudgeService | None,
    metrics: Metrics,
    state: State,
    stop: threading.Event,
    active: Callable[[], bool],
) -> tuple[Periodic, ...]:
    """The daemon's looks at its judge (never in a one-shot run); in a fleet only the
    member that evaluates the rules looks (`active`), its samples being the ones read:
    the hourly agreement read, for a daemon reading Langfuse with judge.human_score; the
    canary's runs, for a daemon with a judge and judge.canary_file."""
    if not in_daemon:
        return ()
    checks: list[Periodic] = []
    j = settings.judge
    if api is not None and j.human_score:
        from observer.judge.agreement_refresh import AgreementRefresh
        from observer.judge.annotations import AnnotationReader, read_agreement

        reader = AnnotationReader(api, limiter, should_stop=stop.is_set)
        name = j.human_score
        refresh = AgreementRefresh(
            lambda start, end: read_agreement(reader, j, name, start, end),
            metrics,
            state.history.add_samples,
            active=active,
        )
        checks.append(_every_minute("agreement", refresh.step))  # it reads once an hour
    if judge is not None and j.canary_file is not None:
        from observer.judge.canary_run import CanaryRun, check_share, load_cases
        from observer.signals import compute

        cases = load_cases(j.canary_file)
        every = timedelta(hours=j.canary_every_h)
        tokens = state.judge.tokens_per_trace()
        check_share(len(cases), every, j.canary_tokens, tokens, j.canary_share)
        params = settings.signal_params()
        client = judge.client
        run = CanaryRun(
            cases,
            lambda record: client.judge(record, compute(record, params)),
            judge.judge,
            state.judge,
            metrics,
            state.history.add_samples,
            every=every,
            share_tokens=j.canary_tokens,
            faithful_at=j.faithful_at,
            should_stop=stop.is_set,
            active=active,
        )
        checks.append(_every_minute("canary", run.step))  # a run when due, samples hourly
    return tuple(checks)


def _every_minute(name: str, step: Callable[[], bool]) -> Periodic:
    """A look at the judge run every minute (the first at start); its step knows whether
    it is due."""
    return Periodic(f"judge-{name}", step, 60.0, crash_event=f"judge_{name}_failed")
