"""The configuration's sections but the rules' (observer.config.alerts): one small
schema each, validated at start; `observer.config.settings` puts them together."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from observer.config.keys import swapped_keys
from observer.config.signals import Section as _Section


class LangfuseSettings(_Section):
    base_url: str = "https://cloud.langfuse.com"
    public_key: str | None = None
    secret_key: SecretStr | None = None

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        # A URL without a scheme would otherwise be retried for seconds as "unreachable".
        parsed = urlsplit(value.strip())
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"must be an http:// or https:// URL with a host, got {value!r}")
        if "/api/public" in parsed.path:
            # Every request would be answered 404: the client adds /api/public itself.
            base = value.strip()[: value.strip().index("/api/public")]
            raise ValueError(
                f"must be Langfuse's base URL, without /api/public: {base!r}, not {value!r}"
            )
        return value.strip().rstrip("/")

    @model_validator(mode="after")
    def _keys_by_shape(self) -> LangfuseSettings:
        # Before any request: a secret key in the public variable is printed where the
        # public key is shown, and sent where it is sent.
        problem = swapped_keys(
            self.public_key, self.secret_key.get_secret_value() if self.secret_key else None
        )
        if problem:
            raise ValueError(problem)
        return self


class SourceSettings(_Section):
    poll_interval_s: float = Field(30.0, gt=0, description="seconds between poll passes")
    settle_s: float = Field(20.0, ge=0, description="a trace is scored once quiet this long")
    lookback_s: float = Field(3600.0, gt=0, description="how far back the first start looks")
    overlap_s: float = Field(
        300.0, ge=0, description="a sweep re-reads this much before the watermark (late data)"
    )
    sweep_interval_s: float = Field(
        60.0, ge=0, description="seconds between sweeps; 0: every pass is a sweep"
    )
    page_limit: int = Field(1000, ge=1, le=1000)
    requests_per_minute: float | None = Field(
        None,
        gt=0,
        description="hard cap on requests to Langfuse a minute, reads and score posts "
        "together (unset: adaptive from 25, settling below Langfuse's limit)",
    )
    request_timeout_s: float = Field(30.0, gt=0)
    first_contact_s: float = Field(
        10.0,
        gt=0,
        description="how long a start tries to reach Langfuse (and the judge) before giving up",
    )
    request_deadline_s: float = Field(
        120.0, gt=0, description="one request, answer read to its end, takes at most this"
    )
    max_response_mb: float = Field(
        64.0, gt=0, description="a larger answer (also once decompressed) is refused"
    )
    max_attempts: int = Field(
        8, ge=1, le=20, description="tries per request before the pass gives up (~1 min)"
    )
    environments: list[str] = Field(default_factory=list, description="only these (empty: all)")
    trace_names: list[str] = Field(default_factory=list, description="only these (empty: all)")
    tags: list[str] = Field(default_factory=list, description="only traces with one of these")


class SinkSettings(_Section):
    batch_size: int | None = Field(
        None,
        ge=1,
        description="cap on scores per POST (unset: as many as fit in 1,000,000 bytes)",
    )
    max_outbox: int = Field(100_000, ge=100, description="scores waiting at most; then traces wait")
    max_backoff_s: float = Field(300.0, gt=0)


class StateSettings(_Section):
    path: str = "observer.sqlite"


class RunSettings(_Section):
    shutdown_grace_s: float = Field(20.0, gt=0, description="SIGTERM: finish, flush, exit within")
    housekeeping_interval_s: float = Field(300.0, gt=0)


class MappingSettings(_Section):
    generation_types: list[str] = Field(default_factory=lambda: ["GENERATION"])
    generation_names: list[str] = Field(default_factory=list)
    retriever_types: list[str] = Field(default_factory=lambda: ["RETRIEVER"])
    retriever_names: list[str] = Field(default_factory=list)
    question_keys: list[str] = Field(
        default_factory=lambda: ["question", "query", "input", "message", "task"]
    )
    answer_keys: list[str] = Field(
        default_factory=lambda: ["content", "text", "answer", "response"]
    )
    sources_keys: list[str] = Field(
        default_factory=lambda: ["documents", "sources", "chunks", "nodes"]
    )
    text_keys: list[str] = Field(default_factory=lambda: ["text", "content", "page_content"])
    chunk_id_keys: list[str] = Field(default_factory=lambda: ["chunk_id", "id"])
    score_keys: list[str] = Field(
        default_factory=lambda: ["rerank_score", "relevance_score", "score"]
    )
    verify_sources: bool = Field(
        True,
        description="skip as sources_unverified when the recorded prompt shows none of the "
        "documents; false: the rules decide (a prompt recorded without its documents)",
    )
    hook: str = Field("", description="module:function building the RagRecord instead")

    @model_validator(mode="after")
    def _hook_importable(self) -> MappingSettings:
        if self.hook:
            resolve_hook(self.hook)
        return self


class JudgeSettings(_Section):
    enabled: bool = False
    rate: float = Field(
        0.05, ge=0.0, le=1.0, description="share of traces judged, by trace-id hash"
    )
    risk_oversampling: bool = True
    risk_rate: float = Field(0.5, ge=0.0, le=1.0, description="share of risky traces judged")
    max_judged_per_hour: int = Field(200, ge=0)
    max_tokens_per_day: int = Field(2_000_000, ge=0)
    concurrency: int = Field(4, ge=1, le=64)
    queue_size: int = Field(1000, ge=1)
    timeout_s: float = Field(30.0, gt=0, description="per LLM call")
    max_retries: int = Field(3, ge=0, le=10)
    max_tokens: int = Field(2000, ge=64, description="completion tokens per call")
    model: str = ""
    base_url: str = ""
    api_key: SecretStr | None = None
    price_prompt_per_1k: float = Field(0.0, ge=0)
    price_completion_per_1k: float = Field(0.0, ge=0)
    human_score: str | None = Field(
        None,
        min_length=1,
        description="the score people write in Langfuse (source ANNOTATION) to measure the "
        "judge against; unset: no agreement",
    )
    human_threshold: float = Field(
        0.5, ge=0.0, le=1.0, description="a NUMERIC human score below it is unfaithful"
    )
    faithful_at: float = Field(
        1.0, ge=0.0, le=1.0, description="a judge faithfulness below it is unfaithful"
    )

    canary_file: Path | None = Field(
        None,
        description="JSON lines of records with a label (faithful or unfaithful), judged on "
        "a schedule; unset: no canary",
    )
    canary_every_h: float = Field(24.0, ge=1.0, description="hours between canary runs")
    canary_share: float = Field(
        0.1,
        gt=0.0,
        le=0.5,
        description="share of max_tokens_per_day kept for the canary (taken off the traces')",
    )

    @model_validator(mode="after")
    def _model_when_enabled(self) -> JudgeSettings:
        if self.enabled and not self.model:
            raise ValueError("judge.enabled needs judge.model (or OBSERVER_JUDGE_MODEL)")
        if self.canary_file is not None and not self.enabled:
            raise ValueError("judge.canary_file needs judge.enabled (the canary is judged)")
        return self

    @property
    def canary_tokens(self) -> int:
        """The canary's share of the day's tokens, kept ahead (0 without a canary)."""
        if self.canary_file is None:
            return 0
        return int(self.max_tokens_per_day * self.canary_share)


class ResolverSettings(_Section):
    kind: Literal["", "milvus", "qdrant", "postgres", "hook"] = Field(
        "", description="the chunk store to check citations against (empty: off)"
    )
    uri: str = Field("", description="milvus: URI or Milvus Lite file; qdrant: URL or path")
    collection: str = Field("", description="milvus/qdrant collection; postgres table or view")
    secret_env: str = Field("", description="variable holding the token, API key or DSN")
    hook: str = Field("", description='kind = "hook": module:function')
    id_field: str = "chunk_id"
    hash_field: str = "text_hash"
    text_field: str = "text"
    doc_field: str = "doc_id"
    updated_field: str = "updated_at"
    cache_ttl_s: float = Field(300.0, ge=0)
    timeout_s: float = Field(5.0, gt=0)
    max_ids_per_query: int = Field(500, ge=1)
    error_backoff_s: float = Field(
        30.0, ge=0, description="after a failure, the store is not asked for this long"
    )


class HttpSettings(_Section):
    enabled: bool = Field(True, description="serve /metrics, /healthz and /readyz")
    host: str = Field("127.0.0.1", description="loopback by default; 0.0.0.0 in a container")
    port: int = Field(9464, ge=0, le=65535, description="0: any free port")
    ready_max_lag_s: float = Field(600.0, gt=0, description="/readyz: lag above this is not ready")
    ready_langfuse_within_s: float = Field(
        300.0, gt=0, description="/readyz: Langfuse must have answered within this"
    )


class LimitsSettings(_Section):
    max_answer_chars: int = Field(200_000, ge=1, description="longer answers: skipped too_large")
    max_sources: int = Field(200, ge=1, description="more sources: skipped too_large")
    max_observations_per_trace: int = Field(
        5_000, ge=1, description="larger traces: skipped too_large"
    )
    max_trace_cpu_s: float = Field(
        10.0, gt=0, description="CPU one trace's mapping and signals may take; more: too_costly"
    )


class MetricsSettings(_Section):
    max_query_types: int = Field(20, ge=1, description="query_type label values; the rest: other")


class TelemetrySettings(_Section):
    judge_to_langfuse: bool = Field(
        False, description="also send the judge's LLM calls to Langfuse as generations"
    )


class FleetSettings(_Section):
    """A fleet of `observer run` on Redis Streams (docs/operating.md); absent: one daemon."""

    secret_env: str = Field(
        "REDIS_URL", min_length=1, description="the variable holding the Redis URL"
    )
    name: str = Field(
        "observer", min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$", description="key prefix"
    )
    lease_s: float = Field(15.0, ge=1, description="the reader's lease; a new reader within it")
    claim_idle_s: float = Field(60.0, gt=0, description="a dead member's entries claimed after")
    stream_maxlen: int = Field(
        100_000,
        ge=100,
        description="signal rows kept for the others; the reader stops at half as many pending",
    )
    max_deliveries: int = Field(
        5, ge=1, le=100, description="an entry failing this often goes to the dead stream"
    )

    @model_validator(mode="after")
    def _claim_after_lease(self) -> FleetSettings:
        if self.claim_idle_s < self.lease_s:
            raise ValueError(
                f"fleet.claim_idle_s: {self.claim_idle_s:g} is shorter than fleet.lease_s "
                f"({self.lease_s:g}): a live member's entries would be claimed"
            )
        return self


class LogSettings(_Section):
    format: Literal["auto", "json", "console"] = "auto"
    level: Literal["debug", "info", "warning", "error"] = "info"
    log_content: bool = Field(False, description="question and answer text in log events")


def resolve_hook(spec: str) -> Callable[[list[dict[str, Any]]], Any]:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"mapping.hook must be 'module:function', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise ValueError(f"mapping.hook: cannot import {module_name!r}: {error}") from None
    function = getattr(module, attribute, None)
    if not callable(function):
        raise ValueError(f"mapping.hook: {module_name!r} has no function {attribute!r}")
    return cast(Callable[[list[dict[str, Any]]], Any], function)
