"""Composition root: builds and wires everything, owns start and shutdown.

Exit codes of the commands built here: 0 done; 2 bad configuration or state
file; 3 Langfuse unreachable (or scores still undelivered at exit, kept in
the outbox for the next run); 4 Langfuse rejected the keys.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import Any

import structlog
from langfuse.api.client import LangfuseAPI
from opentelemetry import trace

from observer import langfuse_api
from observer.alerts.delivery import Delivery
from observer.alerts.engine import AlertEvent, evaluation_points, replay
from observer.alerts.evaluator import AlertEvaluator
from observer.alerts.model import Notification
from observer.alerts.notifiers import Notifier, NotifyError
from observer.alerts.notifiers.trial import TestOutcome, send_test
from observer.alerts.rules import WindowRule
from observer.alerts.service import AlertService
from observer.config import ConfigError, Settings
from observer.errors import AuthRejected, RemoteError, UnsupportedServer
from observer.judge.client import JudgeClient
from observer.judge.outcome import JudgeResult
from observer.judge.service import JudgedHook, JudgeService
from observer.model import RagRecord, Signals
from observer.pipeline import PassResult, Pipeline
from observer.resolver.core import ResolverFindings
from observer.resolver.daemon import ResolverLookup
from observer.resolver.store import Fields
from observer.scheduling import background_scheduler
from observer.sinks import ScoreSink
from observer.sinks.dispatcher import Dispatcher
from observer.sinks.jsonl import JsonlScoreSink
from observer.sinks.langfuse_scores import LangfuseScoreSink
from observer.sources import ObservationSource
from observer.sources.ingestion import SLOW_INGESTION_BOUND_S, slow_ingestion
from observer.sources.langfuse import LangfuseSource, Stopped
from observer.sources.ratelimit import RateLimiter
from observer.sources.replay import ReplaySource
from observer.state import State, StateError
from observer.summary import Summary
from observer.telemetry.http import Health, HttpServer
from observer.telemetry.metrics import Metrics
from observer.telemetry.otel import LangfuseOtlp, Telemetry, setup_telemetry
from observer.times import iso

log = structlog.get_logger("observer.app")

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4


def exit_code(error: RemoteError) -> int:
    return EXIT_AUTH if isinstance(error, AuthRejected) else EXIT_UNREACHABLE


def demo_traces_path() -> Path:
    return Path(str(resources.files("observer") / "data" / "demo_traces.jsonl"))


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


def build_judge_client(
    settings: Settings, langfuse_tracer: trace.Tracer | None = None
) -> JudgeClient:
    """The judge's OpenAI-compatible client, built in one place."""
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
        langfuse_tracer=langfuse_tracer,
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


def _resolver_fields(settings: Settings) -> Fields:
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
            fields=_resolver_fields(settings),
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
    """Everything one command needs, wired."""

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
    """Wire the pipeline. Without `source`/`sink`, both talk to Langfuse."""
    metrics = metrics or Metrics(max_query_types=settings.metrics.max_query_types)
    stop = stop or threading.Event()
    state = State(state_path or settings.state.path, max_outbox=settings.sink.max_outbox)
    watermark = state.watermark()
    if watermark is not None:  # the lag is known from the start, not after the first pass
        metrics.set_watermark(watermark.timestamp())
    health = build_health(settings, state, metrics)
    try:
        resolver = build_resolver(settings, metrics)
    except ConfigError:
        state.close()
        raise
    telemetry = telemetry or setup_telemetry(
        metrics, judge_to_langfuse=_judge_to_langfuse(settings)
    )
    try:
        alerts = build_alerts(settings, state, metrics)
    except ConfigError:
        state.close()
        raise
    api: LangfuseAPI | None = None
    if source is None or sink is None:
        api = build_api(settings)
    rules = settings.mapping_rules()
    # Reads and score posts share one request budget (DESIGN §9: one General API bucket).
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
    )
    summary = Summary()
    judge: JudgeService | None = None
    if settings.judge.enabled:
        judge = JudgeService(
            judge_client or build_judge_client(settings, telemetry.judge_tracer),
            state,
            metrics,
            settings.sampler_params(),
            notify=dispatcher.notify,
            concurrency=settings.judge.concurrency,
            queue_size=settings.judge.queue_size,
            on_judged=_both(alerts.judged, on_judged),
            signal_params=settings.signal_params(),
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
    if isinstance(source, LangfuseSource):
        server = source.clock
        parts.clock = source.now
        metrics.set_watermark(
            watermark.timestamp() if watermark is not None else None,
            clock=lambda: server.now().timestamp(),
        )
    return parts


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


# -- check ----------------------------------------------------------------------


def ingestion_row(settings: Settings, source: LangfuseSource) -> str:
    """Whether the newest page of traces comes from an SDK Langfuse ingests late."""
    end = source.now()
    page = next(iter(source.pages(end - timedelta(seconds=settings.source.lookback_s), end)), [])
    slow = sorted(
        {
            sdk
            for o in page
            if o.get("isRootObservation") and (sdk := slow_ingestion(o.get("metadata")))
        }
    )
    if not slow:
        return "no trace of the newest page from an SDK on Langfuse's slow path"
    slow_overlap = SLOW_INGESTION_BOUND_S + settings.source.sweep_interval_s + 120
    return (
        f"traces from {', '.join(slow)}: Langfuse may show them up to 15 minutes late; "
        f"sweeps re-read {max(settings.source.overlap_s, slow_overlap):g} s "
        "(SDK 5 lands within seconds)"
    )


def require_supported_server(settings: Settings) -> str:
    """Langfuse's version, described; raises ConfigError for a server too old (exit 2).

    An unreachable health endpoint is not a refusal: the daemon's own retries wait
    for Langfuse, and `check` reports reachability on its own row."""
    try:
        version = langfuse_api.check_server_version(build_api(settings), settings.langfuse.base_url)
    except UnsupportedServer as error:
        raise ConfigError(str(error)) from None
    except RemoteError as error:
        log.warning("server_version_unread", error=str(error))
        return f"not read: {error}"
    return version.describe


def check_state(path: Path) -> str:
    """Whether `run` could use the state file; raises StateError when it could not."""
    if not path.exists():
        if not path.parent.is_dir():
            raise StateError(f"state file {path}: directory {path.parent} does not exist")
        if not os.access(path.parent, os.W_OK):
            raise StateError(f"state file {path}: directory {path.parent} is not writable")
        return "usable (will be created)"
    state = State(path)
    try:
        watermark = state.watermark()
        traces, outbox = state.trace_count(), state.outbox_size()
    finally:
        state.close()
    at = iso(watermark) if watermark is not None else "none yet"
    return f"usable: watermark {at}, {traces:,} traces known, {outbox:,} scores in the outbox"


def check_resolver(
    settings: Settings, recent: list[tuple[RagRecord, Signals]] | None
) -> tuple[str, bool]:
    """Reach the chunk store, then look up chunk ids that `recent` answers cited:
    (what happened, failed). `recent` None: Langfuse could not be read for a sample."""
    from observer.resolver import ResolverError, cited_chunks
    from observer.resolver.probe import sample_ids, sample_report

    r = settings.resolver
    name = f"{r.kind} {r.collection or r.uri or r.hook}"
    try:
        lookup = build_resolver(settings, Metrics())
    except ConfigError as error:
        return f"NOT USABLE: {error}", True
    assert lookup is not None
    store = lookup.resolver.store
    cited = [cited_chunks(record, signals) for record, signals in recent or []]
    ids = sample_ids(cited, CHECK_SAMPLE_IDS)
    try:
        # One query: the sample's ids, or an id no store holds when there is no sample.
        stored = store.lookup(ids or ["observer-check-probe"])
        report = sample_report(cited, ids, stored if ids else {}, _resolver_fields(settings))
    except ResolverError as error:
        return f"NO: {name}: {error}", True
    finally:
        lookup.close()
    if report.problem is not None:
        return f"NO: {name}: reachable, but {report.problem}", True
    sample = report.describe() if recent is not None else "no sample (Langfuse not read)"
    return f"{name}: reachable, {r.id_field} queried; {sample}", False


# How many recently cited chunk ids `check` looks up, from at most this many recent answers.
CHECK_SAMPLE_IDS = 20
CHECK_SAMPLE_PAGES = 3


def recent_answers(settings: Settings, source: LangfuseSource) -> list[tuple[RagRecord, Signals]]:
    """The answers among the first pages of the last `source.lookback_s`, mapped and
    computed as the daemon would (a trace cut by a page end may be missed: a sample)."""
    from observer.mapping.convention import map_trace
    from observer.signals import compute

    rules = settings.mapping_rules()
    end = now_utc()
    by_trace: dict[str, list[dict[str, Any]]] = {}
    pages = source.pages(end - timedelta(seconds=settings.source.lookback_s), end)
    for number, page in enumerate(pages, start=1):
        for observation in page:
            by_trace.setdefault(str(observation.get("traceId")), []).append(observation)
        if number >= CHECK_SAMPLE_PAGES:
            break
    answers = []
    params = settings.signal_params()
    for trace_id, observations in by_trace.items():
        mapped = map_trace(trace_id, observations, rules)
        if isinstance(mapped, RagRecord):
            answers.append((mapped, compute(mapped, params)))
    return answers


@dataclass
class CheckResult:
    rows: list[tuple[str, str]]
    exit_code: int
    reachable: bool = False  # Langfuse answered and accepted the keys


def check(settings: Settings, state_path: Path) -> CheckResult:
    """Prove the state file and Langfuse (reachable, keys accepted)."""
    rows: list[tuple[str, str]] = []
    code = EXIT_OK
    try:
        rows.append(("state", f"{state_path}: {check_state(state_path)}"))
    except StateError as error:
        rows.append(("state", f"NOT USABLE: {error}"))
        code = EXIT_CONFIG
    try:
        source: LangfuseSource | None = build_source(settings, Metrics(), max_attempts=1)
        unusable: ConfigError | None = None
    except ConfigError as error:
        source, unusable = None, error
    if settings.resolver.kind:
        recent: list[tuple[RagRecord, Signals]] | None = None
        if source is not None:
            try:
                recent = recent_answers(settings, source)
            except RemoteError:  # the reachable row below says why
                recent = None
        row, failed = check_resolver(settings, recent)
        rows.append(("resolver", row))
        code = code or (EXIT_CONFIG if failed else EXIT_OK)
    if source is None:
        rows.append(("reachable", f"not checked: {unusable}"))
        return CheckResult(rows, code or EXIT_CONFIG)
    try:
        rows.append(("server", require_supported_server(settings)))
    except ConfigError as error:
        rows.append(("server", f"TOO OLD: {error}"))
        code = code or EXIT_CONFIG
    reachable = False
    try:
        source.probe()
        reachable = True
        rows.append(("reachable", "yes, keys accepted"))
        rows.append(("ingestion", ingestion_row(settings, source)))
    except RemoteError as error:
        rows.append(("reachable", f"NO: {error}"))
        code = code or exit_code(error)
    return CheckResult(rows, code, reachable)


# -- alerts commands ----------------------------------------------------------------


def open_alerts(settings: Settings, state_path: Path) -> AlertService:
    """Rules over an existing state file, for `alerts status` and `backtest`: nothing is
    sent (no notifier is built). The caller closes `.state`."""
    if not state_path.exists():
        raise StateError(f"state file {state_path} does not exist (run the daemon first)")
    return build_alerts(settings, State(state_path), Metrics(), notify=False)


@dataclass
class Backtest:
    rule: WindowRule
    events: list[AlertEvent]

    @property
    def notifications(self) -> int:
        return sum(1 for e in self.events if e.notify)


def backtest(
    alerts: AlertService, start: datetime, end: datetime, step_s: float, rule: str | None = None
) -> list[Backtest]:
    """Replay the rules over the stored history, from a clean state, as the daemon would."""
    chosen = [r for r in alerts.rules if rule is None or r.name == rule]
    if rule is not None and not chosen:
        names = ", ".join(r.name for r in alerts.rules) or "none"
        raise ConfigError(f"no window rule named {rule!r} (configured: {names})")
    longest = max((r.window_s for r in chosen), default=0.0)
    read = {r.expression.signal for r in chosen}
    rows = alerts.state.history.rows(start.timestamp() - longest, end.timestamp(), read)
    points = evaluation_points(start.timestamp(), end.timestamp(), step_s, 0.0)
    return [Backtest(r, replay(r, rows, {}, points, alerts.max_groups).events) for r in chosen]


def test_notification(sent_at: datetime) -> Notification:
    """What `observer alerts test` sends: plainly a test, resolving nothing real."""
    return Notification(
        id=f"msg_test_{int(sent_at.timestamp())}",
        dedup_key="observer-test",
        rule="observer_test",
        kind="test",
        state="firing",
        severity="warn",
        group=(("environment", "test"), ("query_type", "test")),
        summary="observer test alert: notifications reach this receiver",
        description="Sent by `observer alerts test`. Nothing is wrong; no action needed.",
        started_at=sent_at,
        sent_at=sent_at,
    )


def test_notifiers(
    settings: Settings, name: str | None = None, *, resolve_after_s: float | None = None
) -> list[TestOutcome]:
    """A test alert through each notifier (or the one named), ended as each notifier's
    test ends (observer.alerts.notifiers.trial): per notifier `(name, error or None)`,
    with `.sent` saying what it received (`sent, resolved`)."""
    notifiers = build_notifiers(settings)
    if name is not None and name not in notifiers:
        known = ", ".join(notifiers) or "none"
        raise ConfigError(f"no notifier named {name!r} (configured: {known})")
    delivery = Delivery(notifiers, Metrics(), max_attempts=2, base_s=0.5)
    try:
        return send_test(
            delivery.send_now,
            notifiers,
            [each for each in notifiers if name is None or each == name],
            test_notification(now_utc()),
            now=now_utc,
            resolve_after_s=resolve_after_s,
        )
    finally:
        delivery.shutdown(1.0)


# -- run --once -----------------------------------------------------------------


@dataclass
class OnceResult:
    exit_code: int
    passed: PassResult | None
    undelivered: int
    error: str | None = None


def run_once(
    parts: Parts, now: datetime | None = None, window_start: datetime | None = None
) -> OnceResult:
    """One pass up to now (every trace older than the settle delay), push, flush.

    With `window_start`, that whole window is read instead of the one after the
    watermark (the demo), and the watermark is not touched. Telemetry is flushed
    before it returns.
    """
    try:
        return _run_once(parts, now, window_start)
    finally:
        _flush_telemetry(parts)


def _flush_telemetry(parts: Parts) -> None:
    """Spans and metrics out before the process ends; a dead collector costs at most 5 s.
    The chunk store's client is closed too (a Milvus Lite file is one process's at a time)."""
    parts.telemetry.shutdown(min(5.0, parts.settings.run.shutdown_grace_s))
    if parts.resolver is not None:
        parts.resolver.close()


def _run_once(parts: Parts, now: datetime | None, window_start: datetime | None) -> OnceResult:
    grace = parts.settings.run.shutdown_grace_s
    if parts.judge is not None:
        parts.judge.start()
    try:
        now = now or parts.clock()
        if window_start is None:
            result = parts.pipeline.poll(now)
        else:
            result = parts.pipeline.process_window(window_start, now, now)
    except RemoteError as error:
        _stop_judge(parts, grace)
        parts.dispatcher.flush(grace)
        return OnceResult(exit_code(error), None, parts.state.outbox_size(), str(error))
    _stop_judge(parts, parts.settings.judge.timeout_s * 4 + grace)
    if window_start is None:
        alert_after_pass(parts, now)
    deadline = time.monotonic() + grace
    parts.dispatcher.flush(grace)
    # Notifications got their own threads at once; they share what is left of the grace.
    if not parts.alerts.shutdown(max(0.5, deadline - time.monotonic())):
        log.warning("alert_notifications_undelivered")
    left = parts.state.outbox_size()
    if left:
        code = EXIT_AUTH if parts.dispatcher.auth_failed else EXIT_UNREACHABLE
        return OnceResult(code, result, left, undelivered_message(parts, left))
    return OnceResult(EXIT_OK, result, 0)


def alert_after_pass(parts: Parts, now: datetime) -> None:
    """The pass's own samples into the history, then every rule evaluated. Never raises."""
    try:
        watermark = parts.state.watermark()
        lag = (now - watermark).total_seconds() if watermark is not None else 0.0
        parts.alerts.record_pass(now, max(0.0, lag))
        parts.alerts.evaluate(now)
    except Exception:  # alerting must never stop scoring
        log.exception("alert_evaluation_failed")


def undelivered_message(parts: Parts, left: int) -> str:
    """What happened to the scores still in the outbox: refused, or not sent in time."""
    kept = f"{left:,} scores kept in the outbox for the next run"
    if parts.dispatcher.last_error:
        return f"{kept}: Langfuse did not accept them ({parts.dispatcher.last_error})"
    grace = parts.settings.run.shutdown_grace_s
    return f"{kept}: not all sent before the grace of {grace:g} s ran out (run.shutdown_grace_s)"


def _stop_judge(parts: Parts, timeout_s: float) -> None:
    if parts.judge is not None and not parts.judge.shutdown(timeout_s):
        log.warning("judge_abandoned", pending=parts.judge.pending())


# -- backfill -------------------------------------------------------------------


def backfill(
    parts: Parts,
    start: datetime,
    end: datetime,
    chunk: timedelta,
    progress: Callable[[datetime, PassResult], None] = lambda _at, _result: None,
) -> OnceResult:
    """The pipeline over a past window, chunk by chunk (sized by what the chunks before
    held); the watermark is not touched."""
    try:
        return _backfill(parts, start, end, chunk, progress)
    finally:
        _flush_telemetry(parts)


MAX_BACKFILL_CHUNK = timedelta(days=1)


def _backfill(
    parts: Parts,
    start: datetime,
    end: datetime,
    chunk: timedelta,
    progress: Callable[[datetime, PassResult], None],
) -> OnceResult:
    parts.dispatcher.start()
    if parts.judge is not None:
        parts.judge.start()
    totals = PassResult(start, end)
    cursor = start
    size = chunk
    light = parts.settings.source.page_limit // 2
    try:
        now = parts.clock()
        while cursor < end and not parts.stop.is_set():
            chunk_end = min(end, cursor + size)
            # Read on past the chunk: the children of a trace rooted just before its end.
            read_until = chunk_end + timedelta(seconds=parts.settings.source.overlap_s)
            result = parts.pipeline.process_window(cursor, chunk_end, now, read_until)
            if result.deferred:
                # The outbox was full: wait for room, then read the chunk again (what was
                # recorded is unchanged the second time). Never done with a trace unscored.
                _wait_for_outbox_room(parts)
                continue
            totals.add(result)
            cursor = chunk_end
            progress(cursor, result)
            # A chunk costs a request however little it holds: after a light one the next
            # is twice as long (an empty week is a dozen requests, not 168), after a heavy
            # one half, never below the chunk asked for nor above a day (or that chunk).
            if result.observations < light:
                size = min(size * 2, max(chunk, MAX_BACKFILL_CHUNK))
            elif result.observations > 4 * parts.settings.source.page_limit:
                size = max(size / 2, chunk)
        if cursor < end:
            raise Stopped()
    except (RemoteError, Stopped) as error:
        _stop_judge(parts, parts.settings.run.shutdown_grace_s)
        parts.dispatcher.shutdown(parts.settings.run.shutdown_grace_s)
        if isinstance(error, Stopped):
            return OnceResult(EXIT_OK, totals, parts.state.outbox_size(), "stopped")
        return OnceResult(exit_code(error), totals, parts.state.outbox_size(), str(error))
    _stop_judge(parts, parts.settings.run.shutdown_grace_s)
    flushed = parts.dispatcher.shutdown(parts.settings.run.shutdown_grace_s)
    left = parts.state.outbox_size()
    if not flushed and left:
        return OnceResult(EXIT_UNREACHABLE, totals, left, undelivered_message(parts, left))
    return OnceResult(EXIT_OK, totals, 0)


def _wait_for_outbox_room(parts: Parts) -> None:
    """Until the outbox is half empty (the dispatcher sends meanwhile), or a stop."""
    room = parts.state.max_outbox // 2
    log.warning(
        "backfill_waiting",
        reason="outbox_full",
        outbox=parts.state.outbox_size(),
        until_below=room,
    )
    while parts.state.outbox_size() > room and not parts.stop.wait(0.2):
        parts.dispatcher.notify()
        if parts.dispatcher.auth_failed:
            raise AuthRejected(parts.dispatcher.last_error or "Langfuse refused the keys")


# -- the daemon -----------------------------------------------------------------


@contextmanager
def signals_set(stop: threading.Event) -> Iterator[None]:
    def handler(signum: int, _frame: FrameType | None) -> None:
        log.info("shutdown_requested", signal=signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_daemon(parts: Parts, clock: Callable[[], datetime] | None = None) -> int:
    """Poll and push until SIGTERM/SIGINT; then drain, flush, persist, exit 0 in the grace.

    Raises ConfigError when the HTTP port cannot be opened (before anything runs).
    """
    settings = parts.settings
    clock = clock or parts.clock
    server = start_http(settings, parts.metrics, parts.health)
    parts.dispatcher.start()
    # Window rules on their own thread: a catch-up after a gap never holds a pass.
    evaluator = parts.evaluator = AlertEvaluator(
        parts.alerts, interval_s=settings.source.poll_interval_s
    )
    evaluator.start()
    if parts.judge is not None:
        parts.judge.start()
    busy = threading.Lock()
    refused: list[str] = []  # why the server cannot be used (too old), once checked
    checked = not isinstance(parts.source, LangfuseSource)

    def poll_tick() -> None:
        nonlocal checked
        if parts.stop.is_set() or not busy.acquire(blocking=False):
            return
        try:
            parts.health.beat()
            if not checked:
                # Batch score posts need v4.59+: refused before anything is read, on the
                # poll thread, so a hanging health request never outlives a SIGTERM.
                try:
                    require_supported_server(settings)
                except ConfigError as error:
                    log.error("server_refused", error=str(error))
                    refused.append(str(error))
                    parts.stop.set()
                    return
                checked = True
            if parts.health.not_ready_because and not state_writable_again():
                return  # no new traces while nothing can be recorded
            moment = clock()
            result = parts.pipeline.poll(moment)
            parts.health.langfuse_answered()
            watermark = parts.state.watermark()
            lag = (moment - watermark).total_seconds() if watermark is not None else 0.0
            evaluator.after_pass(moment, max(0.0, lag))  # a small insert and a nudge
            log.info(
                "poll_completed",
                sweep=result.sweep,
                observations=result.observations,
                scored=result.scored,
                rescored=result.rescored,
                unchanged=result.unchanged,
                unsettled=result.unsettled,
                skipped=result.skipped,
                scores=result.scores,
                outbox=parts.state.outbox_size(),
            )
        except Stopped:
            pass
        except StateError as error:
            # Disk full or read-only: what is in the outbox stays; new traces wait.
            parts.health.not_ready_because = "the state file cannot be written"
            log.error("state_unwritable", error=str(error), action="polling paused")
        except AuthRejected as error:
            log.error("poll_failed", kind="auth", error=str(error))
        except RemoteError as error:
            log.warning("poll_failed", kind="unreachable", error=str(error))
        except Exception:  # the loop never dies on a strange trace or a bug
            log.exception("poll_crashed")
        finally:
            busy.release()

    def state_writable_again() -> bool:
        try:
            parts.state.check_writable(clock())
        except StateError:
            return False
        parts.health.not_ready_because = None
        log.info("state_writable_again", action="polling resumed")
        return True

    def housekeeping() -> None:
        watermark = parts.state.watermark()
        if watermark is not None:
            keep = timedelta(seconds=settings.source.overlap_s) + timedelta(days=1)
            pruned = parts.state.prune_traces(watermark - keep)
            if pruned:
                log.info("fingerprints_pruned", count=pruned)
        history = parts.alerts.prune(clock())
        if history:
            log.info("history_pruned", rows=history)
        parts.dispatcher.notify()

    scheduler = background_scheduler()
    scheduler.add_job(
        poll_tick,
        "interval",
        seconds=settings.source.poll_interval_s,
        next_run_time=datetime.now(UTC),
        max_instances=1,
        coalesce=True,
        id="poll",
    )
    scheduler.add_job(
        housekeeping,
        "interval",
        seconds=settings.run.housekeeping_interval_s,
        max_instances=1,
        coalesce=True,
        id="housekeeping",
    )
    with signals_set(parts.stop):
        scheduler.start()
        log.info(
            "observer_started",
            poll_interval_s=settings.source.poll_interval_s,
            state=str(parts.state.path),
        )
        parts.stop.wait()
        deadline = time.monotonic() + settings.run.shutdown_grace_s
        # Stop, join, close, in that order, within the grace. A pass in flight sees
        # `stop` between pages and hands back the rest; one stuck inside a request is
        # abandoned (its thread is a daemon), and the state is not closed under it.
        scheduler.shutdown(wait=False)
        joined = busy.acquire(timeout=max(0.0, deadline - time.monotonic()))
        if not joined:
            log.warning("poll_abandoned", reason="still inside a request at the grace's end")
        # In-flight judging gets half of what is left; unjudged samples are not retried.
        _stop_judge(parts, max(0.1, (deadline - time.monotonic()) / 2))
        flushed = parts.dispatcher.shutdown(max(0.5, deadline - time.monotonic()))
        evaluated = evaluator.shutdown(max(0.1, deadline - time.monotonic()))
        parts.alerts.shutdown(max(0.5, deadline - time.monotonic()))
        parts.telemetry.shutdown(max(0.5, deadline - time.monotonic()))
        left = parts.state.outbox_size()
        if joined and evaluated:
            parts.state.close()
            if parts.resolver is not None:
                parts.resolver.close()
        if server is not None:
            server.stop()
    log.info("observer_stopped", flushed=flushed, outbox_left=left)
    if refused:
        raise ConfigError(refused[0])
    return EXIT_OK


# -- the demo -------------------------------------------------------------------


def serve_until_stopped(
    parts: Parts, started: Callable[[str], None], *, beat_s: float = 5.0
) -> None:
    """Serve the HTTP port of a finished run until SIGTERM/SIGINT (`demo --serve`).

    The run read no Langfuse, so /readyz does not ask for it (ready: the run is done,
    its lag and outbox judged as always); /healthz watches this serving loop, which
    beats every `beat_s` while it serves (stale, as the daemon's, after three poll
    intervals, at least 60 s)."""
    health = parts.health
    health.heartbeat_of = "the demo's serving loop"
    health.langfuse_not_used = "not used: the demo read its bundled traces, and its run is done"
    health.beat()
    server = start_http(parts.settings, parts.metrics, health)
    if server is None:
        raise ConfigError("http.enabled is false: nothing to serve")
    started(server.url)
    with signals_set(parts.stop):
        while not parts.stop.wait(beat_s):
            health.beat()
    server.stop()


def demo(settings: Settings, out: Path, state_path: Path) -> tuple[OnceResult, Parts]:
    """The daemon pipeline over the bundled traces, scores to a JSONL file."""
    replay = ReplaySource(demo_traces_path())
    earliest, latest = replay.time_range()
    parts = build(settings, state_path=state_path, source=replay, sink=JsonlScoreSink(out))
    # The bundled traces are from the past: a clock just after them, a window over all of
    # them on every run (so a rerun on the same state reports them unchanged).
    now = latest + timedelta(seconds=settings.source.settle_s + 60)
    return run_once(parts, now, window_start=earliest - timedelta(minutes=1)), parts
