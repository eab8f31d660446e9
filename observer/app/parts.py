"""The builders and `Parts`: every client built in one place, the pipeline wired."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import redis
import structlog
from langfuse.api.client import LangfuseAPI

from observer import USER_AGENT, background, langfuse_api
from observer.alerts.delivery import Delivery
from observer.alerts.evaluator import AlertEvaluator
from observer.alerts.notifiers import Notifier, NotifyError
from observer.alerts.service import AlertService, Options, RuleSet, SharedTraceRules
from observer.app import event_path
from observer.app.contact import ready
from observer.app.event_path import EventPath
from observer.app.passes import Passes
from observer.config import ConfigError, Settings
from observer.fleet.alerts import Evaluation, FleetAlerts, publish_row
from observer.fleet.budget import FleetBudget, provisional_s
from observer.fleet.keys import Keys
from observer.fleet.lease import Lease
from observer.fleet.member import Crew, Member
from observer.fleet.reader import FleetMarks, StreamPublisher
from observer.fleet.stream import TraceStream
from observer.fleet.worker import Worker
from observer.judge.client import JudgeClient, judge_http_client
from observer.judge.outcome import JudgeResult
from observer.judge.service import JudgedHook, JudgeService
from observer.model import RagRecord, Signals
from observer.pipeline import Marks, Pipeline
from observer.resolver.daemon import ResolverLookup
from observer.resolver.store import Fields
from observer.signals.summary import Summary
from observer.sinks import ScoreSink
from observer.sinks.dispatcher import Dispatcher
from observer.sinks.langfuse_scores import LangfuseScoreSink
from observer.sources import ObservationSource
from observer.sources.langfuse import LangfuseSource
from observer.sources.ratelimit import RateLimiter
from observer.state import State
from observer.state.rows import Row
from observer.telemetry.http import Health, HttpServer
from observer.telemetry.metrics import Metrics
from observer.telemetry.otel import LangfuseOtlp, Telemetry, setup_telemetry
from observer.urls import without_credentials

if TYPE_CHECKING:
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
    key = j.api_key.get_secret_value() if j.api_key is not None else None
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
                if n.url:
                    notifier = PagerDutyNotifier(n.name, secret, url=n.url, timeout_s=n.timeout_s)
                else:
                    notifier = PagerDutyNotifier(n.name, secret, timeout_s=n.timeout_s)
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
    evaluator: AlertEvaluator  # the window rules' thread (a one-shot run works it in burst)
    passes: Passes  # the one pass driver: `run`, `run --once` and a fleet's reader
    judge: JudgeService | None = None
    resolver: ResolverLookup | None = None
    member: Member | None = None  # mode "member": this process's part of the fleet
    # "Now" for windows and the watermark: Langfuse's clock when reading Langfuse.
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # What build() opened, to close: `close()`, or leaving the `with` block.
    closing: ExitStack = field(default_factory=ExitStack, repr=False)
    # The chunk store's client, closed once (a Milvus Lite file is one process's at a time).
    close_resolver: Callable[[], None] = field(default=lambda: None, repr=False)
    # The request budget reads and score posts share (None: no Langfuse client built).
    budget: RateLimiter | None = None
    # The judge's own health looked at on a schedule: its agreement with people (with
    # judge.human_score set), its canary (with judge.canary_file set).
    judge_checks: tuple[background.Worker, ...] = ()
    # The event path's receiver (`[otlp]`, docs/daemon.md#the-event-path), in the daemon.
    receiver: EventPath | None = None

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


Mode = Literal["solo", "once", "member"]


def build(
    settings: Settings,
    *,
    mode: Mode = "once",
    state_path: str | Path | None = None,
    source: ObservationSource | None = None,
    sink: ScoreSink | None = None,
    metrics: Metrics | None = None,
    stop: threading.Event | None = None,
    judge_client: JudgeClient | None = None,
    on_judged: JudgedHook | None = None,
    telemetry: Telemetry | None = None,
    redis_client: redis.Redis | None = None,
    member_name: str | None = None,
) -> Parts:
    """Wire every part for `mode`: "solo" (the daemon alone), "once" (`run --once`,
    backfill, the demo) or "member" (the daemon as a member of the `[fleet]`, its reader,
    worker and shared alerts and budget included). Without `source`/`sink`, both talk to
    Langfuse. Every part gets what it works with at construction; nothing is assigned
    into a part after.

    What it opens is closed when it raises (ConfigError, StateError, FleetUnreachable),
    or when the returned Parts is closed. A `telemetry` passed in stays the caller's to
    shut down. Mode "member" connects to the fleet's Redis (or uses `redis_client`).
    """
    if mode != "once":  # the receiver runs in the daemon only; a one-shot reads as configured
        event_path.check(settings)
        settings = event_path.with_backstop(settings)
    with ExitStack() as closing:
        parts = _build(
            closing,
            settings,
            mode=mode,
            state_path=state_path,
            source=source,
            sink=sink,
            metrics=metrics,
            stop=stop,
            judge_client=judge_client,
            on_judged=on_judged,
            telemetry=telemetry,
            redis_client=redis_client,
            member_name=member_name,
        )
        parts.closing = closing.pop_all()
    return parts


@dataclass
class _Fleet:
    """The fleet's pieces that come before the state file and the pipeline."""

    client: redis.Redis
    keys: Keys
    name: str
    lease: Lease
    stream: TraceStream
    budget: FleetBudget


def _fleet(
    closing: ExitStack,
    settings: Settings,
    state_path: str | Path,
    client: redis.Redis | None,
    name: str | None,
) -> _Fleet:
    from observer.fleet.connect import connect
    from observer.fleet.member import member_name

    fleet = settings.fleet
    if fleet is None:
        raise ConfigError("mode member needs a [fleet] section (fleet.redis_url)")
    client = client or connect(settings)
    closing.callback(client.close)
    if name is None:
        probe = State(state_path)  # the name this state file's member had before, or a new one
        try:
            name = member_name(probe)
        finally:
            probe.close()
    keys = Keys(fleet.name)
    return _Fleet(
        client,
        keys,
        name,
        Lease(client, keys, name, fleet.lease_s),
        TraceStream(client, keys, maxlen=fleet.stream_maxlen),
        FleetBudget(client, keys, provisional_s=provisional_s(fleet.claim_idle_s)),
    )


def _build(
    closing: ExitStack,
    settings: Settings,
    *,
    mode: Mode,
    state_path: str | Path | None,
    source: ObservationSource | None,
    sink: ScoreSink | None,
    metrics: Metrics | None,
    stop: threading.Event | None,
    judge_client: JudgeClient | None,
    on_judged: JudgedHook | None,
    telemetry: Telemetry | None,
    redis_client: redis.Redis | None,
    member_name: str | None,
) -> Parts:
    metrics = metrics or Metrics(max_query_types=settings.metrics.max_query_types)
    stop = stop or threading.Event()
    path = state_path or settings.state.path
    fleet = _fleet(closing, settings, path, redis_client, member_name) if mode == "member" else None
    on_row = None
    if fleet is not None:
        assert settings.fleet is not None
        on_row = functools.partial(
            publish_row, fleet.client, fleet.keys, fleet.name, settings.fleet.stream_maxlen
        )
    state = State(path, max_outbox=settings.sink.max_outbox, on_row=on_row)
    closing.callback(state.close)
    state.hold()  # one process on a state file: a second one stops here, naming the first
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
    fleet_alerts: FleetAlerts | None = None
    if fleet is not None:
        assert settings.fleet is not None
        fleet_alerts = FleetAlerts(
            fleet.client,
            fleet.keys,
            state,
            fleet.name,
            maxlen=settings.fleet.stream_maxlen,
            provisional_s=provisional_s(settings.fleet.claim_idle_s),
        )
    alerts = build_alerts(
        settings,
        state,
        metrics,
        shared=fleet_alerts,
    )
    api: LangfuseAPI | None = None
    if source is None or sink is None:
        api = build_api(settings)
    rules = settings.mapping_rules()
    # Reads and score posts share one request budget (docs/daemon.md: the request budget).
    limiter = build_budget(settings, metrics)
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
            # A fleet's caps and samples counted once for the whole fleet.
            shared=fleet.budget if fleet is not None else None,
        )

    disabled = metrics.judge_decisions.labels(decision="disabled")

    def on_scored(record: RagRecord, signals: Signals, row: Row) -> None:
        alerts.scored(row)
        if judge is None:
            disabled.inc()

    src = settings.source
    marks, publisher, should_stop = _reader(settings, fleet, metrics, health, stop, state.watermark)
    pipeline = Pipeline(
        source,
        state,
        metrics,
        settings.signal_params(),
        rules,
        notify=dispatcher.notify,
        settle_s=src.settle_s,
        overlap_s=src.overlap_s,
        sweep_interval_s=src.sweep_interval_s,
        lookback_s=src.lookback_s,
        on_scored=on_scored,
        on_signals=lambda _record, signals: summary.add(signals),
        lookup=resolver,
        should_stop=should_stop,
        judge=judge,
        tracer=telemetry.tracer,
        marks=marks,
        publisher=publisher,
        max_trace_cpu_s=settings.limits.max_trace_cpu_s,
    )
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)  # noqa: E731
    if isinstance(source, LangfuseSource):
        server = source.clock
        clock = source.now
        # Before a first pass has moved a watermark, the lag counts from the first
        # window's start: a daemon whose every pass fails is not "0 s behind".
        first = now_utc() - timedelta(seconds=settings.source.lookback_s)
        metrics.set_watermark(
            (watermark or first).timestamp(), clock=lambda: server.now().timestamp()
        )
    evaluation = Evaluation(fleet_alerts, fleet.lease) if fleet_alerts and fleet else None
    # Window rules on their own thread: a catch-up after a gap never holds a pass.
    evaluator = AlertEvaluator(
        alerts,
        interval_s=src.poll_interval_s,
        active=evaluation.active if evaluation is not None else lambda: True,
        after_tick=evaluation.hand_over if evaluation is not None else lambda: None,
    )
    passes = Passes(
        pipeline,
        health,
        evaluator,
        clock,
        check_server=_server_check(settings, api, source, sink, state, stop),
        **_pass_report(state, fleet),
    )
    receiver = event_path.build_event_path(
        mode == "solo",
        settings,
        pipeline.traces,
        state,
        metrics,
        api=api,
        limiter=limiter,
        stop=stop,
        lookup=resolver,
        notify=dispatcher.notify,
        clock=clock,
    )
    member = None
    if fleet is not None:
        assert fleet_alerts is not None and evaluation is not None
        member = _member(
            settings,
            fleet,
            fleet_alerts,
            evaluation,
            pipeline,
            passes,
            resolver,
            dispatcher,
            state,
            metrics,
            health,
            stop,
        )
    return Parts(
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
        evaluator,
        passes,
        judge,
        resolver,
        member,
        clock=clock,
        close_resolver=close_resolver,
        budget=limiter,
        judge_checks=_judge_checks(
            settings,
            mode,
            api,
            limiter,
            judge,
            metrics,
            state,
            stop,
            evaluation.active if evaluation is not None else lambda: True,
        ),
        receiver=receiver,
    )


def _judge_checks(
    settings: Settings,
    mode: Mode,
    api: LangfuseAPI | None,
    limiter: RateLimiter,
    judge: JudgeService | None,
    metrics: Metrics,
    state: State,
    stop: threading.Event,
    active: Callable[[], bool],
) -> tuple[background.Worker, ...]:
    """The daemon's looks at its judge (never in a one-shot run); in a fleet only the
    member that evaluates the rules looks (`active`), its samples being the ones read."""
    if mode == "once":
        return ()
    checks = [
        _agreement(settings, api, limiter, metrics, state, stop, active),
        _canary(settings, judge, metrics, state, stop, active),
    ]
    return tuple(c for c in checks if c is not None)


def _canary(
    settings: Settings,
    judge: JudgeService | None,
    metrics: Metrics,
    state: State,
    stop: threading.Event,
    active: Callable[[], bool],
) -> background.Worker | None:
    """The canary's runs, for a daemon with a judge and judge.canary_file."""
    path = settings.judge.canary_file
    if judge is None or path is None:
        return None
    from observer.judge.canary_run import CanaryRun, check_share, load_cases
    from observer.signals import compute

    cases = load_cases(path)
    j = settings.judge
    every = timedelta(hours=j.canary_every_h)
    check_share(len(cases), every, j.canary_tokens, state.judge.tokens_per_trace(), j.canary_share)
    params = settings.signal_params()
    client = judge.client
    run = CanaryRun(
        cases,
        lambda record: client.judge(record, compute(record, params)),
        judge.judge,
        state.judge,
        metrics,
        state.history.add_samples,
        every=every,
        share_tokens=j.canary_tokens,
        faithful_at=j.faithful_at,
        should_stop=stop.is_set,
        active=active,
    )
    return _every_minute("canary", run.step, stop)  # a run when due, its samples hourly


def _every_minute(name: str, step: Callable[[], bool], stop: threading.Event) -> background.Worker:
    """A look at the judge woken every minute; its step knows whether it is due."""
    return background.Worker(
        f"observer-judge-{name}",
        step,
        interval_s=60.0,
        crash_event=f"judge_{name}_failed",
        stopping=stop,
    )


def _agreement(
    settings: Settings,
    api: LangfuseAPI | None,
    limiter: RateLimiter,
    metrics: Metrics,
    state: State,
    stop: threading.Event,
    active: Callable[[], bool],
) -> background.Worker | None:
    """The hourly agreement read, for a daemon reading Langfuse with judge.human_score."""
    name = settings.judge.human_score
    if api is None or not name:
        return None
    from observer.judge.agreement_refresh import AgreementRefresh
    from observer.judge.annotations import AnnotationReader, read_agreement

    reader = AnnotationReader(api, limiter, should_stop=stop.is_set)
    refresh = AgreementRefresh(
        lambda start, end: read_agreement(reader, settings.judge, name, start, end),
        metrics,
        state.history.add_samples,
        active=active,
    )
    return _every_minute("agreement", refresh.step, stop)  # the step reads once an hour


def _reader(
    settings: Settings,
    fleet: _Fleet | None,
    metrics: Metrics,
    health: Health,
    stop: threading.Event,
    local: Callable[[], datetime | None],
) -> tuple[Marks | None, StreamPublisher | None, Callable[[], bool]]:
    """Where the pipeline keeps its marks and hands its traces: the state file and its own
    recorder alone, or a fleet's stream while this member holds the reader's lease."""
    if fleet is None:
        return None, None, _beating(health, stop)
    src = settings.source
    publisher = StreamPublisher(
        fleet.stream,
        fleet.lease,
        metrics,
        settle_s=src.settle_s,
        overlap_s=src.overlap_s,
        stop=stop,
    )
    marks = FleetMarks(fleet.stream, fleet.lease, local)
    return marks, publisher, _reading_while_held(health, stop, fleet.lease)


def _member(
    settings: Settings,
    fleet: _Fleet,
    fleet_alerts: FleetAlerts,
    evaluation: Evaluation,
    pipeline: Pipeline,
    passes: Passes,
    resolver: ResolverLookup | None,
    dispatcher: Dispatcher,
    state: State,
    metrics: Metrics,
    health: Health,
    stop: threading.Event,
) -> Member:
    """This process's part of the fleet: its worker scores with the pipeline's recorder."""
    assert settings.fleet is not None
    worker = Worker(
        fleet.stream,
        fleet.name,
        pipeline.traces,
        state,
        metrics,
        max_outbox=settings.sink.max_outbox,
        claim_idle_s=settings.fleet.claim_idle_s,
        max_deliveries=settings.fleet.max_deliveries,
        lookup=resolver,
        notify=dispatcher.notify,
    )
    return Member(
        Crew(
            name=fleet.name,
            client=fleet.client,
            keys=fleet.keys,
            lease=fleet.lease,
            stream=fleet.stream,
            alerts=fleet_alerts,
            evaluation=evaluation,
            worker=worker,
            pipeline=pipeline,
            read=passes.tick,
            state=state,
            metrics=metrics,
            health=health,
            stop=stop,
            lease_s=settings.fleet.lease_s,
            poll_interval_s=settings.source.poll_interval_s,
            restorers={
                "judge": lambda epoch: fleet.budget.restore(state, epoch, fleet.name, _now()),
                "trace_rules": lambda epoch: fleet_alerts.restore(state, epoch, fleet.name, _now()),
                "alert_state": evaluation.give_back,
            },
        )
    )


def _now() -> datetime:
    return datetime.now(UTC)


def _server_check(
    settings: Settings,
    api: LangfuseAPI | None,
    source: ObservationSource,
    sink: ScoreSink,
    state: State,
    stop: threading.Event,
) -> Callable[[], object] | None:
    """Before the first pass reads Langfuse: it answers, is the state file's project, is
    new enough for batch score posts (v4.59+) when posting, and the judge's endpoint
    answers (observer.app.contact)."""
    if not isinstance(source, LangfuseSource):
        return None
    posting = isinstance(sink, LangfuseScoreSink)
    api = api or build_api(settings)
    return functools.partial(ready, settings, api, state, posting=posting, stop=stop)


def _pass_report(state: State, fleet: _Fleet | None) -> dict[str, Any]:
    """What `poll_completed` says: the outbox's size, or a reader's hand-over to workers."""
    if fleet is None:
        return {"extra": lambda: {"outbox": state.outbox_size()}}
    stream = fleet.stream
    return {
        "counts": ("observations", "published", "unchanged", "unsettled"),
        "extra": lambda: {"role": "reader", "unacknowledged": stream.unacked()},
    }


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


def _reading_while_held(health: Health, stop: threading.Event, lease: Lease) -> Callable[[], bool]:
    """A fleet reader's pass goes on while the reader's lease is held (and no stop)."""
    beating = _beating(health, stop)
    return lambda: beating() or not lease.held()


def _beating(health: Health, stop: threading.Event) -> Callable[[], bool]:
    """The pipeline asks whether to stop once per page it read: a heartbeat for /healthz,
    and proof for /readyz that Langfuse answers, also during a pass of many pages."""

    def should_stop() -> bool:
        health.beat()
        health.langfuse_answered()
        return stop.is_set()

    return should_stop


def build_health(settings: Settings, state: State, metrics: Metrics) -> Health:
    # The OTLP receiver alone reads nothing: no watermark lag, no Langfuse reads to wait for.
    alone = settings.otlp.on and settings.otlp.poller == "off"
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


def _both(first: JudgedHook, second: JudgedHook | None) -> JudgedHook:
    if second is None:
        return first

    def hook(record: RagRecord, result: JudgeResult) -> None:
        first(record, result)
        second(record, result)

    return hook


def now_utc() -> datetime:
    return datetime.now(UTC)
