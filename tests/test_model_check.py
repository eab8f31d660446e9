"""A model check of the whole daemon against Langfuse as it is (docs/daemon.md, docs/scores.md).

A hypothesis state machine drives observer (`app.build`, then the daemon's own tick:
`pipeline.poll(parts.clock())` and the dispatcher) against the service-like fake on a
simulated clock, Langfuse's: the daemon takes "now" from the fake's `Date` header. The
steps are what the service and its users do to a running daemon:

- traces arrive, each after its own ingestion delay: seconds for SDK 5 data, up to the
  documented 15 minutes for an older SDK (which its metadata says), the first such trace
  within the regular overlap (before it, nothing says 15 minutes are needed);
- pages are cut short or come back empty with a cursor (the fake's seeded continuation);
- a late generation (a second answer) or a second subtree (a second root, another turn)
  is added to a trace already seen;
- an app's clock runs hours ahead, or minutes behind (its trace's timestamps are off by
  that; one further behind than the overlap is out of reach of any sweep);
- observer's own clock is off (its host before NTP);
- Langfuse answers 429 for a while; the daemon restarts cleanly, or is SIGKILLed in the
  middle of a pass or between a score post and its acknowledgement in the outbox;
- time passes, with the daemon polling every `poll_interval_s`.

The invariant, after every step once the dispatcher is flushed: every trace complete
before Langfuse's now less the settle time, the delay bound, one sweep interval and one
poll interval (the daemon looks only that often) holds exactly one live score per name in
the fake, under Langfuse's (id, name, day) key: the scores observer's pure core
(`observer.signals.compute`, `observer.scores.score_events`) gives for the trace's final
content as the daemon reads it. None missing, none doubled, none stale; a skipped trace
has none. And the watermark never passes Langfuse's now.

Each test below is one kind of trouble on top of the same base (continuation pages,
SDK 5 delays, 429s, restarts and kills), so a failure names the trouble, and hypothesis
shrinks it to a minimal sequence of steps; at the end of every run the daemon runs on
until all its traces are past the horizon, so the invariant covers each of them. Bounded
and derandomized (25 examples of up to 10 steps, shrinking cut at `SHRINK_S`): a passing
test takes seconds. `SCENARIOS` spells out the minimal sequences, failing and holding,
as plain tests of a few hundred milliseconds each.

The daemon runs with its defaults but for three things that only make the simulation
cheap and repeatable: a pass every 45 s instead of 30 s, no request budget (it runs on
the real clock), and a short sink backoff.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine as conjecture_engine
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from langfuse.api.commons.types.observation_v2 import ObservationV2
from langfuse.api.core.pydantic_utilities import parse_obj_as

from observer import app, langfuse_api
from observer.background import Deadline
from observer.config import Settings, load_settings
from observer.errors import RemoteError
from observer.mapping.convention import map_trace
from observer.mapping.rules import Skip
from observer.model import ScoreEvent
from observer.scores import score_events
from observer.signals import compute
from observer.sources.clock import ServerClock
from observer.sources.langfuse import FIELDS, LangfuseSource, Stopped, as_dict
from observer.telemetry.logging import configure_logging
from observer.times import iso, parse_time
from tests.budget import scaled
from tests.daemon_helpers import demo_observations
from tests.fakes.clock import SimulatedClock
from tests.fakes.langfuse_server import (
    INGESTION_DELAY_BOUND_S,
    OBSERVATIONS_PATH,
    SCORES_PATH,
    FakeLangfuse,
)

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
BOUND = timedelta(seconds=INGESTION_DELAY_BOUND_S)
OLD_SDK = "4.6.0"  # langfuse-python < 4.7.0: up to 15 minutes late
NEW_SDK = "5.0.4"
_TIME_KEYS = ("startTime", "endTime", "updatedAt", "createdAt", "completionStartTime")


# -- trace content: the demo's traces (captured from the real SDK) under new ids -------


def _templates() -> list[list[dict[str, Any]]]:
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for observation in demo_observations():
        by_trace.setdefault(observation["traceId"], []).append(observation)
    return list(by_trace.values())


TEMPLATES = _templates()
# Each template's generation, for a late second answer in another trace.
ANSWERS = [
    [o for o in t if o.get("type") == "GENERATION"][-1]
    for t in TEMPLATES
    if any(o.get("type") == "GENERATION" for o in t)
]


def _hex(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _latest(observations: list[dict[str, Any]]) -> datetime:
    moments = [parse_time(o.get(k)) for o in observations for k in _TIME_KEYS]
    return max(m for m in moments if m is not None)


def _moved(
    observations: list[dict[str, Any]],
    *,
    trace_id: str,
    salt: str,
    ends_at: datetime,
    sdk: str,
    parent: str | None = None,
) -> list[dict[str, Any]]:
    """The observations under new ids in `trace_id`, shifted to end at `ends_at` (the app's
    clock), written by SDK `sdk`; with `parent`, the subtree's roots hang below it."""
    shift = ends_at - _latest(observations)
    ids = {o["id"]: _hex(f"{o['id']}|{salt}", 16) for o in observations}
    out: list[dict[str, Any]] = []
    for observation in observations:
        moved = dict(observation)
        moved["traceId"] = trace_id
        moved["id"] = ids[observation["id"]]
        old_parent = observation.get("parentObservationId")
        moved["parentObservationId"] = ids.get(old_parent, parent)
        moved.pop("isRootObservation", None)  # the fake computes it, as the server does
        for key in _TIME_KEYS:
            moment = parse_time(observation.get(key))
            if moment is not None:
                moved[key] = iso(moment + shift)
        metadata = dict(moved.get("metadata") or {})
        scope = dict(metadata.get("scope") or {})
        scope["version"] = sdk
        metadata["scope"] = scope
        metadata["scope.name"] = scope.get("name", "langfuse-sdk")  # as the API flattens them
        metadata["scope.version"] = sdk
        moved["metadata"] = metadata
        out.append(moved)
    return out


# -- the model -------------------------------------------------------------------------


# An older SDK's first trace: within the regular overlap (300 s) less a sweep interval,
# a poll and the settle time, where any trace is found.
FIRST_OLD_BOUND_S = 150.0


@dataclass
class ModelTrace:
    trace_id: str
    sdk: str
    client_offset: timedelta
    completed_at: datetime  # Langfuse's clock when its last observation was sent
    steps: list[str] = field(default_factory=list)
    root_id: str = ""


@dataclass(frozen=True)
class Features:
    """What trouble a run may meet besides the base (pages, SDK 5 delays, faults)."""

    old_sdk: bool = False
    late_generations: bool = False
    second_roots: bool = False
    client_offsets_h: tuple[float, ...] = ()
    observer_offsets_s: tuple[float, ...] = ()


class Killed(BaseException):
    """SIGKILL: the process ends here, nothing after it runs (no cleanup, no commit)."""


class KillingSource:
    """The daemon's source, killed after `pages` pages of a pass."""

    def __init__(self, inner: Any, pages: int) -> None:
        self._inner = inner
        self._left = pages

    def pages(self, *args: Any, **kwargs: Any) -> Iterator[list[dict[str, Any]]]:
        for page in self._inner.pages(*args, **kwargs):
            if self._left <= 0:
                raise Killed()
            self._left -= 1
            yield page

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class KillingSink:
    """The daemon's score sink, killed right after Langfuse took its `batches`-th batch."""

    def __init__(self, inner: Any, batches: int) -> None:
        self._inner = inner
        self._left = batches

    def _call(self, method: Callable[..., Any], *args: Any) -> Any:
        result = method(*args)
        if self._left <= 0:
            raise Killed()  # posted, never acknowledged in the outbox
        self._left -= 1
        return result

    def send(self, scores: Any) -> Any:
        return self._call(self._inner.send, scores)

    def delete(self, scores: Any) -> Any:
        return self._call(self._inner.delete, scores)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def daemon_settings(fake: FakeLangfuse, state: Path) -> Settings:
    """The daemon's defaults (what users run), pointed at the fake; limits out of the way."""
    env = {
        "LANGFUSE_PUBLIC_KEY": fake.public_key,
        "LANGFUSE_SECRET_KEY": fake.secret_key,
        "LANGFUSE_BASE_URL": fake.url,
        "OBSERVER_STATE__PATH": str(state),
        # observer's own request budget runs on the real clock; simulated minutes pass in ms.
        "OBSERVER_SOURCE__REQUESTS_PER_MINUTE": "1000000",
        # Fewer simulated passes than every 30 s, and never at a multiple of the sweep
        # interval (60 s), where whether a pass sweeps would hang on milliseconds of real
        # time (the sweep is timed from the end of the last, on Langfuse's clock as the
        # daemon measures it): deterministic runs.
        "OBSERVER_SOURCE__POLL_INTERVAL_S": "45",
        "OBSERVER_SINK__MAX_BACKOFF_S": "0.05",
        "OBSERVER_HTTP__ENABLED": "false",
        "OBSERVER_LOG__LEVEL": "error",
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        return load_settings()


def _expected(fake: FakeLangfuse, settings: Settings, trace_id: str) -> list[ScoreEvent] | Skip:
    """The trace's scores from its final content, read as the daemon reads it."""
    rules = settings.mapping_rules()
    listed = fake.listed(trace_id=trace_id, fields=FIELDS, expand_metadata=rules.metadata_keys)
    observations = [as_dict(parse_obj_as(ObservationV2, o)) for o in listed]
    mapped = map_trace(trace_id, observations, rules)
    if isinstance(mapped, Skip):
        return mapped
    params = settings.signal_params()
    return score_events(mapped, compute(mapped, params), params)


def _same_value(live: Any, want: float | str) -> bool:
    if isinstance(want, str) or isinstance(live, str):
        return bool(live == want)
    return math.isclose(float(live), float(want), rel_tol=1e-9, abs_tol=1e-9)


# How long after the steps before it a late generation or a second subtree comes: within
# the sweeps' overlap (300 s by default), past it, past the delay bound.
LATER = st.sampled_from([0, 60, 330, 960])


class DaemonModel(RuleBasedStateMachine):
    features: ClassVar[Features] = Features()

    def __init__(self) -> None:
        super().__init__()
        self.clock = SimulatedClock(T0)
        self.fake: FakeLangfuse | None = None
        self.dir = Path(tempfile.mkdtemp(prefix="observer-model-"))
        self.state_path = self.dir / "state.sqlite"
        self.parts: app.Parts | None = None
        self.observer_offset = timedelta(0)
        self.traces: list[ModelTrace] = []
        self._settings: Settings | None = None

    # -- the daemon ----------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        assert self._settings is not None, "start() builds the settings"
        return self._settings

    def _start_daemon(self) -> None:
        parts = app.build(self.settings, state_path=self.state_path)
        self._skew(parts)
        self.parts = parts

    def _skew(self, parts: app.Parts) -> None:
        """observer's host clock off by `observer_offset` (Langfuse's stays right). Its
        monotonic clock runs with the simulated time: minutes pass in milliseconds here,
        which no monotonic clock of a real host does (observer.sources.clock)."""
        source = parts.pipeline.source
        assert isinstance(source, LangfuseSource)
        offset = self.observer_offset
        source.clock = ServerClock(
            local=lambda: datetime.now(UTC) + offset,
            monotonic=lambda: self.clock().timestamp(),
            on_offset=parts.metrics.clock_skew.set,
        )

    def _tick(self, *, flush: bool = True) -> None:
        """What `run_daemon`'s poll tick does, then the dispatcher catching up."""
        assert self.parts is not None
        with contextlib.suppress(RemoteError, Stopped):  # poll_failed: the next tick retries
            self.parts.pipeline.poll(self.parts.clock())
        if flush:
            self.parts.dispatcher.flush(10)

    def _abandon(self) -> None:
        """The process is gone: its file handle closes, nothing else runs."""
        assert self.parts is not None
        self.parts.state.close()
        self.parts = None

    def _run_for(self, seconds: float) -> None:
        poll = self.settings.source.poll_interval_s
        left = seconds
        while left > 0:
            step = min(poll, left)
            self.clock.advance(step)
            left -= step
            self._tick()

    # -- Langfuse ------------------------------------------------------------------

    def _add(
        self,
        trace: ModelTrace,
        observations: list[dict[str, Any]],
        delay_s: float,
        what: str,
        app_roots: tuple[str, ...] = (),
    ) -> None:
        assert self.fake is not None
        self.fake.add_observations(observations, delay_s=delay_s, app_roots=app_roots)
        trace.completed_at = self.clock()
        trace.steps.append(f"{what} at {iso(self.clock())} (+{delay_s:.0f} s to land)")

    def _delay(self, sdk: str, draw: float) -> float:
        """Seconds to land: SDK 5 data within 10 s, an older SDK's within the bound.

        The daemon widens the sweeps once an older SDK has been seen (docs/daemon.md): the
        first of its traces a daemon meets must land within the regular overlap, since
        nothing can say before it that 15 minutes are needed."""
        if sdk != OLD_SDK:
            return round(draw * 10.0)
        first = not any(t.sdk == OLD_SDK for t in self.traces[:-1])
        return round(draw * (FIRST_OLD_BOUND_S if first else INGESTION_DELAY_BOUND_S))

    # -- rules ---------------------------------------------------------------------

    @initialize(seed=st.integers(0, 2**16))
    def start(self, seed: int) -> None:
        self.fake = FakeLangfuse.service_like(seed=seed)
        self.fake.clock = self.clock
        self.fake.start()
        self._settings = daemon_settings(self.fake, self.state_path)
        self._start_daemon()

    @rule(
        arrivals=st.lists(
            st.tuples(
                st.integers(0, len(TEMPLATES) - 1),  # which demo trace
                st.booleans(),  # from an older SDK (when the run has them)
                st.integers(0, 2),  # which client clock
                st.floats(0, 1),  # how late it lands, as a share of its SDK's bound
            ),
            min_size=1,
            max_size=3,
        )
    )
    def traces_arrive(self, arrivals: list[tuple[int, bool, int, float]]) -> None:
        for template, old, offset, draw in arrivals:
            self._arrive(template, old, offset, draw)

    def _arrive(self, template: int, old: bool, offset: int, draw: float) -> None:
        offsets = (0.0, *self.features.client_offsets_h)
        client = timedelta(hours=offsets[offset % len(offsets)])
        sdk = OLD_SDK if old and self.features.old_sdk else NEW_SDK
        trace_id = _hex(f"model-trace-{len(self.traces)}", 32)
        observations = _moved(
            TEMPLATES[template],
            trace_id=trace_id,
            salt=trace_id,
            ends_at=self.clock() + client,
            sdk=sdk,
        )
        trace = ModelTrace(trace_id, sdk, client, self.clock())
        trace.root_id = next(o["id"] for o in observations if not o["parentObservationId"])
        self.traces.append(trace)
        self._add(
            trace,
            observations,
            self._delay(sdk, draw),
            f"trace {trace_id[:8]} (template {template}, SDK {sdk},"
            f" client clock {client.total_seconds() / 3600:+g} h)",
        )

    @precondition(lambda self: self.traces and self.features.late_generations)
    @rule(
        which=st.integers(0, 10**6),
        answer=st.integers(0, len(ANSWERS) - 1),
        draw=st.floats(0, 1),
        after=LATER,
    )
    def late_generation(self, which: int, answer: int, draw: float, after: int = 0) -> None:
        """A second answer generation under the trace's first root, `after` seconds on."""
        self._run_for(after)
        trace = self.traces[which % len(self.traces)]
        salt = f"{trace.trace_id}-late-{len(trace.steps)}"
        generation = _moved(
            [ANSWERS[answer]],
            trace_id=trace.trace_id,
            salt=salt,
            ends_at=self.clock() + trace.client_offset,
            sdk=trace.sdk,
            parent=trace.root_id,
        )
        self._add(
            trace,
            generation,
            self._delay(trace.sdk, draw),
            f"late generation in {trace.trace_id[:8]} (answer {answer})",
        )

    @precondition(lambda self: self.traces and self.features.second_roots)
    @rule(
        which=st.integers(0, 10**6),
        template=st.integers(0, len(TEMPLATES) - 1),
        draw=st.floats(0, 1),
        remote=st.booleans(),
        after=LATER,
    )
    def second_subtree(
        self, which: int, template: int, draw: float, remote: bool, after: int = 0
    ) -> None:
        """Another turn in the trace, `after` seconds on: a parentless root, or (`remote`) an
        app root the SDK marked under a span of another service that Langfuse never sees."""
        self._run_for(after)
        trace = self.traces[which % len(self.traces)]
        salt = f"{trace.trace_id}-turn-{len(trace.steps)}"
        subtree = _moved(
            TEMPLATES[template],
            trace_id=trace.trace_id,
            salt=salt,
            ends_at=self.clock() + trace.client_offset,
            sdk=trace.sdk,
            parent=_hex(f"{salt}-remote", 16) if remote else None,
        )
        roots = tuple(
            o["id"] for o in subtree if o["parentObservationId"] not in {p["id"] for p in subtree}
        )
        self._add(
            trace,
            subtree,
            self._delay(trace.sdk, draw),
            f"{'app root under a remote parent' if remote else 'second root'} in"
            f" {trace.trace_id[:8]} (template {template})",
            app_roots=roots if remote else (),
        )

    @rule(seconds=st.sampled_from([30, 60, 300, 600, 1200]))
    def time_passes(self, seconds: int) -> None:
        self._run_for(seconds)

    @rule(count=st.integers(1, 3), reads=st.booleans())
    def rate_limited(self, count: int, reads: bool) -> None:
        assert self.fake is not None
        path = OBSERVATIONS_PATH if reads else SCORES_PATH
        self.fake.fail_next(429, count=count, retry_after=0.01, path_prefix=path)

    @rule()
    def restart(self) -> None:
        assert self.parts is not None
        self.parts.dispatcher.shutdown(Deadline.within(5))
        self.parts.state.close()
        self._start_daemon()

    @rule(pages=st.integers(0, 4))
    def killed_in_a_pass(self, pages: int) -> None:
        assert self.parts is not None
        self.parts.pipeline.source = KillingSource(self.parts.pipeline.source, pages)
        with contextlib.suppress(Killed):
            self._tick()
        self._abandon()
        self._start_daemon()

    @rule(seconds=st.sampled_from([0, 60, 300]), batches=st.integers(0, 2))
    def killed_while_pushing(self, seconds: int, batches: int) -> None:
        """The dispatcher falls behind for `seconds` of polls, then the process dies right
        after Langfuse took `batches` + 1 batches, before the outbox heard of the last."""
        assert self.parts is not None
        poll = self.settings.source.poll_interval_s
        for _ in range(max(1, round(seconds / poll))):
            self.clock.advance(poll if seconds else 0)
            self._tick(flush=False)
        self.parts.dispatcher.sink = KillingSink(self.parts.dispatcher.sink, batches)
        with contextlib.suppress(Killed):
            self.parts.dispatcher.send_due()
        self._abandon()
        self._start_daemon()

    @precondition(lambda self: bool(self.features.observer_offsets_s))
    @rule(which=st.integers(0, 10))
    def observer_clock_off(self, which: int) -> None:
        offsets = self.features.observer_offsets_s
        self.observer_offset = timedelta(seconds=offsets[which % len(offsets)])
        assert self.parts is not None
        self._skew(self.parts)

    # -- the invariant -------------------------------------------------------------

    @invariant()
    def one_right_score_set_per_complete_trace(self) -> None:
        if self.parts is None or self.fake is None:
            return
        self.parts.dispatcher.flush(10)
        now = self.clock()
        watermark = self.parts.state.watermark()
        assert watermark is None or watermark <= now, (
            f"watermark {iso(watermark)} past Langfuse's now {iso(now)}"
        )
        horizon = now - timedelta(seconds=self._horizon_s())
        live = self.fake.scores_by_trace()
        for trace in self.traces:
            if trace.completed_at >= horizon:
                continue
            problems = self._problems(trace, live.get(trace.trace_id, {}))
            assert not problems, (
                f"trace {trace.trace_id} at Langfuse's {iso(now)}: "
                + "; ".join(problems)
                + "\n  its story: "
                + "; ".join(trace.steps)
            )

    def _problems(self, trace: ModelTrace, live: dict[str, list[dict[str, Any]]]) -> list[str]:
        assert self.fake is not None
        expected = _expected(self.fake, self.settings, trace.trace_id)
        if isinstance(expected, Skip):
            return [f"skipped ({expected.reason}) but scored: {sorted(live)}"] if live else []
        problems: list[str] = []
        want = {s.name: s for s in expected}
        for name, scores in sorted(live.items()):
            if name not in want:
                problems.append(f"stale {name} ({len(scores)} live, no longer applies)")
            elif len(scores) > 1:
                keys = sorted(self.fake.score_key(s) for s in scores)
                problems.append(f"doubled {name}: {keys}")
        for name, score in want.items():
            got = live.get(name, [])
            if not got:
                problems.append(f"missing {name}")
                continue
            last = got[-1]
            if last.get("id") != score.id:
                problems.append(f"{name} under id {last.get('id')}, expected {score.id}")
            if not _same_value(last.get("value"), score.value) or last.get("comment") != (
                score.comment
            ):
                problems.append(
                    f"{name} stale: {last.get('value')!r} ({last.get('comment')!r}),"
                    f" expected {score.value!r} ({score.comment!r})"
                )
            if last.get("observationId") != score.observation_id:
                problems.append(
                    f"{name} on {last.get('observationId')}, expected {score.observation_id}"
                )
        return problems

    def _horizon_s(self) -> float:
        source = self.settings.source
        return (
            source.settle_s + source.sweep_interval_s + source.poll_interval_s
        ) + BOUND.total_seconds()

    def teardown(self) -> None:
        """The daemon runs on until every trace is past the horizon; the invariant then
        covers them all (skipped when a step already failed: that failure is the report)."""
        try:
            if sys.exc_info()[0] is None and self.parts is not None:
                self._run_for(self._horizon_s() + self.settings.source.poll_interval_s)
                self.one_right_score_set_per_complete_trace()
        finally:
            self._close()

    def _close(self) -> None:
        parts, fake = self.parts, self.fake
        self.parts = self.fake = None
        try:
            if parts is not None:
                parts.dispatcher.shutdown(Deadline.within(2))
                parts.state.close()
        finally:
            if fake is not None:
                fake.stop()
            shutil.rmtree(self.dir, ignore_errors=True)


# -- the runs ----------------------------------------------------------------------------

SHRINK_S = 30
# An eighth of the profile's runs (25 under ci): each is a daemon run of up to 10 steps over
# a simulated hour against the service-like fake, seconds of real time.
RUNS = settings(
    scaled(1 / 8),
    stateful_step_count=10,
    derandomize=True,
    database=None,
    print_blob=False,
    report_multiple_bugs=False,
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
    suppress_health_check=list(HealthCheck),
)


def _check(features: Features) -> None:
    machine = type("DaemonModelRun", (DaemonModel,), {"features": features})
    # Simulated minutes pass in milliseconds: the measured clock skew moves by minutes on
    # every pass and would be logged each time. Only errors are worth reading here.
    configure_logging("console", "error")
    clients: dict[tuple[Any, ...], Any] = {}
    build_api = langfuse_api.build_api

    def pooled(*args: Any, **options: Any) -> Any:
        """One API client per fake: a restarted daemon reconnects, but a new client costs
        ~20 ms of TLS setup, which is most of a run's time when hypothesis shrinks."""
        key = (*args, *sorted(options.items()))
        if key not in clients:
            clients[key] = build_api(*args, **options)
        return clients[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(langfuse_api, "build_api", pooled)
        # Shrinking is bounded by time (hypothesis stops at this many seconds): a failing
        # run stays a matter of seconds, with the steps shrunk as far as they got.
        if hasattr(conjecture_engine, "MAX_SHRINKING_SECONDS"):
            patch.setattr(conjecture_engine, "MAX_SHRINKING_SECONDS", SHRINK_S)
        run_state_machine_as_test(machine, settings=RUNS)


def test_base_pages_delays_429s_restarts_and_kills() -> None:
    _check(Features())


def test_older_sdks_up_to_fifteen_minutes_late() -> None:
    _check(Features(old_sdk=True))


def test_late_generations() -> None:
    _check(Features(late_generations=True))


def test_second_subtrees() -> None:
    _check(Features(second_roots=True))


def test_app_clocks_hours_ahead() -> None:
    _check(Features(client_offsets_h=(3.0,)))


def test_app_clocks_behind() -> None:
    """Behind by less than the overlap less a sweep interval: a trace stamped further in
    the past than the overlap when it lands is out of every window a sweep reads (the
    API filters by start time only); a backfill finds it (docs/daemon.md)."""
    _check(Features(client_offsets_h=(-0.03,)))


def test_observer_clock_off() -> None:
    _check(Features(observer_offsets_s=(600.0, -600.0, 7200.0)))


def test_everything_at_once() -> None:
    _check(
        replace(
            Features(),
            old_sdk=True,
            late_generations=True,
            second_roots=True,
            client_offsets_h=(3.0, -0.03),
            observer_offsets_s=(600.0, -7200.0),
        )
    )


# -- the minimal sequences, spelled out -----------------------------------------------------
# What hypothesis shrank the failures above to (or, where its time ran out, what they
# shrink to by hand), and their neighbours that hold: each a few hundred milliseconds.

Step = tuple[str, dict[str, Any]]
ONE_TRACE: Step = ("traces_arrive", {"arrivals": [(0, False, 0, 0.0)]})
OLD_TRACE: Step = ("traces_arrive", {"arrivals": [(1, True, 0, 0.0)]})  # lands at once
LATE_OLD_TRACE: Step = ("traces_arrive", {"arrivals": [(0, True, 0, 1.0)]})  # at its bound


def _scenario(features: Features, steps: list[Step]) -> None:
    """The steps in order, the invariant after each, then the daemon runs on past the
    horizon and the invariant covers every trace."""
    configure_logging("console", "error")
    machine = type("DaemonModelRun", (DaemonModel,), {"features": features})()
    machine.start(seed=0)
    try:
        for name, arguments in steps:
            getattr(machine, name)(**arguments)
            machine.one_right_score_set_per_complete_trace()
    except BaseException:
        machine._close()
        raise
    machine.teardown()


SCENARIOS: dict[str, tuple[Features, list[Step]]] = {
    # These held when this was written (2026-12-01, after a75abab):
    "late generation a minute after": (
        Features(late_generations=True),
        [
            ONE_TRACE,
            ("time_passes", {"seconds": 60}),
            ("late_generation", {"which": 0, "answer": 3, "draw": 0.0}),
        ],
    ),
    "second subtree ten minutes after": (
        Features(second_roots=True),
        [
            ONE_TRACE,
            ("time_passes", {"seconds": 600}),
            ("second_subtree", {"which": 0, "template": 3, "draw": 0.0, "remote": False}),
        ],
    ),
    "app root under a remote parent ten minutes after": (
        Features(second_roots=True),
        [
            ONE_TRACE,
            ("time_passes", {"seconds": 600}),
            ("second_subtree", {"which": 0, "template": 3, "draw": 0.0, "remote": True}),
        ],
    ),
    "killed right after a score post": (
        Features(),
        [ONE_TRACE, ("killed_while_pushing", {"seconds": 60, "batches": 0})],
    ),
    "killed before the first page": (
        Features(),
        [ONE_TRACE, ("time_passes", {"seconds": 60}), ("killed_in_a_pass", {"pages": 0})],
    ),
    "older SDK seen, then one of its traces fifteen minutes late": (
        Features(old_sdk=True),
        [OLD_TRACE, ("time_passes", {"seconds": 600}), LATE_OLD_TRACE],
    ),
    # These failed then (the model check's report to the daemon's maintainers); they hold
    # since the fixes that followed it.
    "older SDK seen, a restart ten minutes on, then one fifteen minutes late": (
        Features(old_sdk=True),
        [OLD_TRACE, ("time_passes", {"seconds": 600}), ("restart", {}), LATE_OLD_TRACE],
    ),
    "late generation past the overlap": (
        Features(late_generations=True),
        [
            ONE_TRACE,
            ("time_passes", {"seconds": 330}),
            ("late_generation", {"which": 0, "answer": 3, "draw": 0.0}),
        ],
    ),
    "older SDK, its first trace as late as the overlap allows": (
        Features(old_sdk=True),
        [LATE_OLD_TRACE],
    ),
    "app clock three hours ahead": (
        Features(client_offsets_h=(3.0,)),
        [("traces_arrive", {"arrivals": [(0, False, 1, 0.0)]})],
    ),
    "app clock two minutes behind": (
        Features(client_offsets_h=(-0.03,)),
        [("traces_arrive", {"arrivals": [(0, False, 1, 0.0)]})],
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(name: str) -> None:
    features, steps = SCENARIOS[name]
    _scenario(features, steps)
