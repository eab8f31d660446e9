"""Configuration: every section's model, validated at start.

Precedence, highest first: `OBSERVER_*` variables (nested keys joined with
`__`, e.g. `OBSERVER_CRAG__HIGH=0.7`; lists as JSON or comma-separated), the
Langfuse SDK's own `LANGFUSE_*` variables, the TOML file given with `--config`
(or `OBSERVER_CONFIG`), the defaults of docs/signals.md. The file and the
variables are read by `observer.config.sources`, the only reader of both;
everything is validated here at start, and a bad value is a `ConfigError` that
names the key and the variable that set it; an `OBSERVER_*` variable observer does
not read is one too. Secrets are read from the environment only and never printed.
`Settings()` is the defaults alone; `load_settings` reads the file and the
environment.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from observer.config.keys import shown_key, swapped_keys
from observer.config.otlp import OtlpSettings
from observer.config.signals import BandSettings, CragSettings, SignalsSettings, signal_params
from observer.config.signals import Section as _Section
from observer.config.sources import (
    CONFIG_ENV,
    SECRET_KEYS,
    SECRET_VARIABLES,
    describe,
    read_secret_file,
    read_sources,
)
from observer.errors import ConfigError
from observer.urls import without_credentials

if TYPE_CHECKING:  # loaded where used: `config show` needs the models, not the rules' engine
    from observer.alerts.regression import RegressionRule
    from observer.alerts.rules import Route, TraceRule, WindowRule
    from observer.judge.sampler import SamplerParams
    from observer.mapping.rules import MappingRules
    from observer.signals.params import SignalParams

__all__ = [
    "CONFIG_ENV",
    "SECRET_KEYS",
    "SECRET_VARIABLES",
    "BandSettings",
    "ConfigError",
    "CragSettings",
    "Settings",
    "SignalsSettings",
    "load_settings",
    "masked",
    "read_secret_file",
]


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
            _resolve_hook(self.hook)
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


class WindowRuleSettings(_Section):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(min_length=1)
    signal: str = Field(description="a signal, or '<signal> <op> <value>' (a flag)")
    aggregate: str = "mean"
    op: str = ">"
    threshold: float = Field(allow_inf_nan=False)
    warn_threshold: float | None = Field(None, allow_inf_nan=False)
    window: str = "15m"
    min_samples: int = 1
    for_: str = Field("0s", alias="for")
    repeat: str = "4h"
    no_data: str = "keep"
    no_data_for: str = "30m"
    group_by: list[str] = Field(default_factory=lambda: ["environment", "query_type"])
    where: dict[str, str] = Field(default_factory=dict)
    notify: list[str] = Field(default_factory=list, description="notifier names (empty: all)")
    runbook_url: str = ""


class TraceRuleSettings(_Section):
    name: str = Field(min_length=1)
    when: str = Field(description="a flag, or '<signal> <op> <value>'")
    where: dict[str, str] = Field(default_factory=dict)
    max_per_hour: int = 20
    notify: list[str] = Field(default_factory=list, description="notifier names (empty: all)")
    runbook_url: str = ""


class RouteSettings(_Section):
    layer: Literal["retrieval", "generation", "index", "abstention", "judge", "pipeline"] = Field(
        description="the layer a firing alert's triage blames (judge: the judge's own health; "
        "pipeline: observer's own samples)"
    )
    notify: list[str] = Field(min_length=1, description="notifier names, instead of the rule's")
    rules: list[str] = Field(default_factory=list, description="only these rules (empty: all)")


class NotifierSettings(_Section):
    name: str = Field(min_length=1)
    kind: Literal["alertmanager", "pagerduty", "slack", "webhook"]
    url: str = ""
    secret_env: str = Field("", description="the variable holding the key, URL or secret")
    timeout_s: float = Field(10.0, gt=0)
    channel: str = Field(
        "",
        description="slack: the channel ID to post to with a bot token (chat.postMessage: "
        "an incident's messages in one thread); empty: secret_env holds an incoming webhook",
    )


class AlertsSettings(_Section):
    defaults: bool = Field(True, description="the default rules apply when none is configured")
    history_days: float = Field(8.0, gt=0)
    max_groups: int = Field(50, ge=1, description="alert groups per rule at most")
    correlation_window_s: float = Field(
        900.0,
        ge=0,
        description="alerts of one cause firing within this many seconds of each other are "
        "one incident; 0: every alert is an incident of its own",
    )
    rules: list[WindowRuleSettings] = Field(default_factory=list)
    trace_rules: list[TraceRuleSettings] = Field(default_factory=list)
    notifiers: list[NotifierSettings] = Field(default_factory=list)
    routes: list[RouteSettings] = Field(
        default_factory=list, description="firing alerts by the layer to blame, first match"
    )

    @model_validator(mode="after")
    def _rules_fit(self) -> AlertsSettings:
        self.window_rules()
        self.trace_rule_list()
        names = [n.name for n in self.notifiers]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"alerts.notifiers: the name {name!r} is used twice")
        for notifier in self.notifiers:
            where = f"alerts.notifiers[{notifier.name}]"
            if notifier.kind in ("alertmanager", "webhook") and not notifier.url:
                raise ValueError(f"{where}.url: a {notifier.kind} notifier needs a url")
            if notifier.kind in ("pagerduty", "slack") and not notifier.secret_env:
                what = {"pagerduty": "routing key", "slack": "webhook URL"}[notifier.kind]
                if notifier.channel:
                    what = "bot token"
                raise ValueError(
                    f"{where}.secret_env: name the environment variable holding the {what}"
                )
            if notifier.channel and notifier.kind != "slack":
                raise ValueError(f"{where}.channel: only a slack notifier posts to a channel")
        targets = [("rules", r.name, r.notify) for r in self.rules]
        targets += [("trace_rules", r.name, r.notify) for r in self.trace_rules]
        rule_names = [name for _, name, _ in targets]
        for kind, rule, notify in targets:
            if rule_names.count(rule) > 1:
                raise ValueError(f"alerts.{kind}[{rule}]: the name is used twice")
            for target in notify:
                if target not in names:
                    raise ValueError(
                        f"alerts.{kind}[{rule}].notify: no notifier named {target!r} "
                        f"(configured: {', '.join(names) or 'none'})"
                    )
        self._routes_fit(names)
        return self

    def _routes_fit(self, names: list[str]) -> None:
        """Each route names configured notifiers and known window rules."""
        known_rules = {r.name for r in self.window_rules()}
        for i, route in enumerate(self.routes):
            where = f"alerts.routes[{i}]"
            for target in route.notify:
                if target not in names:
                    raise ValueError(
                        f"{where}.notify: no notifier named {target!r} "
                        f"(configured: {', '.join(names) or 'none'})"
                    )
            for rule in route.rules:
                if rule not in known_rules:
                    raise ValueError(
                        f"{where}.rules: no window rule named {rule!r} "
                        f"(known: {', '.join(sorted(known_rules)) or 'none'})"
                    )

    def regression_rules(self) -> tuple[RegressionRule, ...]:
        """The release-regression rule: a default, off with `defaults = false`."""
        from observer.alerts.regression import default_regression_rules

        return default_regression_rules() if self.defaults else ()

    def route_list(self) -> tuple[Route, ...]:
        from observer.alerts.rules import Route

        return tuple(Route(r.layer, tuple(r.notify), tuple(r.rules)) for r in self.routes)

    def window_rules(self) -> tuple[WindowRule, ...]:
        """The configured window rules, or the defaults when there are none."""
        from observer.alerts.rules import default_window_rules

        if not self.rules:
            return default_window_rules() if self.defaults else ()
        return tuple(_window_rule(r) for r in self.rules)

    def trace_rule_list(self) -> tuple[TraceRule, ...]:
        from observer.alerts.rules import (
            TraceRule,
            check_trace_rule,
            default_trace_rules,
            parse_expression,
        )

        if not self.trace_rules:
            return default_trace_rules() if self.defaults else ()
        return tuple(
            check_trace_rule(
                TraceRule(
                    name=r.name,
                    expression=parse_expression(r.when, f"alerts.trace_rules[{r.name}].when"),
                    where=tuple(sorted(r.where.items())),
                    max_per_hour=r.max_per_hour,
                    notify=tuple(r.notify),
                    runbook_url=r.runbook_url or None,
                )
            )
            for r in self.trace_rules
        )


def _duration_s(text: str, where: str) -> float:
    from observer.alerts.rules import RuleError
    from observer.times import parse_duration

    try:
        return parse_duration(text).total_seconds()
    except ValueError as error:
        raise RuleError(f"{where}: {error}") from None


def _window_rule(r: WindowRuleSettings) -> WindowRule:
    from observer.alerts.rules import WindowRule, check_window_rule, parse_expression

    where = f"alerts.rules[{r.name}]"
    return check_window_rule(
        WindowRule(
            name=r.name,
            expression=parse_expression(r.signal, f"{where}.signal"),
            aggregate=r.aggregate,
            op=r.op,
            threshold=r.threshold,
            warn_threshold=r.warn_threshold,
            window_s=_duration_s(r.window, f"{where}.window"),
            min_samples=r.min_samples,
            for_s=_duration_s(r.for_, f"{where}.for"),
            repeat_s=_duration_s(r.repeat, f"{where}.repeat"),
            no_data=r.no_data,
            no_data_for_s=_duration_s(r.no_data_for, f"{where}.no_data_for"),
            group_by=tuple(r.group_by),
            where=tuple(sorted(r.where.items())),
            notify=tuple(r.notify),
            runbook_url=r.runbook_url or None,
        )
    )


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


def _resolve_hook(spec: str) -> Callable[[list[dict[str, Any]]], Any]:
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


def _named_secret(name: str, where: str) -> str | None:
    """The value of the variable a `secret_env` key names, or of the file `<name>_FILE` names;
    None when the key is empty, a ConfigError naming the key when the variable is unset."""
    if not name:
        return None
    value = os.environ.get(name) or read_secret_file(name, os.environ)
    if not value:
        raise ConfigError(f"{where}: the environment variable {name} is not set")
    return value


class Settings(BaseModel):
    """The effective configuration of observer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signals: SignalsSettings = SignalsSettings()
    crag: CragSettings = CragSettings()
    band: BandSettings = BandSettings()
    langfuse: LangfuseSettings = LangfuseSettings()
    source: SourceSettings = SourceSettings()
    sink: SinkSettings = SinkSettings()
    state: StateSettings = StateSettings()
    run: RunSettings = RunSettings()
    mapping: MappingSettings = MappingSettings()
    judge: JudgeSettings = JudgeSettings()
    alerts: AlertsSettings = AlertsSettings()
    limits: LimitsSettings = LimitsSettings()
    resolver: ResolverSettings = ResolverSettings()
    http: HttpSettings = HttpSettings()
    metrics: MetricsSettings = MetricsSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    log: LogSettings = LogSettings()
    fleet: FleetSettings | None = None  # [fleet]: join a fleet (docs/operating.md)
    otlp: OtlpSettings = OtlpSettings()  # the event path's receiver (docs/daemon.md)

    def signal_params(self) -> SignalParams:
        return signal_params(self.signals, self.crag, self.band)

    def sampler_params(self) -> SamplerParams:
        from observer.judge.sampler import SamplerParams

        j = self.judge
        return SamplerParams(
            enabled=j.enabled,
            rate=j.rate,
            risk_oversampling=j.risk_oversampling,
            risk_rate=j.risk_rate,
            max_judged_per_hour=j.max_judged_per_hour,
            # The canary's share is kept ahead: traces never take it (docs/judge.md#a-canary).
            max_tokens_per_day=j.max_tokens_per_day - j.canary_tokens,
        )

    def notifier_secret(self, notifier: NotifierSettings) -> str | None:
        """The secret a notifier names, from its variable (or a file named by `<VAR>_FILE`)."""
        where = f"alerts.notifiers[{notifier.name}].secret_env"
        return _named_secret(notifier.secret_env, where)

    def resolver_secret(self) -> str | None:
        """The value of the variable `resolver.secret_env` names (or its `_FILE`)."""
        return _named_secret(self.resolver.secret_env, "resolver.secret_env")

    def otlp_token(self) -> str | None:
        """The bearer token from the variable `otlp.secret_env` names (or its `_FILE`)."""
        return _named_secret(self.otlp.secret_env, "otlp.secret_env")

    def fleet_url(self) -> str:
        """The Redis URL from the variable `fleet.secret_env` names (or its `_FILE`).

        A ConfigError naming the variable (never its value, which may hold a password)
        when it is unset or not a redis://, rediss:// or unix:// URL."""
        assert self.fleet is not None
        variable = self.fleet.secret_env
        url = _named_secret(variable, "fleet.secret_env")
        assert url is not None
        try:
            scheme = urlsplit(url).scheme
        except ValueError:
            scheme = ""
        if scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(
                f"fleet.secret_env: {variable} must hold a redis://, rediss:// or unix:// URL"
            )
        return url

    def mapping_rules(self) -> MappingRules:
        from observer.mapping.rules import MappingRules

        m = self.mapping
        return MappingRules(
            generation_types=tuple(m.generation_types),
            generation_names=tuple(m.generation_names),
            retriever_types=tuple(m.retriever_types),
            retriever_names=tuple(m.retriever_names),
            question_keys=tuple(m.question_keys),
            answer_keys=tuple(m.answer_keys),
            sources_keys=tuple(m.sources_keys),
            text_keys=tuple(m.text_keys),
            chunk_id_keys=tuple(m.chunk_id_keys),
            score_keys=tuple(m.score_keys),
            verify_sources=m.verify_sources,
            environments=tuple(self.source.environments),
            trace_names=tuple(self.source.trace_names),
            tags=tuple(self.source.tags),
            hook=_resolve_hook(m.hook) if m.hook else None,
            max_answer_chars=self.limits.max_answer_chars,
            max_sources=self.limits.max_sources,
            max_observations=self.limits.max_observations_per_trace,
        )


def load_settings(config_path: str | Path | None = None) -> Settings:
    """Read the config file (if any) and the environment; validate everything."""
    sources = read_sources(Settings, config_path)
    try:
        settings = Settings(**sources.merged)
    except ValidationError as error:
        raise ConfigError(describe(sources, error)) from None
    if sources.unknown:
        raise ConfigError(describe(sources))
    return settings


# The URLs `config show` prints, shown without the credentials a URL can carry.
URL_KEYS = (("langfuse", "base_url"), ("judge", "base_url"), ("resolver", "uri"))


def masked(settings: Settings) -> dict[str, Any]:
    """The effective configuration as plain data, secrets masked, unset keys left out."""
    data = settings.model_dump(mode="python", exclude_none=True, by_alias=True)
    for section, key in SECRET_KEYS:
        if key in data.get(section, {}):
            data[section][key] = "********"
    if "public_key" in data.get("langfuse", {}):
        data["langfuse"]["public_key"] = shown_key(data["langfuse"]["public_key"])
    for section, key in URL_KEYS:  # a URL's password, a token in its query
        if data.get(section, {}).get(key):
            data[section][key] = without_credentials(data[section][key])
    for notifier in data.get("alerts", {}).get("notifiers", []):
        if notifier.get("url"):
            notifier["url"] = without_credentials(notifier["url"])
    return data
