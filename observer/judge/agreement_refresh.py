"""The daemon's hourly look at how far the judge agrees with people (docs/judge.md).

Once an hour (on the poll thread's clock), the last `window` of people's labels
and the judge's verdicts on their traces are read from Langfuse and paired
(`observer.judge.annotations.read_agreement`, within the request budget); the
figures go to the metrics (`observer_judge_agreement{measure}`,
`observer_judge_pairs`) and, as the daemon's own samples, to the history:
`judge_pairs` always, `judge_kappa` only over at least `min_pairs` pairs, so that
the default rule `judge_agreement_low` (kappa below 0.4) never decides on a
handful. Langfuse unreachable or refusing is logged and tried again next hour;
nothing here ever stops the daemon. In a fleet only the member that evaluates the
rules reads (its samples are the ones the rule reads).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Final

import structlog
from prometheus_client import Gauge

from observer.errors import RemoteError
from observer.judge.agreement import Agreement
from observer.sources.langfuse import Stopped
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.judge.agreement")


def set_measures(gauge: Gauge, **values: float | None) -> None:
    """Each measure's figure (the judge's agreement, its canary); one with nothing to
    compute it from is NaN."""
    for measure, value in values.items():
        gauge.labels(measure=measure).set(math.nan if value is None else value)


MIN_PAIRS: Final = 30  # fewer: no kappa sample, the rule keeps no verdict


class AgreementRefresh:
    def __init__(
        self,
        read: Callable[[datetime, datetime], Agreement],
        metrics: Metrics,
        add_samples: Callable[[float, Mapping[str, float]], None],
        *,
        every: timedelta = timedelta(hours=1),
        window: timedelta = timedelta(days=7),
        min_pairs: int = MIN_PAIRS,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        active: Callable[[], bool] = lambda: True,
    ) -> None:
        """`active`: this process reads (a fleet's member that evaluates the rules)."""
        self._read = read
        self._metrics = metrics
        self._add_samples = add_samples
        self.every = every
        self.window = window
        self.min_pairs = min_pairs
        self._clock = clock
        self._active = active
        self.last: datetime | None = None  # when the figures were last read
        self.found: Agreement | None = None

    def step(self) -> bool:
        """Read the figures when an hour has passed since the last read; never raises
        for Langfuse's answers. False: nothing more to do now (the Worker's contract)."""
        if not self._active():
            return False
        now = self._clock()
        if self.last is not None and now - self.last < self.every:
            return False
        self.last = now
        try:
            found = self._read(now - self.window, now)
        except (RemoteError, Stopped) as error:
            log.warning("judge_agreement_unread", error=str(error))
            return False
        self.found = found
        set_measures(
            self._metrics.judge_agreement,
            kappa=found.kappa, precision=found.precision, recall=found.recall,
        )  # fmt: skip
        self._metrics.judge_pairs.set(found.pairs)
        samples: dict[str, float] = {"judge_pairs": float(found.pairs)}
        if found.pairs >= self.min_pairs and found.kappa is not None:
            samples["judge_kappa"] = found.kappa
        self._add_samples(now.timestamp(), samples)
        log.info(
            "judge_agreement_read",
            pairs=found.pairs,
            kappa=found.kappa,
            precision=found.precision,
            recall=found.recall,
        )
        return False
