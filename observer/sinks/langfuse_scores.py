"""Scores to Langfuse: `POST /api/public/scores` in batches through the SDK's API client.

Not `Langfuse.create_score`: it drops silently on failure. Here a failure is
an exception the dispatcher turns into a retry, and a 207 says how many
scores Langfuse refused.

The server's rules, each read in its source or the SDK's:

- **One request budget.** Given a `RateLimiter`, every request takes its slot
  from it: the same instance the source reads with, because Langfuse Cloud
  counts observation reads and score posts in one General API bucket per
  organisation (30 requests a minute on Hobby, 100 on Core, 1,000 on Pro; none
  self-hosted). A 429 on a post blocks that shared limiter for its
  `Retry-After`, so the reads wait too. `DELETE /api/public/scores/{id}` takes
  a slot as well, but Langfuse counts deletes in a bucket of their own
  ("score-delete": 50 a day on Hobby, 200 on Core): its 429 is raised with its
  `Retry-After` without blocking the reads.
- **Body size.** A batch is split so that no body exceeds 1,000,000 bytes
  (`MAX_BODY_BYTES`, the SDK's cap for the route's 1 MiB limit), whatever
  `sink.batch_size` says; the parts' results come back as one `SendResult`.
  A single score too large for any body is never posted: it is counted as
  rejected, with an error naming it.
- **Score configs.** Langfuse ties a score to its config only when the score
  carries `configId`; then it validates the score against the config in its
  ingestion worker (same data type, not archived, a NUMERIC value within
  min..max, a CATEGORICAL label among the categories, BOOLEAN 0 or 1) and
  drops a score that fails, silently, after answering 202
  (`validateAndInflateScore.ts`). Only a CATEGORICAL score gains stored data
  (its category's value instead of 0); every type gains the link to its
  config. With `score_configs=True` the sink reads the project's configs
  (`GET /api/public/score-configs`) before its first post, and adds `configId`
  to each score whose name has an active config of its data type that its
  value satisfies: a score the worker would drop goes without it, as before
  (logged once per name, `score_config_mismatch`). Without configs, scores go
  as they always did. Reading fails: scores go without `configId`, and the
  configs are read again before a post at least `config_retry_s` later.
- **Deletes.** `delete(scores)` sends one `DELETE /api/public/scores/{id}` per
  score (Langfuse has no batch delete; it answers 202 and deletes later). A
  404 counts as deleted.

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

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import httpx
import orjson
import structlog
from langfuse.api.client import LangfuseAPI
from langfuse.api.core.api_error import ApiError
from langfuse.api.score_configs.types.score_configs import ScoreConfigs
from langfuse.api.scores.types.create_score_batch_results import CreateScoreBatchResults
from langfuse.api.scores.types.create_score_request import CreateScoreRequest

from observer.errors import RateLimited, RemoteError, Unreachable
from observer.langfuse_api import NO_RETRIES, translate
from observer.langfuse_setup import ExistingConfig, list_score_configs
from observer.model import ScoreEvent
from observer.sinks import SendResult
from observer.sinks.jsonl import score_json
from observer.sources.ratelimit import RateLimiter
from observer.telemetry.metrics import Metrics
from observer.times import parse_time

log = structlog.get_logger("observer.sinks.langfuse")

SCORES_PATH: Final = "api/public/scores"
# The SDK's own cap for one POST /api/public/scores (langfuse/_task_manager/score_consumer.py,
# `_SCORES_BODY_LIMIT_BYTES`): the route has Next.js's default 1 MiB body limit.
MAX_BODY_BYTES: Final = 1_000_000
CONFIG_RETRY_S: Final = 300.0


def score_request(score: ScoreEvent, config_id: str | None = None) -> CreateScoreRequest:
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
        config_id=config_id,
        metadata=score.metadata,
    )


def _batch_result(status: int, body: Any, sent: int) -> SendResult:
    """What a 2xx to a batch of `sent` scores says was stored; `Unreachable` (kept in the
    outbox, sent again) for any answer but the route's documented success: 202 (all
    accepted: a JSON body, or none), 207 `{accepted, rejected, errors}` counting every score
    sent, or an older server's 200 `{"id"}` to a single score. A 200 of HTML (a proxy's
    login page, a redirect followed to a web page) proves nothing was stored."""
    if status == 202 and (isinstance(body, dict | list) or body == ""):
        return SendResult(accepted=sent)
    if status == 207 and isinstance(body, dict):
        accepted, rejected = body.get("accepted"), body.get("rejected")
        errors = body.get("errors") or []
        if (
            isinstance(accepted, int)
            and isinstance(rejected, int)
            and accepted >= 0
            and rejected >= 0
            and accepted + rejected == sent
            and isinstance(errors, list)
        ):
            return SendResult(
                accepted=accepted,
                rejected=rejected,
                errors=tuple(
                    str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors
                ),
            )
    if status == 200 and sent == 1 and isinstance(body, dict) and isinstance(body.get("id"), str):
        return SendResult(accepted=1)
    excerpt = " ".join(str(body).split())[:120]
    raise Unreachable(
        f"pushing scores: Langfuse answered {status} {excerpt!r}, not the route's success "
        f"(202, or 207 counting all {sent} scores): not counted as delivered, sent again later",
        status,
    )


def _combined(results: Iterable[SendResult]) -> SendResult:
    accepted = rejected = 0
    errors: list[str] = []
    for result in results:
        accepted += result.accepted
        rejected += result.rejected
        errors += result.errors
    return SendResult(accepted=accepted, rejected=rejected, errors=tuple(errors))


def split_by_size(sizes: Sequence[int], limit: int) -> tuple[list[list[int]], list[int]]:
    """Pure: item indexes in order, cut into parts whose JSON array (`[a,b,...]`: brackets
    and commas counted) is at most `limit` bytes; and the indexes too large even alone."""
    parts: list[list[int]] = []
    too_large: list[int] = []
    part: list[int] = []
    size = 2  # the brackets
    for index, item in enumerate(sizes):
        if item + 2 > limit:
            too_large.append(index)
            continue
        extra = item + (1 if part else 0)
        if part and size + extra > limit:
            parts.append(part)
            part, size, extra = [], 2, item
        part.append(index)
        size += extra
    if part:
        parts.append(part)
    return parts, too_large


# -- score configs ------------------------------------------------------------------------


def config_mismatch(config: ExistingConfig, score: ScoreEvent) -> str | None:
    """Pure: why Langfuse's worker would drop `score` sent with `config`'s id, or None.

    The worker's rules (`validateConfigAgainstBody`): the same data type, a config not
    archived, the same name, and the value within the config (NUMERIC within min..max,
    CATEGORICAL one of the labels, BOOLEAN 0 or 1).
    """
    if config.archived:
        return f"config {config.id} is archived"
    if config.name != score.name:
        return f"config {config.id} is named {config.name!r}"
    if config.data_type != score.data_type:
        return f"config {config.id} is {config.data_type}, the score {score.data_type}"
    value = score.value
    if score.data_type == "CATEGORICAL":
        labels = [c.label for c in config.categories]
        if value not in labels:
            return f"{value!r} is not a category of config {config.id} ({', '.join(labels)})"
        return None
    if isinstance(value, str) or not math.isfinite(value):
        return f"{value!r} is not a number"
    if score.data_type == "BOOLEAN":
        return None if value in (0, 1) else f"{value!r} is neither 0 nor 1"
    if config.min_value is not None and value < config.min_value:
        return f"{value:g} is below config {config.id}'s minimum {config.min_value:g}"
    if config.max_value is not None and value > config.max_value:
        return f"{value:g} is above config {config.id}'s maximum {config.max_value:g}"
    return None


@dataclass(frozen=True, slots=True)
class ScoreConfigIds:
    """The project's active score configs by name: which `configId` a score may carry."""

    by_name: Mapping[str, tuple[ExistingConfig, ...]]

    @classmethod
    def of(cls, configs: Iterable[ExistingConfig]) -> ScoreConfigIds:
        by_name: dict[str, tuple[ExistingConfig, ...]] = {}
        for config in configs:
            if not config.archived:
                by_name[config.name] = (*by_name.get(config.name, ()), config)
        return cls(by_name)

    def __len__(self) -> int:
        return sum(len(configs) for configs in self.by_name.values())

    def match(self, score: ScoreEvent) -> tuple[str | None, str | None]:
        """(the id of the first config of the score's name it satisfies, None); or
        (None, why none fits) when the name has configs but none takes this score;
        (None, None) when the name has no config."""
        configs = self.by_name.get(score.name, ())
        reasons = []
        for config in configs:
            reason = config_mismatch(config, score)
            if reason is None:
                return config.id, None
            reasons.append(reason)
        return None, ("; ".join(reasons) or None)


def load_score_config_ids(
    api: LangfuseAPI,
    limiter: RateLimiter | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> ScoreConfigIds:
    """The project's score configs (`GET /api/public/score-configs`, every page), each page
    through `limiter`; a 429 blocks it for `Retry-After`. Raises a RemoteError."""

    def fetch(call: Callable[[], ScoreConfigs]) -> ScoreConfigs:
        _acquire(limiter, should_stop, "listing score configs")
        try:
            return call()
        except Exception as error:
            _raise(translate(error, "listing score configs"), limiter)

    return ScoreConfigIds.of(list_score_configs(api, fetch))


def _acquire(limiter: RateLimiter | None, should_stop: Callable[[], bool], what: str) -> None:
    if limiter is not None and not limiter.acquire(should_stop):
        raise Unreachable(f"{what}: stopped while waiting for the request budget")


def _raise(error: RemoteError, limiter: RateLimiter | None) -> NoReturn:
    """Raise `error`; a 429 first settles the shared budget at its `X-RateLimit-Limit`
    and holds it for its `Retry-After`."""
    if isinstance(error, RateLimited) and limiter is not None:
        limiter.rate_limited(error.limit, error.retry_after_s)
    raise error from None


# -- the sink -----------------------------------------------------------------------------


class LangfuseScoreSink:
    def __init__(
        self,
        api: LangfuseAPI,
        *,
        limiter: RateLimiter | None = None,
        score_configs: bool = False,
        use_generated_client: bool = False,
        metrics: Metrics | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        max_body_bytes: int = MAX_BODY_BYTES,
        config_retry_s: float = CONFIG_RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._limiter = limiter
        self._metrics = metrics
        self._should_stop = should_stop
        self._max_body_bytes = min(max_body_bytes, MAX_BODY_BYTES)
        wrapper = getattr(api, "_client_wrapper", None)
        self._http = None if use_generated_client else getattr(wrapper, "httpx_client", None)
        self._want_configs = score_configs
        self._config_ids: ScoreConfigIds | None = None
        self._config_retry_s = config_retry_s
        self._configs_tried_at: float | None = None
        self._clock = clock
        self._mismatch_logged: set[str] = set()

    @property
    def config_ids(self) -> ScoreConfigIds | None:
        """The configs scores are matched with; None before they were read (or when off)."""
        return self._config_ids

    # -- posting ----------------------------------------------------------------------

    def send(self, scores: Sequence[ScoreEvent]) -> SendResult:
        """Post `scores` in as many bodies as 1,000,000 bytes need; one combined result.

        Raises the RemoteError of the first part that fails (the parts before it were
        stored; sending the batch again upserts them, never duplicates them)."""
        self._read_configs()
        config_ids = [self._config_id(s) for s in scores]
        items = [
            orjson.dumps(
                {
                    **{k: v for k, v in score_json(s).items() if v is not None},
                    **({"configId": c} if c is not None else {}),
                }
            )
            for s, c in zip(scores, config_ids, strict=True)
        ]
        parts, too_large = split_by_size([len(i) for i in items], self._max_body_bytes)
        results = [
            SendResult(
                accepted=0,
                rejected=len(too_large),
                errors=tuple(
                    f"score {scores[i].name} of trace {scores[i].trace_id} is {len(items[i]):,} "
                    f"bytes, over the {self._max_body_bytes:,}-byte body limit of "
                    "POST /api/public/scores: not sent"
                    for i in too_large
                ),
            )
        ]
        for part in parts:
            body = b"[" + b",".join(items[i] for i in part) + b"]"
            batch = [scores[i] for i in part]
            results.append(self._post(batch, [config_ids[i] for i in part], body))
        return _combined(results)

    def _post(
        self, scores: Sequence[ScoreEvent], config_ids: Sequence[str | None], body: bytes
    ) -> SendResult:
        _acquire(self._limiter, self._should_stop, "pushing scores")
        if self._http is None:
            return self._send_generated(scores, config_ids)
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
            _raise(translate(error, "pushing scores"), self._limiter)
        except Exception as error:  # the private layer changed under us: the public path
            self._fall_back(error)
            return self._send_generated(scores, config_ids)
        if not 200 <= status < 300:
            refusal = ApiError(status_code=status, headers=headers, body=parsed)
            _raise(translate(refusal, "pushing scores"), self._limiter)
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

    def _send_generated(
        self, scores: Sequence[ScoreEvent], config_ids: Sequence[str | None]
    ) -> SendResult:
        try:
            result = self._api.scores.create(
                request=[score_request(s, c) for s, c in zip(scores, config_ids, strict=True)],
                request_options=NO_RETRIES,
            )
        except Exception as error:
            _raise(translate(error, "pushing scores"), self._limiter)
        if isinstance(result, CreateScoreBatchResults):
            return SendResult(
                accepted=result.accepted,
                rejected=result.rejected,
                errors=tuple(e.message for e in result.errors),
            )
        return SendResult(accepted=len(scores))

    # -- score configs ----------------------------------------------------------------

    def _read_configs(self) -> None:
        if not self._want_configs or self._config_ids is not None:
            return
        now = self._clock()
        if self._configs_tried_at is not None and now - self._configs_tried_at < (
            self._config_retry_s
        ):
            return
        self._configs_tried_at = now
        try:
            self._config_ids = load_score_config_ids(self._api, self._limiter, self._should_stop)
        except RemoteError as error:
            log.warning(
                "score_configs_unreadable",
                error=str(error),
                action=f"scores go without configId; read again in {self._config_retry_s:g} s",
            )
            return
        log.info(
            "score_configs_read",
            configs=len(self._config_ids),
            names=sorted(self._config_ids.by_name),
        )

    def _config_id(self, score: ScoreEvent) -> str | None:
        if self._config_ids is None:
            return None
        config_id, mismatch = self._config_ids.match(score)
        if mismatch is not None and score.name not in self._mismatch_logged:
            self._mismatch_logged.add(score.name)
            log.warning(
                "score_config_mismatch",
                score=score.name,
                reason=mismatch,
                action="sent without configId (Langfuse would drop it with one)",
            )
        return config_id

    # -- deleting ---------------------------------------------------------------------

    def delete(self, scores: Sequence[ScoreEvent]) -> SendResult:
        """`DELETE /api/public/scores/{id}` for each score, each through the limiter; a
        score Langfuse does not have (404) counts as deleted.

        Raises the RemoteError of the first delete that fails (those before it are done;
        deleting them again is harmless). A 429 here is Langfuse's separate score-delete
        budget: raised with its Retry-After, the shared limiter is not blocked."""
        for score in scores:
            _acquire(self._limiter, self._should_stop, "deleting scores")
            try:
                self._api.scores.delete(score.id, request_options=NO_RETRIES)
            except Exception as raw:
                error = translate(raw, f"deleting score {score.name} of trace {score.trace_id}")
                if error.status != 404:
                    raise error from None
        return SendResult(accepted=len(scores))
