"""The builders and `Parts`: every client built in one place, the pipeline wired."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from langfuse.api.client import LangfuseAPI

from observer import langfuse_api
from observer.alerts.delivery import Delivery
from observer.alerts.evaluator import AlertEvaluator
from observer.alerts.notifiers import Notifier, NotifyError
from observer.alerts.service import AlertService
from observer.config import ConfigError, Settings
from observer.judge.client import JudgeClient
from observer.judge.outcome import JudgeResult
from observer.judge.service import JudgedHook, JudgeService
from observer.model import RagRecord, Signals
from observer.pipeline import Pipeline
from observer.resolver.core import ResolverFindings
from observer.resolver.daemon import ResolverLookup
from observer.resolver.store import Fields
from observer.sinks import ScoreSink
from observer.sinks.dispatcher import Dispatcher
from observer.sinks.langfuse_scores import LangfuseScoreSink
from observer.sources import ObservationSource
from observer.sources.langfuse import LangfuseSource
from observer.sources.ratelimit import RateLimiter
from observer.state import State
from observer.summary import Summary
from observer.telemetry.http import Health, HttpServer
from observer.telemetry.metrics import Metrics
from observer.telemetry.otel import LangfuseOtlp, Telemetry, setup_telemetry


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
    return langfuse_api.build_api(
        lf.base_url,
        lf.public_key,
        lf.secret_key.get_secret_value(),
        settings.source.request_timeout_s,
    )


def build_judge_client(settings: Settings, telemetry: Telemetry | None = None) -> JudgeClient:
    """The judge's OpenAI-compatible client, built in one place; its calls are spans of
    `telemetry` (and generations in Langfuse with judge_to_langfuse)."""
    import openai

    j = settings.judge
    if not j.model:
        raise ConfigError("set the judge model: OBSERVER_JUDGE_MODEL or judge.model")
    key = j.api_key.get_secret_value() if j.api_key is not None else None
    if key is None:
        if not j.base_url:
            raise ConfigError(
                "set OPENAI_API_KEY (or OBSERVER_JUDGE_BASE_URL for a keyless endpoint)"
            )
        key = "none"  # local endpoints (vLLM, Ollama) often take no key
    client = openai.OpenAI(
        api_key=key, base_url=j.base_url or None, timeout=j.timeout_s, max_retries=0
    )
    return JudgeClient(
        client,
        j.model,
        max_retries=j.max_retries,
        max_tokens=j.max_tokens,
        price_prompt_per_1k=j.price_prompt_per_1k,
        price_completion_per_1k=j.price_completion_per_1k,
        langfuse=telemetry.judge_langfuse if telemetry else None,
        tracer=telemetry.tracer if telemetry else None,
    )


def build_notifiers(settings: Settings) -> dict[str, Notifier]:
    """Every configured notifier, its secret from the variable it names (ConfigError if unset)."""
    from observer.alerts.notifiers.alertmanager import AlertmanagerNotifier
    from observer.alerts.notifiers.pagerduty import PagerDutyNotifier
    from observer.alerts.notifiers.slack import SlackNotifier
    from observer.alerts.notifiers.webhook import WebhookNotifier

    built: dict[str, Notifier] = {}
    for n in settings.alerts.notifiers:
        secret = settings.notifier_secret(n)
        try:
            notifier: Notifier
            if n.kind == "alertmanager":
                notifier = AlertmanagerNotifier(n.name, n.url, secret=secret, timeout_s=n.timeout_s)
            elif n.kind == "pagerduty":
                assert secret is not None
                if n.url:
                    notifier = PagerDutyNotifier(n.name, secret, url=n.url, timeout_s=n.timeout_s)
                else:
                    notifier = PagerDutyNotifier(n.name, secret, timeout_s=n.timeout_s)
            elif n.kind == "slack":
                assert secret is not None
                notifier = SlackNotifier(n.name, secret, timeout_s=n.timeout_s)
            else:
                notifier = WebhookNotifier(n.name, n.url, secret=secret, timeout_s=n.timeout_s)
        except (ValueError, NotifyError) as error:
            raise ConfigError(f"alerts.notifiers[{n.name}]: {error}") from None
        built[n.name] = notifier
    return built


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
        limiter or RateLimiter(src.requests_per_minute),
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
    settings: Settings, state: State, metrics: Metrics, *, notify: bool = True
) -> AlertService:
    """The alert service; with `notify` false no notifier is built and nothing is sent."""
    notifiers = build_notifiers(settings) if notify else {}
    a = settings.alerts
    delivery = Delivery(notifiers, metrics) if notifiers else None
    return AlertService(
        state,
        metrics,
        a.window_rules(),
        a.trace_rule_list(),
        notifier_kinds={n.name: n.kind for n in a.notifiers} if notify else {},
        delivery=delivery,
        base_url=settings.langfuse.base_url,
        max_groups=a.max_groups,
        history_days=a.history_days,
    )


@dataclass
class Parts:
    """Everything one command needs, wired; a context manager that closes what
    `build()` opened (the state file, the chunk store's client, telemetry), last
    opened first, each once: `with app.build(settings) as parts: ...`."""

    settings: Settings
    state: State
    metrics: Metrics
    source: ObservationSource
    dispatcher: Dispatcher
    pipeline: Pipeline
    stop: threading.Event
    summary: Summary
    alerts: AlertService
    health: Health
    telemetry: Telemetry
    judge: JudgeService | None = None
    resolver: ResolverLookup | None = None
    evaluator: AlertEvaluator | None = None  # the window rules' thread (the daemon's)
    # "Now" for windows and the watermark: Langfuse's clock when reading Langfuse.
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # What build() opened, to close: `close()`, or leaving the `with` block.
    closing: ExitStack = field(default_factory=ExitStack, repr=False)
    # The chunk store's client, closed once (a Milvus Lite file is one process's at a time).
    close_resolver: Callable[[], None] = field(default=lambda: None, repr=False)

    def __enter__(self) -> Parts:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close what build() opened; again, nothing happens."""
        self.closing.close()

    def leave_open(self) -> None:
        """Close nothing of what build() opened (a thread abandoned at shutdown may still
        be using the state): `close()` does nothing afterwards."""
        self.closing.pop_all()


def build(
    settings: Settings,
    *,
    state_path: str | Path | None = None,
    source: ObservationSource | None = None,
    sink: ScoreSink | None = None,
    metrics: Metrics | None = None,
    stop: threading.Event | None = None,
    judge_client: JudgeClient | None = None,
    on_judged: JudgedHook | None = None,
    telemetry: Telemetry | None = None,
) -> Parts:
    """Wire the pipeline. Without `source`/`sink`, both talk to Langfuse.

    What it opens is closed when it raises (ConfigError, StateError), or when the
    returned Parts is closed. A `telemetry` passed in stays the caller's to shut down.
    """
    with ExitStack() as closing:
        parts = _build(
            closing,
            settings,
            state_path=state_path,
            source=source,
            sink=sink,
            metrics=metrics,
            stop=stop,
            judge_client=judge_client,
            on_judged=on_judged,
            telemetry=telemetry,
        )
        parts.closing = closing.pop_all()
    return parts


def _build(
    closing: ExitStack,
    settings: Settings,
    *,
    state_path: str | Path | None,
    source: ObservationSource | None,
    sink: ScoreSink | None,
    metrics: Metrics | None,
    stop: threading.Event | None,
    judge_client: JudgeClient | None,
    on_judged: JudgedHook | None,
    telemetry: Telemetry | None,
) -> Parts:
    metrics = metrics or Metrics(max_query_types=settings.metrics.max_query_types)
    stop = stop or threading.Event()
    state = State(state_path or settings.state.path, max_outbox=settings.sink.max_outbox)
    closing.callback(state.close)
    watermark = state.watermark()
    if watermark is not None:  # the lag is known from the start, not after the first pass
        metrics.set_watermark(watermark.timestamp())
    health = build_health(settings, state, metrics)
    resolver = build_resolver(settings, metrics)
    close_resolver = once(resolver.close if resolver is not None else lambda: None)
    closing.callback(close_resolver)
    if telemetry is None:
        telemetry = setup_telemetry(judge_to_langfuse=_judge_to_langfuse(settings))
        closing.callback(telemetry.shutdown, min(5.0, settings.run.shutdown_grace_s))
    alerts = build_alerts(settings, state, metrics)
    api: LangfuseAPI | None = None
    if source is None or sink is None:
        api = build_api(settings)
    rules = settings.mapping_rules()
    # Reads and score posts share one request budget, one bucket at Langfuse (docs/daemon.md).
    limiter = RateLimiter(settings.source.requests_per_minute)
    if source is None:
        assert api is not None
        source = build_source(
            settings,
            metrics,
            api=api,
            should_stop=_alive_while_waiting(health, stop),
            limiter=limiter,
        )
    if sink is None:
        assert api is not None
        sink = LangfuseScoreSink(api, limiter=limiter, score_configs=True, metrics=metrics)
    dispatcher = Dispatcher(
        state,
        sink,
        metrics,
        batch_size=settings.sink.batch_size,
        max_backoff_s=settings.sink.max_backoff_s,
        tracer=telemetry.tracer,
    )
    summary = Summary()
    judge: JudgeService | None = None
    if settings.judge.enabled:
        judge = JudgeService(
            judge_client or build_judge_client(settings, telemetry),
            state,
            metrics,
            settings.sampler_params(),
            notify=dispatcher.notify,
            concurrency=settings.judge.concurrency,
            queue_size=settings.judge.queue_size,
            on_judged=_both(alerts.judged, on_judged),
            signal_params=settings.signal_params(),
            tracer=telemetry.tracer,
        )

    disabled = metrics.judge_decisions.labels(decision="disabled")

    def on_scored(record: RagRecord, signals: Signals, findings: ResolverFindings | None) -> None:
        alerts.scored(record, signals)
        if judge is None:
            disabled.inc()

    pipeline = Pipeline(
        source,
        state,
        metrics,
        settings.signal_params(),
        rules,
        notify=dispatcher.notify,
        settle_s=settings.source.settle_s,
        overlap_s=settings.source.overlap_s,
        sweep_interval_s=settings.source.sweep_interval_s,
        lookback_s=settings.source.lookback_s,
        on_scored=on_scored,
        on_signals=lambda _record, signals: summary.add(signals),
        lookup=resolver,
        should_stop=_beating(health, stop),
        judge=judge,
        tracer=telemetry.tracer,
    )
    parts = Parts(
        settings,
        state,
        metrics,
        source,
        dispatcher,
        pipeline,
        stop,
        summary,
        alerts,
        health,
        telemetry,
        judge,
        resolver,
    )
    parts.close_resolver = close_resolver
    if isinstance(source, LangfuseSource):
        server = source.clock
        parts.clock = source.now
        metrics.set_watermark(
            watermark.timestamp() if watermark is not None else None,
            clock=lambda: server.now().timestamp(),
        )
    return parts


def once(close: Callable[[], object]) -> Callable[[], None]:
    """`close`, called at most once however often the result is."""
    done = threading.Event()

    def close_once() -> None:
        if not done.is_set():
            done.set()
            close()

    return close_once


def _judge_to_langfuse(settings: Settings) -> LangfuseOtlp | None:
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


def _alive_while_waiting(health: Health, stop: threading.Event) -> Callable[[], bool]:
    """The source asks whether to stop while it waits out a 429 or a backoff: the loop
    is alive (not wedged), so /healthz must not have the process restarted for it."""

    def should_stop() -> bool:
        health.beat()
        return stop.is_set()

    return should_stop


def _beating(health: Health, stop: threading.Event) -> Callable[[], bool]:
    """The pipeline asks whether to stop once per page it read: a heartbeat for /healthz,
    and proof for /readyz that Langfuse answers, also during a pass of many pages."""

    def should_stop() -> bool:
        health.beat()
        health.langfuse_answered()
        return stop.is_set()

    return should_stop


def build_health(settings: Settings, state: State, metrics: Metrics) -> Health:
    return Health(
        stale_after_s=max(60.0, 3 * settings.source.poll_interval_s),
        langfuse_within_s=max(
            settings.http.ready_langfuse_within_s, 2 * settings.source.poll_interval_s
        ),
        max_lag_s=settings.http.ready_max_lag_s,
        lag_s=lambda: metrics.value("observer_watermark_lag_seconds"),
        outbox=state.outbox_size,
        max_outbox=settings.sink.max_outbox,
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


def _both(first: JudgedHook, second: JudgedHook | None) -> JudgedHook:
    if second is None:
        return first

    def hook(record: RagRecord, result: JudgeResult) -> None:
        first(record, result)
        second(record, result)

    return hook


def now_utc() -> datetime:
    return datetime.now(UTC)
