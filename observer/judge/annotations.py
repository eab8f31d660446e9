"""People's scores from Langfuse: the labels the judge is measured against (docs/judge.md).

`AnnotationReader.read(name, start, end)` lists the scores named `name`
(`judge.human_score`) with source `ANNOTATION` (annotation queues and the
UI) whose timestamp is in `[start, end)`, through the SDK's v3 call
`GET /api/public/v3/scores` (`scores.get_many`) with the field groups
`subject` (which trace and observation) and `annotation` (queue and author).
Pages of at most 100, every page until `meta.cursor` is absent.

Each request takes its slot from the process's one request budget (the
`RateLimiter` the source and the sink share: Langfuse Cloud counts this read
in the same General API bucket) and goes through observer's retry policy as
the source's reads do: a 429 settles the budget at its `X-RateLimit-Limit`
and holds every caller for its `Retry-After`; an unreachable Langfuse (network
errors, 5xx) is retried a bounded number of times with backoff, then raised;
other errors (401, 400) are raised at once. A shutdown (`should_stop`) ends
the wait for a slot with `Stopped`.

A score on a session or an experiment, not a trace, is left out: it has no
verdict of the judge to be paired with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

import structlog
from langfuse.api.client import LangfuseAPI
from langfuse.api.scores.types.get_scores_v3response import GetScoresV3Response
from langfuse.api.scores.types.score_subject_v3 import (
    ScoreSubjectV3_Observation,
    ScoreSubjectV3_Trace,
)

from observer.judge.agreement import Agreement, ScoreRead, agreement, human_unfaithful, pairs_of
from observer.judge.identity import judge_from_metadata
from observer.langfuse_api import NO_RETRIES
from observer.sources.langfuse import budgeted_read
from observer.sources.ratelimit import RateLimiter


class LabelSettings(Protocol):
    """What of `judge.*` reads a verdict and a label (observer.config.JudgeSettings; the
    judge's modules do not import the configuration, which imports them)."""

    @property
    def faithful_at(self) -> float: ...

    @property
    def human_threshold(self) -> float: ...


log = structlog.get_logger("observer.judge.annotations")

SOURCE: Final = "ANNOTATION"
FIELDS: Final = "subject,annotation,details"  # details: the metadata (which judge wrote it)
PAGE_LIMIT: Final = 100  # the endpoint's maximum


@dataclass(frozen=True, slots=True)
class Annotation:
    """One person's score on a trace (or an observation of it), as Langfuse typed it:
    BOOLEAN a bool, NUMERIC a float, CATEGORICAL / TEXT / CORRECTION a str."""

    score_id: str
    trace_id: str
    observation_id: str | None
    name: str
    data_type: str
    value: bool | float | str
    timestamp: datetime
    queue_id: str | None
    author_user_id: str | None
    environment: str
    metadata: dict[str, Any] | None = None
    project_id: str | None = None

    def unfaithful(self, threshold: float) -> bool | None:
        """The person's label: a BOOLEAN false, or a NUMERIC below `threshold`
        (`judge.human_threshold`), is unfaithful; None for a label of another type."""
        if self.data_type == "BOOLEAN" and isinstance(self.value, bool):
            return human_unfaithful("BOOLEAN", 1.0 if self.value else 0.0, threshold)
        if self.data_type == "NUMERIC" and isinstance(self.value, int | float):
            return human_unfaithful("NUMERIC", float(self.value), threshold)
        return None


def annotation_of(score: Any) -> Annotation | None:
    """A v3 score as an Annotation; None when it is not on a trace."""
    subject = score.subject
    if isinstance(subject, ScoreSubjectV3_Trace):
        trace_id, observation_id = subject.id, None
    elif isinstance(subject, ScoreSubjectV3_Observation) and subject.trace_id:
        trace_id, observation_id = subject.trace_id, subject.id
    else:
        return None
    return Annotation(
        score_id=score.id,
        trace_id=trace_id,
        observation_id=observation_id,
        name=score.name,
        data_type=score.data_type,
        value=score.value,
        timestamp=score.timestamp,
        queue_id=score.queue_id,
        author_user_id=score.author_user_id,
        environment=score.environment,
        metadata=getattr(score, "metadata", None),
        project_id=getattr(score, "project_id", None),
    )


class AnnotationReader:
    def __init__(
        self,
        api: LangfuseAPI,
        limiter: RateLimiter,
        *,
        page_limit: int = PAGE_LIMIT,
        max_attempts: int = 5,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        if not 1 <= page_limit <= PAGE_LIMIT:
            raise ValueError(f"page_limit must be 1 to {PAGE_LIMIT}")
        self._api = api
        self._limiter = limiter
        self.page_limit = page_limit
        self._max_attempts = max_attempts
        self._should_stop = should_stop
        self.requests = 0  # answered requests, pages included

    def read(
        self,
        name: str,
        start: datetime,
        end: datetime,
        *,
        source: str = SOURCE,
        trace_ids: str | None = None,
    ) -> list[Annotation]:
        """Every score named `name` from `source` (people's: ANNOTATION; observer's own
        judge scores: API) with a timestamp in [start, end), newest first, read page by
        page until the cursor is absent."""
        out: list[Annotation] = []
        skipped = 0
        cursor: str | None = None
        while True:
            page = self._request(name, start, end, cursor, source, trace_ids)
            for score in page.data:
                annotation = annotation_of(score)
                if annotation is None:
                    skipped += 1
                else:
                    out.append(annotation)
            cursor = page.meta.cursor
            if not cursor:
                break
        log.info(
            "annotations_read",
            name=name,
            annotations=len(out),
            not_on_a_trace=skipped,
            requests=self.requests,
        )
        return out

    def newest(self, name: str | None, end: datetime, limit: int) -> list[Any]:
        """One page: the newest people's scores before `end` named `name` (any name: None),
        as the API gives them (not only those on a trace): what `judge agreement` looks
        at when its window held no label."""
        page = self._request(name, None, end, None, SOURCE, None, limit=limit)
        return list(page.data)

    def config_names(self) -> list[str]:
        """The names of the project's score configs (the first 100): what people label
        with in an annotation queue."""

        def call() -> list[str]:
            found = self._api.score_configs.get(page=1, limit=100, request_options=NO_RETRIES)
            self.requests += 1
            return [c.name for c in found.data]

        return budgeted_read(
            call,
            self._limiter,
            what="reading score configs (GET /api/public/score-configs)",
            event="annotations",
            max_attempts=self._max_attempts,
            should_stop=self._should_stop,
        )

    def _request(
        self,
        name: str | None,
        start: datetime | None,
        end: datetime,
        cursor: str | None,
        source: str,
        trace_ids: str | None,
        limit: int | None = None,
    ) -> GetScoresV3Response:
        def call() -> GetScoresV3Response:
            page: GetScoresV3Response = self._api.scores.get_many(
                name=name,
                source=source,
                trace_id=trace_ids,
                fields=FIELDS,
                limit=limit or self.page_limit,
                cursor=cursor,
                from_timestamp=start,
                to_timestamp=end,
                request_options=NO_RETRIES,
            )
            self.requests += 1
            return page

        return budgeted_read(
            call,
            self._limiter,
            what="reading annotations (GET /api/public/v3/scores)",
            event="annotations",
            max_attempts=self._max_attempts,
            should_stop=self._should_stop,
        )


JUDGE_SCORE = "faithfulness"
TRACES_A_REQUEST = 50  # trace ids in one request's comma list (the URL stays short)
# A person labels an answer after the judge scored it: its verdict is looked for this far back.
JUDGED_BEFORE = timedelta(days=90)


def read_agreement(
    reader: AnnotationReader, judge: LabelSettings, name: str, start: datetime, end: datetime
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
    faithful_at = judge.faithful_at
    threshold = judge.human_threshold
    verdicts = [
        ScoreRead(
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
        ScoreRead(a.trace_id, a.timestamp.timestamp(), a.unfaithful(threshold), None, a.project_id)
        for a in labels
    ]
    return agreement(pairs_of(verdicts, people))
