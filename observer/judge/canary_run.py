"""The canary judged on a schedule, within its share of the judge's budget (docs/judge.md#a-canary).

Every `every` (a day by default) the daemon's judge judges each case of the canary
file, one after the other on a thread of its own, with the same client, prompts and
model as production traces. Before a run, what it is expected to cost (the cases
times a judged trace's moving average) must fit in what is left of the canary's share
of the day's tokens (`judge.canary_share` of `judge.max_tokens_per_day`, taken off
the production traces' cap ahead, so neither eats the other's); else the run waits
for the next day. A run's tokens are counted in its own bucket of the state file.

A whole run is kept in the state file (its verdicts, its figures, the judge that gave
them): the next run's flip rate is counted against it, also after a restart. Its
figures go to the metrics (`observer_judge_canary{measure}`), and every hour while it
is fresh (younger than `every` and two hours) to the history as the daemon's own
samples: `judge_canary_agreement` (only when at least half the cases got a verdict),
which the default rule `judge_canary_low` reads, and `judge_canary_flip_rate`. A run
stopped by a shutdown, or in which no case got a verdict (the judge down: its error
rate has a rule of its own), keeps the run before and is tried again in an hour.
Nothing here stops the daemon. In a fleet only the member that evaluates the rules
runs it (`active`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import orjson
import structlog

from observer.errors import ConfigError
from observer.judge.agreement import Judge
from observer.judge.agreement_refresh import set_measures
from observer.judge.canary import CanaryError, Case, Figures, figures, read_cases
from observer.judge.outcome import JudgeResult
from observer.judge.service import buckets, judge_used
from observer.model import RagRecord
from observer.state.judge import JudgeStore
from observer.telemetry.metrics import Metrics
from observer.times import iso, parse_time

log = structlog.get_logger("observer.judge.canary")

SAMPLE_EVERY: Final = timedelta(hours=1)  # the samples' pace: the rule reads the last two hours
RETRY_AFTER: Final = timedelta(hours=1)  # after a run cut short or without a verdict


@dataclass(frozen=True, slots=True)
class Run:
    """A whole run, as kept in the state file."""

    at: datetime
    judge: str  # Judge.key of the judge that gave the verdicts
    verdicts: dict[str, bool]  # case key -> unfaithful, for the cases with a verdict
    figures: Figures

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "at": iso(self.at),
                "judge": self.judge,
                "verdicts": self.verdicts,
                "figures": asdict(self.figures),
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> Run | None:
        """None for a run this version cannot read (it is then simply not compared)."""
        try:
            obj: Any = orjson.loads(data)
            at = parse_time(obj["at"])
            found = obj["figures"]
            run_figures = Figures(
                cases=int(found["cases"]),
                judged=int(found["judged"]),
                agreement=found["agreement"],
                kappa=found["kappa"],
                flip_rate=found["flip_rate"],
                disagreements=tuple(found["disagreements"]),
                flips=tuple(found["flips"]),
            )
            verdicts = {str(k): bool(v) for k, v in obj["verdicts"].items()}
            judge = str(obj["judge"])
        except (ValueError, KeyError, TypeError):
            return None
        return None if at is None else cls(at, judge, verdicts, run_figures)


def fresh(run: Run, now: datetime, every: timedelta) -> bool:
    """A run's figures still speak for the judge: not older than `every` and two hours."""
    return now - run.at < every + 2 * SAMPLE_EVERY


def samples(run: Run) -> dict[str, float]:
    """The history's samples of a run: agreement only over at least half the cases."""
    out: dict[str, float] = {}
    found = run.figures
    if found.agreement is not None and 2 * found.judged >= found.cases:
        out["judge_canary_agreement"] = found.agreement
    if found.flip_rate is not None:
        out["judge_canary_flip_rate"] = found.flip_rate
    return out


def load_cases(path: Path) -> tuple[Case, ...]:
    """The canary file's cases; ConfigError names the key, the file and the line."""
    try:
        with path.open("rb") as lines:
            return read_cases(lines, str(path))
    except OSError as error:
        raise ConfigError(f"judge.canary_file: cannot read {path}: {error.strerror}") from None
    except CanaryError as error:
        raise ConfigError(f"judge.canary_file: {error}") from None


def check_share(
    cases: int, every: timedelta, share_tokens: int, tokens_per_trace: int, share: float
) -> None:
    """ConfigError when a day's runs of `cases` cannot fit in the canary's share of the
    day's tokens, at what a judged trace costs now (a first estimate before any)."""
    runs = max(1, math.ceil(timedelta(days=1) / every))
    needed = runs * cases * tokens_per_trace
    if needed > share_tokens:
        raise ConfigError(
            f"judge.canary_file: {cases} cases x ~{tokens_per_trace:,} tokens x {runs} "
            f"run(s) a day need ~{needed:,} tokens a day, more than the canary's share "
            f"(judge.canary_share {share} of judge.max_tokens_per_day: {share_tokens:,}); "
            "raise the share or the cap, run it less often (judge.canary_every_h), or "
            "keep fewer cases"
        )


def judge_cases(
    cases: Sequence[Case],
    judge: Callable[[RagRecord], JudgeResult],
    faithful_at: float,
    should_stop: Callable[[], bool] = lambda: False,
    each: Callable[[Case, JudgeResult], None] = lambda _case, _result: None,
) -> tuple[dict[str, bool | None], int]:
    """Each case judged in turn: (verdicts by case key, True for unfaithful and None for
    no verdict; the tokens used). Stopped early, the verdicts are fewer than the cases."""
    verdicts: dict[str, bool | None] = {}
    tokens = 0
    for case in cases:
        if should_stop():
            break
        result = judge(case.record)
        tokens += result.tokens
        faithfulness = result.faithfulness
        verdicts[case.key] = None if faithfulness is None else faithfulness < faithful_at
        each(case, result)
    return verdicts, tokens


class CanaryRun:
    def __init__(
        self,
        cases: Sequence[Case],
        judge: Callable[[RagRecord], JudgeResult],
        judge_key: Judge,
        store: JudgeStore,
        metrics: Metrics,
        add_samples: Callable[[float, Mapping[str, float]], None],
        *,
        every: timedelta,
        share_tokens: int,
        faithful_at: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        should_stop: Callable[[], bool] = lambda: False,
        active: Callable[[], bool] = lambda: True,
    ) -> None:
        """`judge` judges one record (the daemon's client); `share_tokens` is the canary's
        share of the day's tokens; `active`: this process runs it (a fleet's evaluator)."""
        self.cases = tuple(cases)
        self._judge = judge
        self.judge_key = judge_key
        self._store = store
        self._metrics = metrics
        self._add_samples = add_samples
        self.every = every
        self.share_tokens = share_tokens
        self.faithful_at = faithful_at
        self._clock = clock
        self._should_stop = should_stop
        self._active = active
        self._not_before: datetime | None = None  # no run tried before then (budget, a cut)
        self._sampled: datetime | None = None  # the samples last written
        self.last: Run | None = self._load()
        if self.last is not None:
            self._show(self.last)

    def _load(self) -> Run | None:
        kept = self._store.canary_last()
        return None if kept is None else Run.from_json(kept)

    def step(self) -> bool:
        """Run the canary when it is due, and write its samples hourly while its last run
        is fresh. Never raises for the judge's answers (the client never does). False:
        nothing more to do now (the Worker's contract)."""
        if not self._active():
            return False
        now = self._clock()
        due = self.last is None or now - self.last.at >= self.every
        if due and (self._not_before is None or now >= self._not_before):
            self._try(now)
        last = self.last
        hour_passed = self._sampled is None or now - self._sampled >= SAMPLE_EVERY
        if last is not None and hour_passed and fresh(last, now, self.every):
            self._sampled = now
            found = samples(last)
            if found:
                self._add_samples(now.timestamp(), found)
        return False

    def _try(self, now: datetime) -> None:
        _hour, day = buckets(now)  # the judge's daily cap's day
        expected = len(self.cases) * self._store.tokens_per_trace()
        spent = self._store.canary_spent(day)
        if spent + expected > self.share_tokens:
            self._metrics.judge_canary_runs.labels(result="over_budget").inc()
            self._not_before = datetime.fromisoformat(day).replace(tzinfo=UTC) + timedelta(days=1)
            log.warning(
                "judge_canary_over_budget",
                cases=len(self.cases),
                expected_tokens=expected,
                spent_today=spent,
                share_tokens=self.share_tokens,
                next_try=iso(self._not_before),
            )
            return
        log.info("judge_canary_started", cases=len(self.cases), judge=self.judge_key.key)
        verdicts, tokens = judge_cases(
            self.cases, self._judge, self.faithful_at, self._should_stop, self._spent
        )
        if len(verdicts) < len(self.cases):
            self._store.canary_ran(day, tokens, None)
            self._metrics.judge_canary_runs.labels(result="stopped").inc()
            self._not_before = now + RETRY_AFTER
            log.info("judge_canary_stopped", judged=len(verdicts), cases=len(self.cases))
            return
        previous = self.last.verdicts if self.last is not None else None
        before = self.last.judge if self.last is not None else None
        found = figures(self.cases, verdicts, previous)
        if found.judged == 0:
            self._store.canary_ran(day, tokens, None)
            self._metrics.judge_canary_runs.labels(result="no_verdict").inc()
            self._not_before = now + RETRY_AFTER
            log.warning("judge_canary_no_verdict", cases=len(self.cases), tokens=tokens)
            return
        kept = {key: v for key, v in verdicts.items() if v is not None}
        run = Run(self._clock(), self.judge_key.key, kept, found)
        self._store.canary_ran(day, tokens, run.to_json())
        self.last = run
        self._sampled = None  # the new figures are written at once
        self._not_before = None
        self._metrics.judge_canary_runs.labels(result="done").inc()
        self._show(run)
        log.info(
            "judge_canary_run",
            cases=found.cases,
            judged=found.judged,
            agreement=found.agreement,
            kappa=found.kappa,
            flip_rate=found.flip_rate,
            disagreements=list(found.disagreements),
            flips=list(found.flips),
            tokens=tokens,
            judge=run.judge,
            # A new model or prompt: its flips are what changed with it.
            new_judge=before is not None and before != run.judge,
        )

    def _spent(self, case: Case, result: JudgeResult) -> None:
        judge_used(self._metrics, result)
        if result.error:
            log.warning("judge_canary_case_failed", case=case.key, error=result.error[:300])

    def _show(self, run: Run) -> None:
        found = run.figures
        metrics = self._metrics
        set_measures(
            metrics.judge_canary,
            agreement=found.agreement, kappa=found.kappa, flip_rate=found.flip_rate,
        )  # fmt: skip
        metrics.judge_canary_cases.labels(verdict="judged").set(found.judged)
        metrics.judge_canary_cases.labels(verdict="none").set(found.no_verdict)
        self._metrics.judge_canary_last_run.set(run.at.timestamp())
