"""`observer judge agreement`: the judge's verdicts against people's labels in Langfuse.

Reads people's scores named `judge.human_score` (source ANNOTATION) in the window,
then observer's own `faithfulness` scores on the same traces (source API, by
trace id, 50 a request), both through `GET /api/public/v3/scores` within one
request budget, and pairs them (observer.judge.agreement). Which judge wrote a
verdict is read from its score's metadata (docs/judge.md#agreement-with-people).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from observer.app.parts import build_api, build_budget
from observer.config import ConfigError, Settings
from observer.judge.agreement import Agreement, Pair, Verdict, agreement, pairs_of
from observer.judge.annotations import Annotation, AnnotationReader
from observer.judge.identity import judge_from_metadata
from observer.telemetry.metrics import Metrics

JUDGE_SCORE = "faithfulness"
TRACES_A_REQUEST = 50  # trace ids in one request's comma list (the URL stays short)
# A person labels an answer after the judge scored it: its verdict is looked for this far back.
JUDGED_BEFORE = timedelta(days=90)


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

    return read_agreement(reader, settings, name, start, end), link


def human_score(settings: Settings) -> str:
    """The score people write, or a ConfigError saying what to set."""
    if not settings.judge.human_score:
        raise ConfigError(
            "judge.human_score is not set: name the score people write in Langfuse "
            "(an annotation queue's BOOLEAN or NUMERIC score), e.g. "
            "OBSERVER_JUDGE__HUMAN_SCORE=faithful"
        )
    return settings.judge.human_score


def read_agreement(
    reader: AnnotationReader, settings: Settings, name: str, start: datetime, end: datetime
) -> Agreement:
    """People's labels named `name` made in [start, end), the judge's verdicts on their
    traces, paired (the command's and the daemon's hourly refresh's one read)."""
    labels = reader.read(name, start, end)
    traces = sorted({a.trace_id for a in labels})
    judged: list[Annotation] = []
    for at in range(0, len(traces), TRACES_A_REQUEST):
        batch = ",".join(traces[at : at + TRACES_A_REQUEST])
        judged += reader.read(
            JUDGE_SCORE, start - JUDGED_BEFORE, end, source="API", trace_ids=batch
        )
    faithful_at = settings.judge.faithful_at
    threshold = settings.judge.human_threshold
    verdicts = [
        Verdict(
            a.trace_id,
            a.timestamp.timestamp(),
            float(a.value) < faithful_at if isinstance(a.value, int | float) else None,
            judge_from_metadata(a.metadata),
            a.project_id,
        )
        for a in judged
        if not isinstance(a.value, bool)
    ]
    people = [
        Verdict(a.trace_id, a.timestamp.timestamp(), a.unfaithful(threshold), None, a.project_id)
        for a in labels
    ]
    return agreement(pairs_of(verdicts, people))
