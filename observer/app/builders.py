"""The builders: every client and part built in one place, from the settings.

`observer.app.parts` wires them into `Parts`; `check`, `explain`, `discover` and the
alert commands call the one each needs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import structlog
from langfuse.api.client import LangfuseAPI

from observer import USER_AGENT, langfuse_api
from observer.alerts.delivery import Delivery
from observer.alerts.notifiers import Notifier, NotifyError
from observer.alerts.service import AlertService, Options, RuleSet, SharedTraceRules
from observer.config import ConfigError, Settings
from observer.health import Health
from observer.judge.client import JudgeClient, judge_http_client
from observer.judge.outcome import JudgeResult
from observer.judge.service import JudgedHook
from observer.model import RagRecord
from observer.resolver.daemon import ResolverLookup
from observer.resolver.store import Fields
from observer.sources.langfuse import LangfuseSource
from observer.sources.ratelimit import RateLimiter
from observer.state import State
from observer.telemetry.http import HttpServer
from observer.telemetry.metrics import Metrics
from observer.telemetry.otel import LangfuseOtlp, Telemetry
from observer.urls import without_credentials

if TYPE_CHECKING:
    from collections.abc import Callable

    import openai

log = structlog.get_logger("observer.app")


def build_api(settings: Settings) -> LangfuseAPI:
    lf = settings.langfuse
    missing = [
        name
        for name, value in (
            ("LANGFUSE_PUBLIC_KEY", lf.public_key),
            ("LANGFUSE_SECRET_KEY", lf.secret_key),
        )
        if not value
    ]
    if missing:
        raise ConfigError(f"set {' and '.join(missing)} in the environment to read from Langfuse")
    assert lf.public_key is not None and lf.secret_key is not None
    src = settings.source
    return langfuse_api.build_api(
        lf.base_url,
        lf.public_key,
        lf.secret_key.get_secret_value(),
        src.request_timeout_s,
        max_response_bytes=int(src.max_response_mb * 1024 * 1024),
        deadline_s=src.request_deadline_s,
    )


def _judge_key(settings: Settings) -> str | None:
    key = settings.judge.api_key
    return key.get_secret_value() if key is not None else None


def build_openai(settings: Settings) -> openai.OpenAI:
    """The OpenAI-compatible client of the judge's endpoint, built in one place."""
    import openai

    j = settings.judge
    if not j.model:
        raise ConfigError("set the judge model: OBSERVER_JUDGE_MODEL or judge.model")
    key = _judge_key(settings)
    if key is None:
        if not j.base_url:
            raise ConfigError(
                "set OPENAI_API_KEY (or OBSERVER_JUDGE_BASE_URL for a keyless endpoint)"
            )
        key = "none"  # local endpoints (vLLM, Ollama) often take no key
    return openai.OpenAI(
        api_key=key,
        base_url=j.base_url or None,
        timeout=j.timeout_s,
        max_retries=0,
        default_headers={"User-Agent": USER_AGENT},
        http_client=judge_http_client(j.timeout_s),
    )


def build_judge_client(settings: Settings, telemetry: Telemetry | None = None) -> JudgeClient:
    """The judge's OpenAI-compatible client, built in one place; its calls are spans of
    `telemetry` (and generations in Langfuse with judge_to_langfuse)."""
    j = settings.judge
    return JudgeClient(
        build_openai(settings),
        j.model,
        max_retries=j.max_retries,
        max_tokens=j.max_tokens,
        price_prompt_per_1k=j.price_prompt_per_1k,
        price_completion_per_1k=j.price_completion_per_1k,
        langfuse=telemetry.judge_langfuse if telemetry else None,
        tracer=telemetry.tracer if telemetry else None,
        refusal_phrases=settings.signal_params().refusal_phrases,
        # The key is never said in an error text (an endpoint may echo it back).
        redacted=tuple(k for k in (_judge_key(settings),) if k),
    )


def build_notifiers(settings: Settings, only: str | None = None) -> dict[str, Notifier]:
    """Every configured notifier (or only the one named), its secret from the variable it
    names (ConfigError if unset): a notifier not built needs no secret."""
    from observer.alerts.notifiers.alertmanager import AlertmanagerNotifier
    from observer.alerts.notifiers.pagerduty import DEFAULT_URL as PAGERDUTY_EVENTS_URL
    from observer.alerts.notifiers.pagerduty import PagerDutyNotifier
    from observer.alerts.notifiers.slack import SlackNotifier
    from observer.alerts.notifiers.webhook import WebhookNotifier

    built: dict[str, Notifier] = {}
    for n in settings.alerts.notifiers:
        if only is not None and n.name != only:
            continue
        secret = settings.notifier_secret(n)
        try:
            notifier: Notifier
            if n.kind == "alertmanager":
                notifier = AlertmanagerNotifier(n.name, n.url, secret=secret, timeout_s=n.timeout_s)
            elif n.kind == "pagerduty":
                assert secret is not None
                url = n.url or PAGERDUTY_EVENTS_URL
                notifier = PagerDutyNotifier(n.name, secret, url=url, timeout_s=n.timeout_s)
            elif n.kind == "slack":
                assert secret is not None
                notifier = SlackNotifier(
                    n.name, secret, timeout_s=n.timeout_s, channel=n.channel, url=n.url or None
                )
            else:
                notifier = WebhookNotifier(n.name, n.url, secret=secret, timeout_s=n.timeout_s)
        except (ValueError, NotifyError) as error:
            raise ConfigError(f"alerts.notifiers[{n.name}]: {error}") from None
        built[n.name] = notifier
    return built


def build_budget(settings: Settings, metrics: Metrics) -> RateLimiter:
    """The process's one request budget for Langfuse (reads and score posts): adaptive
    from 25 a minute, capped by `source.requests_per_minute` when set; its pace is the
    gauge `observer_request_budget_per_minute`, its settling logged once."""

    def settled(limit: float | None, pace: float) -> None:
        log.info(
            "request_budget_settled",
            limit=limit,
            pace=round(pace, 1),
            reason="429 with X-RateLimit-Limit" if limit is not None else "429 without a limit",
        )

    budget = RateLimiter(settings.source.requests_per_minute, on_settled=settled)
    metrics.request_budget.set_function(lambda: budget.per_minute)
    return budget


def build_source(
    settings: Settings,
    metrics: Metrics,
    *,
    api: LangfuseAPI | None = None,
    max_attempts: int | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    limiter: RateLimiter | None = None,
) -> LangfuseSource:
    """Langfuse's observations as configured (rate, pages, environments, metadata)."""
    src = settings.source
    return LangfuseSource(
        api or build_api(settings),
        limiter or build_budget(settings, metrics),
        metrics,
        page_limit=src.page_limit,
        environments=src.environments,
        expand_metadata=settings.mapping_rules().metadata_keys,
        max_attempts=src.max_attempts if max_attempts is None else max_attempts,
        should_stop=should_stop,
    )


def resolver_fields(settings: Settings) -> Fields:
    r = settings.resolver
    return Fields(r.id_field, r.hash_field, r.text_field, r.doc_field, r.updated_field)


def build_resolver(settings: Settings, metrics: Metrics) -> ResolverLookup | None:
    """The citation resolver over the configured chunk store, or None when it is off."""
    r = settings.resolver
    if not r.kind:
        return None
    from observer.resolver import Resolver
    from observer.resolver.backends import build_store

    try:
        store = build_store(
            r.kind,
            uri=r.uri,
            collection=r.collection,
            secret=settings.resolver_secret(),
            hook=r.hook,
            fields=resolver_fields(settings),
            timeout_s=r.timeout_s,
            max_ids_per_query=r.max_ids_per_query,
        )
    except ValueError as error:
        raise ConfigError(f"resolver: {error}") from None
    resolver = Resolver(
        store,
        cache_ttl_s=r.cache_ttl_s,
        batch_size=r.max_ids_per_query,
        error_backoff_s=r.error_backoff_s,
    )
    return ResolverLookup(resolver, metrics)


def build_alerts(
    settings: Settings,
    state: State,
    metrics: Metrics,
    *,
    notify: bool = True,
    shared: SharedTraceRules | None = None,
) -> AlertService:
    """The alert service; with `notify` false no notifier is built and nothing is sent."""
    notifiers = build_notifiers(settings) if notify else {}
    a = settings.alerts
    delivery = Delivery(notifiers, metrics, state.alerts) if notifiers else None
    return AlertService(
        state,
        metrics,
        RuleSet(a.window_rules(), a.trace_rule_list(), a.regression_rules(), a.route_list()),
        delivery=delivery,
        notifiers={n.name: n.kind for n in a.notifiers} if notify else {},
        options=Options(
            base_url=without_credentials(settings.langfuse.base_url),  # links people follow
            max_groups=a.max_groups,
            history_days=a.history_days,
            correlation_window_s=a.correlation_window_s,
        ),
        shared=shared,
    )


def build_health(settings: Settings, state: State, metrics: Metrics) -> Health:
    # The OTLP receiver alone reads nothing: no watermark lag, no Langfuse reads to wait for.
    alone = settings.otlp.alone
    return Health(
        stale_after_s=max(60.0, 3 * settings.source.poll_interval_s),
        langfuse_within_s=max(
            settings.http.ready_langfuse_within_s, 2 * settings.source.poll_interval_s
        ),
        max_lag_s=settings.http.ready_max_lag_s,
        lag_s=(lambda: 0.0) if alone else lambda: metrics.value("observer_watermark_lag_seconds"),
        outbox=state.outbox_size,
        max_outbox=settings.sink.max_outbox,
        langfuse_not_used="not read: otlp.poller = off" if alone else None,
        # A fleet's members read by turns, and the receiver alone reads nothing: only a
        # lone daemon that polls must complete passes itself.
        pass_within_s=None
        if settings.fleet is not None or alone
        else max(settings.http.ready_langfuse_within_s, 3 * settings.source.poll_interval_s),
    )


def start_http(settings: Settings, metrics: Metrics, health: Health) -> HttpServer | None:
    """The /metrics, /healthz, /readyz port, or None when switched off."""
    if not settings.http.enabled:
        return None
    host, port = settings.http.host, settings.http.port
    try:
        return HttpServer(host, port, metrics.registry, health).start()
    except OSError as error:
        raise ConfigError(
            f"http: cannot listen on {host}:{port} ({error.strerror}); "
            "set http.port (OBSERVER_HTTP_PORT) to a free port"
        ) from None


def judge_to_langfuse(settings: Settings) -> LangfuseOtlp | None:
    """Where the judge's own calls go as generations, when telemetry.judge_to_langfuse."""
    lf = settings.langfuse
    if not (settings.judge.enabled and settings.telemetry.judge_to_langfuse):
        return None
    if not lf.public_key or lf.secret_key is None:
        raise ConfigError(
            "telemetry.judge_to_langfuse needs LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY"
        )
    return LangfuseOtlp(
        lf.base_url,
        lf.public_key,
        lf.secret_key.get_secret_value(),
        settings.source.request_timeout_s,
    )


def both_hooks(first: JudgedHook, second: JudgedHook | None) -> JudgedHook:
    if second is None:
        return first

    def hook(record: RagRecord, result: JudgeResult) -> None:
        first(record, result)
        second(record, result)

    return hook


def now_utc() -> datetime:
    return datetime.now(UTC)
