"""`observer judge agreement`: the judge's verdicts against people's labels in Langfuse.

Reads people's scores named `judge.human_score` (source ANNOTATION) in the window,
then observer's own `faithfulness` scores on the same traces (source API, by
trace id, 50 a request), both through `GET /api/public/v3/scores` within one
request budget, and pairs them (observer.judge.agreement). Which judge wrote a
verdict is read from its score's metadata (docs/judge.md#agreement-with-people).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from observer.app.parts import build_api, build_budget
from observer.config import ConfigError, Settings
from observer.judge.agreement import Agreement, Pair
from observer.judge.annotations import AnnotationReader, read_agreement
from observer.telemetry.metrics import Metrics


def judge_agreement(
    settings: Settings, start: datetime, end: datetime
) -> tuple[Agreement, Callable[[Pair], str | None]]:
    """The agreement over the labels made in [start, end), and how to link a pair."""
    name = human_score(settings)
    reader = AnnotationReader(build_api(settings), build_budget(settings, Metrics()))
    base = settings.langfuse.base_url.rstrip("/")

    def link(pair: Pair) -> str | None:
        if not pair.project_id:
            return None
        return f"{base}/project/{pair.project_id}/traces/{pair.trace_id}"

    return read_agreement(reader, settings.judge, name, start, end), link


def human_score(settings: Settings) -> str:
    """The score people write, or a ConfigError saying what to set."""
    if not settings.judge.human_score:
        raise ConfigError(
            "judge.human_score is not set: name the score people write in Langfuse "
            "(an annotation queue's BOOLEAN or NUMERIC score), e.g. "
            "OBSERVER_JUDGE__HUMAN_SCORE=faithful"
        )
    return settings.judge.human_score
