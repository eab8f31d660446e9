"""`observer check`: what `run` needs proved, row by row, as `run` proves it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from observer.app.builders import (
    build_api,
    build_notifiers,
    build_openai,
    build_resolver,
    build_source,
    now_utc,
    resolver_fields,
)
from observer.app.contact import ProjectMismatch, judge_ready, langfuse_ready
from observer.app.exits import EXIT_CONFIG, EXIT_OK, exit_code
from observer.config import ConfigError, Settings
from observer.errors import RemoteError
from observer.model import RagRecord, Signals
from observer.sources.ingestion import SLOW_INGESTION_BOUND_S, slow_ingestion
from observer.sources.langfuse import LangfuseSource
from observer.state import State, StateError
from observer.telemetry.metrics import Metrics
from observer.times import iso
from observer.urls import without_credentials

if TYPE_CHECKING:
    from observer.app.discover import Discovery

log = structlog.get_logger("observer.app")


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
        problems = state.integrity()  # SQLite's integrity check: corruption mid-file too
        if problems:
            raise StateError(
                f"state file {path} is corrupt ({'; '.join(problems[:3])}): move it aside and "
                "restore a copy, or start a new one (docs/daemon.md#the-state-file)"
            )
        watermark = state.watermark()
        traces, outbox = state.trace_count(), state.outbox_size()
    finally:
        state.close()
    at = iso(watermark) if watermark is not None else "none yet"
    known = f"{traces:,} {'trace' if traces == 1 else 'traces'} known"
    held = f"{outbox:,} {'score' if outbox == 1 else 'scores'} in the outbox"
    return f"usable: watermark {at}, {known}, {held}"


def check_resolver(
    settings: Settings, recent: list[tuple[RagRecord, Signals]] | None
) -> tuple[str, bool]:
    """Reach the chunk store, then look up chunk ids that `recent` answers cited:
    (what happened, failed). `recent` None: Langfuse could not be read for a sample."""
    from observer.resolver import ResolverError, cited_chunks
    from observer.resolver.probe import sample_ids, sample_report

    r = settings.resolver
    name = f"{r.kind} {r.collection or without_credentials(r.uri) or r.hook}"
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
        report = sample_report(cited, ids, stored if ids else {}, resolver_fields(settings))
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
    """`check`'s rows, and the exit code of the first that failed."""

    rows: list[tuple[str, str]] = field(default_factory=list)
    exit_code: int = EXIT_OK
    reachable: bool = False  # Langfuse answered and accepted the keys

    def add(self, key: str, value: str) -> None:
        self.rows.append((key, value))

    def fail(self, key: str, value: str, code: int) -> None:
        self.rows.append((key, value))
        self.exit_code = self.exit_code or code


def check(settings: Settings, state_path: Path) -> CheckResult:
    """Prove what `run` needs, as `run` proves it (the same functions, the same messages):
    the state file, the chunk store, the fleet's Redis, the notifiers' secrets, Langfuse
    (reachable within source.first_contact_s, its version, the keys, the state file's
    project) and the judge's endpoint. The first failure's exit code is the result's."""
    found = CheckResult()
    try:
        found.add("state", f"{state_path}: {check_state(state_path)}")
        usable: Path | None = state_path
    except StateError as error:
        found.fail("state", f"NOT USABLE: {error}", EXIT_CONFIG)
        usable = None
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
        found.add("resolver", row) if not failed else found.fail("resolver", row, EXIT_CONFIG)
    _check_fleet(settings, found)
    _check_notifiers(settings, found)
    if source is None:
        found.fail("reachable", f"not checked: {unusable}", EXIT_CONFIG)
    else:
        _check_langfuse(settings, usable, source, found)
    if settings.judge.enabled:
        _check_judge(settings, found)
    return found


def _check_langfuse(
    settings: Settings, state_path: Path | None, source: LangfuseSource, found: CheckResult
) -> None:
    """Reachable within source.first_contact_s, its version, the project (against the
    usable state file's, not recorded: `check` writes nothing), the keys proven by a read."""
    state = State(state_path) if state_path is not None and state_path.exists() else None
    try:
        reached = langfuse_ready(settings, build_api(settings), state, record=False)
    except ProjectMismatch as error:
        found.fail("project", f"REFUSED: {error}", EXIT_CONFIG)
        return
    except ConfigError as error:  # too old for score batches
        found.fail("server", f"REFUSED: {error}", EXIT_CONFIG)
        return
    except RemoteError as error:
        found.fail("reachable", f"NO: {error}", exit_code(error))
        return
    finally:
        if state is not None:
            state.close()
    found.add("server", reached.server)
    if reached.project is not None:
        found.add("project", reached.project.describe())
    try:
        source.probe()
    except RemoteError as error:
        found.fail("reachable", f"NO: {error}", exit_code(error))
        return
    found.reachable = True
    found.add("reachable", "yes, keys accepted")
    found.add("ingestion", ingestion_row(settings, source))


def _check_judge(settings: Settings, found: CheckResult) -> None:
    """The judge's endpoint: its model and key as `run` builds them (exit 2 when `run`
    would refuse them); an endpoint that does not answer or refuses the key is shown, not
    failed: `run` starts without it (each sampled trace a judge error, which pages
    through judge_error_rate_high; the deterministic scores go on)."""
    try:
        found.add("judge", judge_ready(settings, build_openai(settings)))
    except ConfigError as error:
        found.fail("judge", f"NOT USABLE: {error}", EXIT_CONFIG)
    except RemoteError as error:
        found.add(
            "judge",
            f"NO: {error}; `run` scores without it: each sampled trace is a judge error "
            "(judge_error_rate_high pages)",
        )


def _check_fleet(settings: Settings, found: CheckResult) -> None:
    """The fleet's Redis, as `run` connects to it: reachable, new enough, AOF, no eviction."""
    if settings.fleet is None:
        return
    from observer.fleet.connect import connect, prove

    try:
        client = connect(settings, check=False)
        try:
            fitness = prove(client, settings)
        finally:
            client.close()
    except ConfigError as error:
        found.fail("fleet", f"NOT USABLE: {error}", EXIT_CONFIG)
    except RemoteError as error:
        found.fail("fleet", f"NO: {error}", exit_code(error))
    else:
        found.add("fleet", fitness.describe())


def _check_notifiers(settings: Settings, found: CheckResult) -> None:
    """Every notifier built as `run` builds it: its secret present (nothing is sent)."""
    notifiers = settings.alerts.notifiers
    if not notifiers:
        return
    try:
        build_notifiers(settings)
    except ConfigError as error:
        found.fail("notifiers", f"NOT USABLE: {error}", EXIT_CONFIG)
        return
    names = ", ".join(f"{n.name} ({n.kind})" for n in notifiers)
    found.add("notifiers", f"{names}: configured, secrets present (nothing sent)")


# How many of the last hour's traces `check` reads for its summary.
CHECK_TRACES = 200


@dataclass(frozen=True, slots=True)
class RecentSample:
    """`check`'s look at the last hour: what `discover` made of it, or why it was not read."""

    discovery: Discovery | None
    traces: int = 0  # how many traces were read
    limit: int = CHECK_TRACES  # the most it would read
    error: str | None = None  # why Langfuse could not be read


def recent_sample(settings: Settings) -> RecentSample:
    """`discover` over the last hour's newest CHECK_TRACES traces (a failed read is told)."""
    from observer.app import discover

    try:
        source = build_source(settings, Metrics(), max_attempts=1)
        end = source.now()
        sample = discover.read_sample(source, end - timedelta(hours=1), end, CHECK_TRACES)
    except RemoteError as error:
        return RecentSample(None, error=str(error))
    rules = settings.mapping_rules()
    found = discover.discover(sample.traces, rules, discover.rules_from_settings(settings))
    return RecentSample(found, len(sample.traces))
