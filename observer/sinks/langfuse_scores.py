"""Scores to Langfuse: `POST /api/public/scores` in batches through the SDK's API client.

Not `Langfuse.create_score`: it drops silently on failure. Here a failure is
an exception the dispatcher turns into a retry, and a 207 says how many
scores Langfuse refused.

The body is serialized once with orjson and sent through the SDK client's
own HTTP layer (its auth, base URL, headers and timeout). The generated
`scores.create` walks every score through a pure-Python alias converter
(about 120 us a score, most of a pass's CPU in bench/pipeline.py); it stays
as the fallback. That layer is private to the SDK: any failure of the fast
path that is not an answer from the server or the network (a TypeError, an
AttributeError: a changed signature) switches to the public path for good,
logged once and counted (`observer_score_fast_path_fallbacks_total`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import orjson
import structlog
from langfuse.api.client import LangfuseAPI
from langfuse.api.core.api_error import ApiError
from langfuse.api.scores.types.create_score_batch_results import CreateScoreBatchResults
from langfuse.api.scores.types.create_score_request import CreateScoreRequest

from observer.langfuse_api import NO_RETRIES, translate
from observer.model import ScoreEvent
from observer.sinks import SendResult
from observer.sinks.jsonl import score_json
from observer.telemetry.metrics import Metrics
from observer.times import parse_time

log = structlog.get_logger("observer.sinks.langfuse")

SCORES_PATH = "api/public/scores"


def score_request(score: ScoreEvent) -> CreateScoreRequest:
    """A ScoreEvent in the SDK's terms: BOOLEAN as 1/0, CATEGORICAL as a string."""
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


def _batch_result(status: int, body: Any, sent: int) -> SendResult:
    if status == 207 and isinstance(body, dict):
        errors = body.get("errors") or []
        return SendResult(
            accepted=int(body.get("accepted", 0)),
            rejected=int(body.get("rejected", 0)),
            errors=tuple(
                str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors
            ),
        )
    return SendResult(accepted=sent)


class LangfuseScoreSink:
    def __init__(
        self,
        api: LangfuseAPI,
        *,
        use_generated_client: bool = False,
        metrics: Metrics | None = None,
    ) -> None:
        self._api = api
        self._metrics = metrics
        wrapper = getattr(api, "_client_wrapper", None)
        self._http = None if use_generated_client else getattr(wrapper, "httpx_client", None)

    @property
    def fast(self) -> bool:
        """Whether scores still go through the SDK's HTTP layer directly."""
        return self._http is not None

    def send(self, scores: Sequence[ScoreEvent]) -> SendResult:
        if self._http is None:
            return self._send_generated(scores)
        body = orjson.dumps(
            [{k: v for k, v in score_json(s).items() if v is not None} for s in scores]
        )
        try:
            response = self._http.request(
                SCORES_PATH,
                method="POST",
                content=body,
                headers={"Content-Type": "application/json"},
                request_options=NO_RETRIES,
            )
            status = int(response.status_code)
            try:
                parsed: Any = response.json()
            except ValueError:
                parsed = response.text[:200]
            headers = dict(response.headers)
        except (ApiError, httpx.HTTPError) as error:
            raise translate(error, "pushing scores") from None
        except Exception as error:  # the private layer changed under us: the public path
            self._fall_back(error)
            return self._send_generated(scores)
        if not 200 <= status < 300:
            raise translate(
                ApiError(status_code=status, headers=headers, body=parsed), "pushing scores"
            )
        return _batch_result(status, parsed, len(scores))

    def _fall_back(self, error: Exception) -> None:
        self._http = None
        if self._metrics is not None:
            self._metrics.score_fast_path_fallbacks.inc()
        log.warning(
            "score_fast_path_disabled",
            error=f"{type(error).__name__}: {error}"[:300],
            using="api.scores.create",
        )

    def _send_generated(self, scores: Sequence[ScoreEvent]) -> SendResult:
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
