"""One pass, driven the same way by `run`, `run --once` and a fleet's reader; one error
policy for every mode.

    tick(now) -> PassOutcome = beat -> the server checked (once) -> pipeline.poll(now)
                -> Langfuse answered -> the watermark's lag -> the evaluator told

`tick` never raises: what stopped a pass is classified once (observer.failures) into
the `PassOutcome`, and the caller logs it once (`said`) and decides what follows from
it: the daemon's poll job holds polling while the state file cannot be written, `run
--once` exits with the code the class maps to (observer.app.exits), a fleet's reader
pauses while Redis is away.

`run --once` calls `tick(burst=True)`: the same pass, then the window rules evaluated
on its own thread up to the pass's moment. The lag is measured from the pipeline's
own watermark: the state file's, or the fleet's stream's; before any pass has moved
one, from the start of the first pass's window (the lookback), so a daemon whose every
pass fails shows its lag growing and `pipeline_lag_high` can fire.

A failed pass is counted (`observer_passes_failed_total{kind}`) and its lag sample
recorded all the same; a completed one sets `observer_last_pass_timestamp_seconds`
and tells `Health` (`/readyz`: "no pass has completed for N s").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime

import structlog

from observer.alerts.evaluator import AlertEvaluator
from observer.failures import PassOutcome, classify
from observer.health import Health
from observer.pipeline import PassResult, Pipeline

log = structlog.get_logger("observer.app")

COUNTS = ("observations", "scored", "rescored", "unchanged", "unsettled", "skipped", "scores")


def lag_s(moment: datetime, watermark: datetime | None) -> float:
    """How far the watermark trails the pass's moment (0 without one)."""
    return max(0.0, (moment - watermark).total_seconds()) if watermark is not None else 0.0


def completed_fields(result: PassResult, counts: tuple[str, ...] = COUNTS) -> dict[str, object]:
    """What `poll_completed` says of a pass."""
    return {"sweep": result.sweep, **{name: getattr(result, name) for name in counts}}


@dataclass(eq=False, repr=False)
class Passes:
    """`check_server` raises ConfigError for a server too old (before the first pass);
    `counts` and `extra` are what `poll_completed` says besides the sweep."""

    pipeline: Pipeline
    health: Health
    evaluator: AlertEvaluator | None
    clock: Callable[[], datetime]
    _: KW_ONLY
    check_server: Callable[[], object] | None = None
    counts: tuple[str, ...] = COUNTS
    extra: Callable[[], Mapping[str, object]] = dict
    done: int = field(default=0, init=False)  # passes completed
    first_start: datetime | None = field(default=None, init=False)  # the first window's start

    def check(self) -> None:
        """The server checked, once per process (ConfigError when it is too old; a
        RemoteError when it cannot be reached)."""
        if self.check_server is not None:
            self.check_server()
            self.check_server = None

    def tick(
        self,
        now: datetime | None = None,
        *,
        burst: bool = False,
        clock: Callable[[], datetime] | None = None,
    ) -> PassOutcome:
        """One pass up to `now` (else `clock`'s, else the pass driver's), told to the
        evaluator and the log; what stopped it classified in the outcome. Never raises:
        reading Langfuse's clock is a read like the pass's (a 401 there is "auth" too)."""
        self.health.beat()
        moment = now
        try:
            # Deleted or replaced: StateError, no pass. Asked first: a local fault that
            # needs a restart is said as such whatever Langfuse answers, or how slowly.
            self.pipeline.state.check_identity()
            if moment is None:
                moment = (clock or self.clock)()
            if self.first_start is None:
                self.first_start = moment - self.pipeline.lookback
            self.check()
            result = self.pipeline.poll(moment)
        except Exception as error:
            moment = moment or datetime.now(UTC)  # Langfuse's clock unread: this host's
            failure = classify(error)
            if failure is not None:
                self.pipeline.metrics.passes_failed.labels(kind=failure).inc()
                if self.evaluator is not None:  # the lag grows while passes fail: a sample
                    self.evaluator.after_pass(moment, self.lag_s(moment))
            return PassOutcome(moment, self.pipeline.counting, failure, error)
        self.health.langfuse_answered()
        self.health.pass_completed()
        self.pipeline.metrics.last_pass.set(moment.timestamp())
        if self.evaluator is not None:
            self.evaluator.after_pass(moment, self.lag_s(moment))
            if burst:
                self.evaluator.catch_up()
        self.done += 1
        log.info("poll_completed", **completed_fields(result, self.counts), **self.extra())
        return PassOutcome(moment, result)

    def lag_s(self, moment: datetime) -> float:
        """How far the watermark (before there is one, the first window's start) trails."""
        return lag_s(moment, self.pipeline.marks.watermark() or self.first_start)
