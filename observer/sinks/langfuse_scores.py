"""Scores to Langfuse: `POST /api/public/scores` in batches through the SDK's API client.

Not `Langfuse.create_score`: it drops silently on failure. Here a failure is
an exception the dispatcher turns into a retry, and a 207 says how many
scores Langfuse refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from langfuse.api.client import LangfuseAPI
from langfuse.api.scores.types.create_score_batch_results import CreateScoreBatchResults
from langfuse.api.scores.types.create_score_request import CreateScoreRequest

from observer.langfuse_api import NO_RETRIES, translate
from observer.mapping.decode import parse_time
from observer.model import ScoreEvent
from observer.sinks import SendResult


def score_request(score: ScoreEvent) -> CreateScoreRequest:
    """A ScoreEvent in the API's terms: BOOLEAN as 1/0, CATEGORICAL as a string."""
    return CreateScoreRequest(
        id=score.id,
        trace_id=score.trace_id,
        observation_id=score.observation_id,
        name=score.name,
        value=score.value,
        data_type=score.data_type,
        comment=score.comment,
        timestamp=parse_time(score.timestamp),
        environment=score.environment,
    )


class LangfuseScoreSink:
    def __init__(self, api: LangfuseAPI) -> None:
        self._api = api

    def send(self, scores: Sequence[ScoreEvent]) -> SendResult:
        try:
            result = self._api.scores.create(
                request=[score_request(s) for s in scores], request_options=NO_RETRIES
            )
        except Exception as error:
            raise translate(error, "pushing scores") from None
        if isinstance(result, CreateScoreBatchResults):
            return SendResult(
                accepted=result.accepted,
                rejected=result.rejected,
                errors=tuple(e.message for e in result.errors),
            )
        return SendResult(accepted=len(scores))
