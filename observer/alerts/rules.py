"""Alert rules as values: what a rule watches, parsed and checked once at start.

A rule watches one *signal expression*: a signal name (`ungrounded`,
`faithfulness`, `lag_s`), or a comparison that turns it into a flag
(`confidence_band == LOW`, `invalid_citations > 0`). Window rules aggregate
it over a rolling window; trace rules test it on each trace. Pure: no I/O.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from observer.state.rows import Value as Value


class Kind(Enum):
    NUMBER = "number"
    FLAG = "flag"
    CATEGORY = "category"


@dataclass(frozen=True, slots=True)
class SignalInfo:
    kind: Kind
    categories: tuple[str, ...] = ()
    pipeline: bool = False  # a sample of the daemon itself, not of a trace
    # A row value beside the signal that says what is behind a true flag (the skip
    # reason of a skipped trace): a message names the most frequent one in the window.
    detail: str | None = None


SIGNALS: Mapping[str, SignalInfo] = {
    "confidence": SignalInfo(Kind.NUMBER),
    "citation_coverage": SignalInfo(Kind.NUMBER),
    "rerank_top1": SignalInfo(Kind.NUMBER),
    "crag_grade": SignalInfo(Kind.CATEGORY, ("HIGH", "AMBIGUOUS", "LOW")),
    "ungrounded": SignalInfo(Kind.FLAG),
    "confidence_band": SignalInfo(Kind.CATEGORY, ("HIGH", "MEDIUM", "LOW")),
    "invalid_citations": SignalInfo(Kind.NUMBER),
    "numeric_grounding": SignalInfo(Kind.NUMBER),
    "unsupported_numbers": SignalInfo(Kind.NUMBER),
    "needs_fallback": SignalInfo(Kind.FLAG),
    "crag_mismatch": SignalInfo(Kind.FLAG),
    "faithfulness": SignalInfo(Kind.NUMBER),
    "citation_accuracy": SignalInfo(Kind.NUMBER),
    "critical_unsupported": SignalInfo(Kind.FLAG),
    "judge_error": SignalInfo(Kind.FLAG),
    "missing_chunks": SignalInfo(Kind.NUMBER),
    "stale_citations": SignalInfo(Kind.NUMBER),
    "citation_concentration": SignalInfo(Kind.NUMBER),
    "abstained": SignalInfo(Kind.FLAG),
    # Known only with retrieval scores: a trace without any is no sample of it.
    "over_refusal": SignalInfo(Kind.FLAG),
    "over_citation": SignalInfo(Kind.NUMBER),
    # An answer-looking trace (it has a generation) that was skipped: true on a skip row,
    # false on every scored trace's row (docs/alerts.md#mapping-drift-skip_rate_high).
    "skipped": SignalInfo(Kind.FLAG, detail="skip_reason"),
    "lag_s": SignalInfo(Kind.NUMBER, pipeline=True),
    # The judge against people, read hourly (docs/judge.md): kappa only over >= 30 pairs.
    "judge_kappa": SignalInfo(Kind.NUMBER, pipeline=True),
    "judge_pairs": SignalInfo(Kind.NUMBER, pipeline=True),
    # The canary's last run, written hourly while fresh (docs/judge.md#a-canary).
    "judge_canary_agreement": SignalInfo(Kind.NUMBER, pipeline=True),
    "judge_canary_flip_rate": SignalInfo(Kind.NUMBER, pipeline=True),
    "scores_dropped": SignalInfo(Kind.NUMBER, pipeline=True),
}

Op = Literal[">", ">=", "<", "<=", "==", "!="]
OPS: Mapping[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}
AGGREGATES: tuple[str, ...] = ("mean", "rate", "count", "p50", "p95", "min", "max")
# What the default rules group by.
GROUP_LABELS = ("environment", "query_type")
# What any rule may group by and filter on (docs/alerts.md#window-rules), and what a
# triage slices a window by: every history row keeps them; a row without one reads `none`.
DIMENSIONS = (
    "environment",
    "query_type",
    "trace_name",
    "release",
    "version",
    "model",
    "prompt",
    "top_doc",
)


def row_keys(signals: Collection[str]) -> set[str]:
    """The row values a read of `signals` needs: each signal, and the detail beside it."""
    keys = set(signals)
    for name in signals:
        info = SIGNALS.get(name)
        if info is not None and info.detail is not None:
            keys.add(info.detail)
    return keys


_EXPRESSION = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(?:(>=|<=|==|!=|>|<)\s*(\S+)\s*)?$")


class RuleError(ValueError):
    """A rule that cannot be used; the message names the rule and the key."""


@dataclass(frozen=True, slots=True)
class Expression:
    """A signal, or a comparison of it that makes a flag."""

    signal: str
    op: str | None = None
    operand: float | str | None = None

    @property
    def info(self) -> SignalInfo:
        return SIGNALS[self.signal]

    @property
    def is_flag(self) -> bool:
        return self.op is not None or self.info.kind is Kind.FLAG

    def __str__(self) -> str:
        if self.op is None:
            return self.signal
        operand = self.operand if isinstance(self.operand, str) else f"{self.operand:g}"
        return f"{self.signal} {self.op} {operand}"

    def value(self, values: Mapping[str, Value]) -> float | None:
        """The expression on one row: a number, 1.0/0.0 for a flag, None when absent."""
        raw = values.get(self.signal)
        if raw is None:
            return None
        if self.op is not None:
            return 1.0 if OPS[self.op](raw, self.operand) else 0.0
        if isinstance(raw, bool):
            return 1.0 if raw else 0.0
        if isinstance(raw, int | float):
            return float(raw)
        return None


def parse_expression(text: str, where: str) -> Expression:
    """`ungrounded`, `faithfulness`, `confidence_band == LOW`, `invalid_citations > 0`."""
    match = _EXPRESSION.match(text)
    if match is None:
        raise RuleError(f"{where}: {text!r} is not '<signal>' or '<signal> <op> <value>'")
    name, op, raw = match.groups()
    info = SIGNALS.get(name)
    if info is None:
        raise RuleError(f"{where}: unknown signal {name!r} (known: {', '.join(SIGNALS)})")
    if op is None:
        return Expression(name)
    if info.kind is Kind.CATEGORY:
        if op not in ("==", "!="):
            raise RuleError(f"{where}: {name} is a category; compare it with == or !=")
        if raw not in info.categories:
            raise RuleError(f"{where}: {name} is one of {', '.join(info.categories)}, not {raw!r}")
        return Expression(name, op, raw)
    if info.kind is Kind.FLAG:
        lowered = raw.lower()
        if lowered not in ("true", "false") or op not in ("==", "!="):
            raise RuleError(f"{where}: {name} is a flag; use '{name}' or '{name} == false'")
        return Expression(name, op, 1.0 if lowered == "true" else 0.0)
    try:
        number = float(raw)
    except ValueError:
        raise RuleError(f"{where}: {name} is a number; {raw!r} is not") from None
    if not math.isfinite(number):
        raise RuleError(f"{where}: {raw!r} is not a finite number")
    return Expression(name, op, number)


@dataclass(frozen=True, slots=True)
class WindowRule:
    """An aggregate of one signal over a rolling window, per group."""

    name: str
    expression: Expression
    aggregate: str
    op: str
    threshold: float
    window_s: float
    warn_threshold: float | None = None
    min_samples: int = 1
    for_s: float = 0.0
    repeat_s: float = 4 * 3600.0
    no_data: str = "keep"
    no_data_for_s: float = 1800.0
    group_by: tuple[str, ...] = GROUP_LABELS
    where: tuple[tuple[str, str], ...] = ()
    notify: tuple[str, ...] = ()
    runbook_url: str | None = None

    @property
    def pipeline(self) -> bool:
        """Watches the daemon itself: evaluated at the clock, never grouped."""
        return self.expression.info.pipeline

    @property
    def groups(self) -> tuple[str, ...]:
        return () if self.pipeline else self.group_by

    def breaches(self, value: float, threshold: float) -> bool:
        return OPS[self.op](value, threshold)

    def describe(self) -> str:
        return f"{self.aggregate}({self.expression}) {self.op} {self.threshold:g}"


LAYERS: tuple[str, ...] = (
    "retrieval",
    "generation",
    "index",
    "abstention",
    "judge",
    "pipeline",
)
# Signals the LLM judge writes: alerts on them are held while the judge is unhealthy.
JUDGE_SIGNALS: frozenset[str] = frozenset(
    {"faithfulness", "citation_accuracy", "critical_unsupported"}
)
# The rules that say the judge is unhealthy; their alerts carry the layer `judge` (the
# eval owner's route), and while one fires the alerts on JUDGE_SIGNALS are held.
JUDGE_HEALTH_RULES: frozenset[str] = frozenset(
    {"judge_error_rate_high", "judge_agreement_low", "judge_canary_low"}
)


@dataclass(frozen=True, slots=True)
class Route:
    """Where a firing window alert goes when its triage blames `layer`: `notify` instead of
    the rule's own notifiers; only for `rules`, when it names any
    (docs/alerts.md#routes-by-layer)."""

    layer: str
    notify: tuple[str, ...]
    rules: tuple[str, ...] = ()

    def matches(self, rule: str, layer: str | None) -> bool:
        return layer == self.layer and (not self.rules or rule in self.rules)


@dataclass(frozen=True, slots=True)
class TraceRule:
    """A condition on one trace, notified at once (capped per hour, then a digest)."""

    name: str
    expression: Expression
    where: tuple[tuple[str, str], ...] = ()
    max_per_hour: int = 20
    notify: tuple[str, ...] = ()
    runbook_url: str | None = None

    def matches(self, values: Mapping[str, Value], labels: Mapping[str, str]) -> bool:
        if any(labels.get(key) != wanted for key, wanted in self.where):
            return False
        return self.expression.value(values) == 1.0


def check_window_rule(rule: WindowRule) -> WindowRule:
    """Raise RuleError when the parts of a rule do not fit together."""
    where = f"alerts.rules[{rule.name}]"
    _check_expression(rule, where)
    _check_thresholds(rule, where)
    _check_durations(rule, where)
    _check_labels(rule, where)
    return rule


def _check_expression(rule: WindowRule, where: str) -> None:
    """The aggregate and the op are known, and fit the signal's kind."""
    expression = rule.expression
    if rule.aggregate not in AGGREGATES:
        raise RuleError(f"{where}.aggregate: {rule.aggregate!r} is not one of {AGGREGATES}")
    if rule.op not in OPS:
        raise RuleError(f"{where}.op: {rule.op!r} is not one of {tuple(OPS)}")
    if rule.aggregate == "rate" and not expression.is_flag:
        raise RuleError(
            f"{where}.aggregate: rate needs a flag; {expression} is not one "
            f"(compare it, e.g. '{expression.signal} > 0')"
        )
    if expression.info.kind is Kind.CATEGORY and expression.op is None:
        raise RuleError(
            f"{where}.signal: {expression.signal} is a category; compare it, "
            f"e.g. '{expression.signal} == {expression.info.categories[-1]}'"
        )


def _check_thresholds(rule: WindowRule, where: str) -> None:
    """Finite thresholds; a warning threshold crossed on the way to the page."""
    for key, number in (("threshold", rule.threshold), ("warn_threshold", rule.warn_threshold)):
        if number is not None and not math.isfinite(number):
            raise RuleError(f"{where}.{key}: must be a finite number")
    if rule.warn_threshold is None:
        return
    if rule.op in ("==", "!="):
        raise RuleError(f"{where}.warn_threshold: not with op {rule.op}")
    # The warning must come first on the way to the page.
    if rule.breaches(rule.warn_threshold, rule.threshold) or (
        rule.warn_threshold == rule.threshold
    ):
        raise RuleError(
            f"{where}.warn_threshold: {rule.warn_threshold:g} must be crossed before "
            f"threshold {rule.threshold:g} (op {rule.op})"
        )


def _check_durations(rule: WindowRule, where: str) -> None:
    """The window, the sample count, the durations and the no-data policy."""
    if rule.window_s <= 0:
        raise RuleError(f"{where}.window: must be longer than 0s")
    if rule.min_samples < 1:
        raise RuleError(f"{where}.min_samples: must be at least 1")
    if rule.for_s < 0 or rule.repeat_s < 0 or rule.no_data_for_s < 0:
        raise RuleError(f"{where}: durations cannot be negative")
    if rule.no_data not in ("keep", "ok", "alert"):
        raise RuleError(f"{where}.no_data: {rule.no_data!r} is not keep, ok or alert")


def _check_labels(rule: WindowRule, where: str) -> None:
    """group_by and where name known dimensions; a rule on the daemon itself filters none."""
    for label in rule.group_by:
        if label not in DIMENSIONS:
            raise RuleError(f"{where}.group_by: {label!r} is not one of {', '.join(DIMENSIONS)}")
        if rule.group_by.count(label) > 1:
            raise RuleError(f"{where}.group_by: {label!r} is named twice")
    _check_where(rule.where, where)
    if rule.pipeline and rule.where:
        # The daemon's own samples carry no labels: a filter would match none of them.
        raise RuleError(
            f"{where}.where: {rule.expression.signal} is a sample of the daemon, "
            "not of a trace; it has no dimensions"
        )


def _check_where(pairs: tuple[tuple[str, str], ...], where: str) -> None:
    for key, _ in pairs:
        if key not in DIMENSIONS:
            raise RuleError(f"{where}.where: {key!r} is not one of {', '.join(DIMENSIONS)}")


def check_trace_rule(rule: TraceRule) -> TraceRule:
    where = f"alerts.trace_rules[{rule.name}]"
    if not rule.expression.is_flag:
        raise RuleError(
            f"{where}.when: {rule.expression} is not a flag "
            f"(compare it, e.g. '{rule.expression.signal} < 0.5')"
        )
    if rule.expression.info.pipeline:
        raise RuleError(f"{where}.when: {rule.expression.signal} is not a signal of a trace")
    if rule.max_per_hour < 1:
        raise RuleError(f"{where}.max_per_hour: must be at least 1")
    _check_where(rule.where, where)
    return rule


def _window(
    name: str,
    signal: str,
    aggregate: str,
    op: str,
    page: float,
    warn: float | None,
    window_s: float,
    min_samples: int,
    for_s: float = 120.0,
    group_by: tuple[str, ...] = GROUP_LABELS,
) -> WindowRule:
    return WindowRule(
        name=name,
        expression=parse_expression(signal, f"default rule {name}"),
        aggregate=aggregate,
        op=op,
        threshold=page,
        warn_threshold=warn,
        window_s=window_s,
        min_samples=min_samples,
        for_s=for_s,
        group_by=group_by,
    )


def default_window_rules() -> tuple[WindowRule, ...]:
    """The rules that apply when none is configured (per environment and query type; the
    share of answer-looking traces skipped per environment: a change of trace shape shows
    in every query type at once, and a skipped trace has none)."""
    return (
        _window("faithfulness_low", "faithfulness", "mean", "<", 0.80, 0.85, 1800, 20),
        _window("ungrounded_rate_high", "ungrounded", "rate", ">", 0.05, 0.03, 900, 50),
        _window("low_band_rate_high", "confidence_band == LOW", "rate", ">", 0.30, 0.20, 1800, 50),
        _window("crag_low_rate_high", "crag_grade == LOW", "rate", ">", 0.25, 0.15, 1800, 50),
        _window(
            "ghost_citation_rate_high", "invalid_citations > 0", "rate", ">", 0.02, 0.01, 1800, 50
        ),
        _window("pipeline_lag_high", "lag_s", "max", ">", 600, 300, 300, 1),
        _window("judge_error_rate_high", "judge_error", "rate", ">", 0.20, 0.10, 1800, 10),
        # Read hourly: the last read within two hours decides; kappa only over >= 30 pairs.
        _window("judge_agreement_low", "judge_kappa", "min", "<", 0.4, None, 7200, 1, for_s=0),
        # The canary's last run, written hourly while fresh: three misses in twelve fire.
        _window(
            "judge_canary_low", "judge_canary_agreement", "min", "<", 0.8, None, 7200, 1, for_s=0
        ),
        _window("scores_dropped", "scores_dropped", "count", ">", 0, None, 900, 1, for_s=0),
        _window("stale_citation_rate", "stale_citations > 0", "rate", ">", 0.05, 0.02, 1800, 50),
        # Refusing a fifth of the questions is a knowledge base that lacks them or a retrieval
        # that stopped finding them; an over-refusal is evidence found and turned down.
        _window("refusal_rate_high", "abstained", "rate", ">", 0.30, 0.20, 1800, 50),
        _window("over_refusal_rate_high", "over_refusal", "rate", ">", 0.05, 0.02, 1800, 50),
        _window(
            "skip_rate_high",
            "skipped",
            "rate",
            ">",
            0.50,
            0.20,
            1800,
            50,
            group_by=("environment",),
        ),
    )


def default_trace_rules() -> tuple[TraceRule, ...]:
    return (
        TraceRule(
            name="critical_claim_unsupported",
            expression=parse_expression("critical_unsupported", "default trace rule"),
        ),
    )
