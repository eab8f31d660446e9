"""`observer discover`: what observer makes of a sample of traces, per trace name.

`discover` is pure: traces (observations grouped by trace id) and the mapping
rules in, a `Discovery` out. Per trace name: how many traces, how many look
like answers (scored, or skipped with a generation: the traces
`skip_rate_high` counts, `alerts.history.answer_looking`), how many the
mapping scores, the skip reasons, and where the question, the answer and
the sources were found (the most common rule of each part, from
`explain_trace`'s steps).

When the default convention cannot read a name's answers (`no_generation` on
traces with an LLM-looking observation, `no_answer_text`,
`malformed_sources`, `citations_without_sources`), it looks at the
observations for what would read them (an observation name, a key) and
proposes `[mapping]` keys, MappingSettings' own (`observer.mapping.proposals`, per
trace; here the one most traces of a name ask for). Each proposal is tried:
`rules_with` builds `MappingRules` from the keys as the config does
(`rules_from_settings`), the whole sample is mapped again, and the result
(scored before -> after, traces that scored before and no longer would) is
part of the Discovery, with the `[mapping]` TOML block to paste.
`observer.views.discover` renders it (lines for a terminal, JSON, and the few
lines `observer check` prints of it).

The I/O is `read_sample` (recent traces from Langfuse, a page at a time) and
`sample_from_file`; the rest reads nothing.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from observer.alerts.history import answer_looking as skipped_answer
from observer.app.explain import read_traces_file
from observer.mapping.answer import is_generation
from observer.mapping.convention import Explained, explain_trace, find_root
from observer.mapping.decode import as_str
from observer.mapping.proposals import Proposal, last_step, proposals, refuted
from observer.mapping.rules import MappingRules, Skip, Step
from observer.times import parse_duration, parse_time

if TYPE_CHECKING:
    from observer.config import Settings
    from observer.sources.langfuse import LangfuseSource

Observation = Mapping[str, Any]
Traces = Mapping[str, Sequence[Observation]]
RulesWith = Callable[[Mapping[str, list[str]]], MappingRules]

# The [mapping] keys a suggestion may set (MappingSettings' list keys).
MAPPING_KEYS = (
    "generation_types",
    "generation_names",
    "retriever_types",
    "retriever_names",
    "question_keys",
    "answer_keys",
    "sources_keys",
    "text_keys",
    "chunk_id_keys",
    "score_keys",
)
# Skips a mapping may cure: the trace has what observer needs, under names it does not read.
FIXABLE = frozenset(
    {
        "no_generation",
        "no_answer_text",
        "malformed_sources",
        "citations_without_sources",
        "sources_unverified",
    }
)
PARTS = ("question", "answer", "sources")

_COUNT = re.compile(r"\b\d+ ")
# The mapping's `1 document` is counted with its `3 documents`.
_ONE_DOCUMENT = re.compile(r"\b1 ((?:OpenInference )?document)\b")
_EARLIEST = datetime.min.replace(tzinfo=UTC)


# -- what one trace tells -------------------------------------------------------------


def trace_name(observations: Sequence[Observation]) -> str:
    """The trace's name: its root's `traceName`, else the root's name."""
    root = find_root(observations)
    if root is None:
        return "(no root observation)"
    return as_str(root.get("traceName")) or as_str(root.get("name")) or "(unnamed)"


def is_answer(result: Explained) -> bool:
    """Scored, or skipped as a trace that had a generation: the answers `skip_rate_high`
    counts (alerts.history.answer_looking), so discover's share is the alert's."""
    outcome = result.result
    return not isinstance(outcome, Skip) or skipped_answer(outcome.reason)


def rule_of(step: Step) -> str:
    """A step's rule as a per-name summary counts it: counts of things dropped."""
    return _COUNT.sub("N ", _ONE_DOCUMENT.sub(r"N \1s", step.rule))


def observation_of(step: Step) -> str:
    """`name (TYPE)` of a step's observation, or `-`."""
    if step.observation_id is None:
        return "-"
    return f"{step.name or '(unnamed)'} ({step.type or '?'})"


# -- the sample, per name ---------------------------------------------------------------


@dataclass
class NameReport:
    """One trace name of the sample."""

    name: str
    traces: int = 0
    answers: int = 0
    scored: int = 0
    skips: Counter[str] = field(default_factory=Counter)
    found: dict[str, Counter[str]] = field(default_factory=dict)  # part -> rule -> traces
    # (part, rule) -> `name (TYPE)` of the observation it read -> traces
    found_at: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    proposals: list[Proposal] = field(default_factory=list)
    notes: Counter[str] = field(default_factory=Counter)  # skips no mapping key cures
    # Proposals left out because the records they make fail the content checks: why.
    refused: dict[str, str] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)  # skip reason -> a trace id
    scored_after: int | None = None  # with the suggestion
    # The content checks' verdicts on its answers: "sources all", "answer confirmed" ...
    checks: Counter[str] = field(default_factory=Counter)

    @property
    def skipped(self) -> int:
        return sum(self.skips.values())


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A [mapping] that reads more of the sample, tried on it."""

    mapping: dict[str, list[str]]  # the keys it changes, each its whole new list
    proposals: tuple[Proposal, ...]
    scored_before: int
    scored_after: int
    lost: tuple[str, ...]  # trace ids scored before and not with it
    toml: str  # the [mapping] block to paste (every key that differs from the default)


@dataclass(frozen=True, slots=True)
class Discovery:
    traces: int
    names: tuple[NameReport, ...]
    suggestion: Suggestion | None
    partial: int = 0  # traces left out: their root was not in the window read
    hook: bool = False  # a mapping hook builds the records: the convention is not used

    @property
    def answers(self) -> int:
        return sum(n.answers for n in self.names)

    @property
    def scored(self) -> int:
        return sum(n.scored for n in self.names)

    @property
    def skips(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for report in self.names:
            total.update(report.skips)
        return total

    @property
    def answers_skipped(self) -> int:
        return sum(n.answers - n.scored for n in self.names)

    @property
    def checks(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for report in self.names:
            total.update(report.checks)
        return total


def _explain_all(traces: Traces, rules: MappingRules) -> dict[str, Explained]:
    return {trace_id: explain_trace(trace_id, obs, rules) for trace_id, obs in traces.items()}


def _scored(results: Mapping[str, Explained]) -> set[str]:
    return {t for t, r in results.items() if not isinstance(r.result, Skip)}


def _with(
    mapping: dict[str, list[str]],
    additions: Iterable[Proposal],
    rules: MappingRules,
    generation_names: Sequence[str],
) -> bool:
    """Add proposals to `mapping` (whole lists, from `rules`); whether anything changed."""
    changed = False
    for proposal in additions:
        if proposal.key not in mapping:
            current = list(getattr(rules, proposal.key))
            if proposal.key == "generation_names" and not current:
                # Names replace types: the generations read today must stay generations.
                current = list(generation_names)
            mapping[proposal.key] = current
        if proposal.value not in mapping[proposal.key]:
            mapping[proposal.key].append(proposal.value)
            changed = True
    return changed


def _most_common(found: Iterable[Proposal]) -> list[Proposal]:
    """Per key, the value most traces asked for (ties: the first seen)."""
    counted = Counter((p.key, p.value) for p in found)
    best: dict[str, tuple[str, int]] = {}
    why: dict[tuple[str, str], str] = {}
    for proposal in found:
        why.setdefault((proposal.key, proposal.value), proposal.why)
    for (key, value), count in counted.items():
        if key not in best or count > best[key][1]:
            best[key] = (value, count)
    return [Proposal(key, value, why[(key, value)]) for key, (value, _) in best.items()]


def mapping_toml(rules: MappingRules) -> str:
    """The `[mapping]` block giving `rules`: every list key that differs from the default,
    one line each (a JSON array of strings is a TOML array of basic strings)."""
    default = MappingRules()
    lines = ["[mapping]"]
    for key in MAPPING_KEYS:
        if getattr(rules, key) != getattr(default, key):
            lines.append(f"{key} = {json.dumps(list(getattr(rules, key)), ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def discover(traces: Traces, rules: MappingRules, rules_with: RulesWith) -> Discovery:
    """The sample per trace name, and a [mapping] suggestion tried on it (or None)."""
    results = _explain_all(traces, rules)
    reports: dict[str, NameReport] = {}
    for trace_id, observations in traces.items():
        name = trace_name(observations)
        _count(reports.setdefault(name, NameReport(name)), trace_id, results[trace_id])
    if rules.hook is not None:
        return Discovery(len(traces), _ordered(reports), None, hook=True)

    generation_names = _generation_names(traces, results, rules)
    merged: dict[str, list[str]] = {}
    chosen: list[Proposal] = []
    for name, report in reports.items():
        group = {t: o for t, o in traces.items() if trace_name(o) == name}
        _propose(report, group, results, rules, rules_with, generation_names)
        if report.proposals:
            _with(merged, report.proposals, rules, generation_names)
            chosen += report.proposals
    if not merged:
        return Discovery(len(traces), _ordered(reports), None)
    after_rules = rules_with(merged)
    after = _explain_all(traces, after_rules)
    for name, report in reports.items():
        report.scored_after = sum(
            1
            for t, o in traces.items()
            if trace_name(o) == name and not isinstance(after[t].result, Skip)
        )
    before_ids, after_ids = _scored(results), _scored(after)
    suggestion = Suggestion(
        mapping=merged,
        proposals=tuple(chosen),
        scored_before=len(before_ids),
        scored_after=len(after_ids),
        lost=tuple(sorted(before_ids - after_ids)),
        toml=mapping_toml(after_rules),
    )
    return Discovery(len(traces), _ordered(reports), suggestion)


def _count(report: NameReport, trace_id: str, result: Explained) -> None:
    """One trace of the sample, counted in its name's report."""
    report.traces += 1
    report.answers += is_answer(result)
    if isinstance(result.result, Skip):
        report.skips[result.result.reason] += 1
        report.examples.setdefault(result.result.reason, trace_id)
    else:
        report.scored += 1
    if result.provenance is not None:
        report.checks[f"sources {result.provenance.sources_check}"] += 1
        report.checks[f"answer {result.provenance.answer_check}"] += 1
    for part in PARTS:
        step = last_step(result, part)
        if step is not None:
            rule = rule_of(step)
            report.found.setdefault(part, Counter())[rule] += 1
            report.found_at.setdefault((part, rule), Counter())[observation_of(step)] += 1


def _generation_names(
    traces: Traces, results: Mapping[str, Explained], rules: MappingRules
) -> list[str]:
    """The names of the generations the sample's answer-looking traces hold, first seen first."""
    names: list[str] = []
    for trace_id, observations in traces.items():
        if not is_answer(results[trace_id]):
            continue
        for observation in observations:
            name = as_str(observation.get("name"))
            if name and is_generation(observation, rules) and name not in names:
                names.append(name)
    return names


def _propose(
    report: NameReport,
    group: Traces,
    results: Mapping[str, Explained],
    rules: MappingRules,
    rules_with: RulesWith,
    generation_names: Sequence[str],
) -> None:
    """A name's proposals, each round tried on its traces; the skips no key cures noted."""
    mapping: dict[str, list[str]] = {}
    group_results = {t: results[t] for t in group}
    for _round in range(4):  # one key may uncover the next (a name, then its answer key)
        current = rules_with(mapping) if mapping else rules
        found = [
            p
            for t, observations in group.items()
            for p in proposals(observations, group_results[t], current)
        ]
        best = _sound(
            _most_common(found), mapping, current, group, rules_with, generation_names, report
        )
        if not _with(mapping, best, current, generation_names):
            break
        report.proposals += [p for p in best if p not in report.proposals]
        group_results = _explain_all(group, rules_with(mapping))
    for result in group_results.values():
        if isinstance(result.result, Skip) and result.result.reason in FIXABLE:
            report.notes[f"{result.result.reason}: {result.result.detail}"] += 1


def _sound(
    found: list[Proposal],
    mapping: Mapping[str, list[str]],
    current: MappingRules,
    group: Traces,
    rules_with: RulesWith,
    generation_names: Sequence[str],
    report: NameReport,
) -> list[Proposal]:
    """The proposals whose records pass the content checks, each applied to the name's
    traces on its own: one that makes a record the checks refute (its answer not the
    generated text, the answer or a tool call's arguments among its sources) is left out,
    noted with why (docs/explain.md#observer-discover)."""
    kept = []
    for proposal in found:
        trial = {k: list(v) for k, v in mapping.items()}
        _with(trial, [proposal], current, generation_names)
        results = _explain_all(group, rules_with(trial))
        wrong = [why for t, r in results.items() if (why := refuted(group[t], r)) is not None]
        if wrong:
            report.refused[f"{proposal.key} + {proposal.value!r}"] = (
                f"{Counter(wrong).most_common(1)[0][0]} ({len(wrong)} of {len(group)} traces)"
            )
        else:
            kept.append(proposal)
    return kept


def _ordered(reports: Mapping[str, NameReport]) -> tuple[NameReport, ...]:
    return tuple(sorted(reports.values(), key=lambda r: (-r.traces, r.name)))


def rules_from_settings(settings: Settings) -> RulesWith:
    """MappingRules from [mapping] keys the way the config builds them (validated)."""
    from observer.config import MappingSettings

    def rules_with(mapping: Mapping[str, list[str]]) -> MappingRules:
        section = MappingSettings(**{**settings.mapping.model_dump(), **mapping})
        return settings.model_copy(update={"mapping": section}).mapping_rules()

    return rules_with


# -- reading the sample ----------------------------------------------------------------


def since_start(text: str, now: datetime) -> datetime:
    """`--since`: a duration back from `now` (`1h`, `30m`, `2d`) or an ISO-8601 time."""
    try:
        return now - parse_duration(text)
    except ValueError:
        moment = parse_time(text)
        if moment is None:
            raise ValueError(
                f"not a duration or an ISO-8601 time: {text!r} (use e.g. 30m, 1h, 2d, "
                "2026-11-28T00:00:00Z)"
            ) from None
        return moment


@dataclass(frozen=True, slots=True)
class TraceSample:
    traces: dict[str, list[dict[str, Any]]]
    partial: int = 0


def read_sample(source: LangfuseSource, start: datetime, end: datetime, limit: int) -> TraceSample:
    """The newest `limit` traces with their root in [start, end), a page at a time.

    Pages come newest first, so a trace is complete once its root has been read;
    reading stops after the page where the `limit`-th root showed. Traces whose
    root was not read (it started before the window) are left out, counted."""
    found: dict[str, list[dict[str, Any]]] = {}
    rooted: list[str] = []
    for page in source.pages(start, end):
        for observation in page:
            trace_id = str(observation.get("traceId"))
            found.setdefault(trace_id, []).append(observation)
            if observation.get("isRootObservation") and trace_id not in rooted:
                rooted.append(trace_id)
        if len(rooted) >= limit:
            break
    kept = rooted[:limit]
    return TraceSample({t: found[t] for t in kept}, partial=len(set(found) - set(rooted)))


def sample_from_file(path: Path, start: datetime | None, limit: int) -> TraceSample:
    """The newest `limit` traces of a file of observations (root at or after `start`)."""
    traces = read_traces_file(path)

    def root_start(observations: Sequence[Observation]) -> datetime | None:
        root = find_root(observations)
        return parse_time(root.get("startTime")) if root is not None else None

    starts = {t: root_start(o) for t, o in traces.items()}
    kept = [t for t in traces if start is None or ((s := starts[t]) is not None and s >= start)]
    kept.sort(key=lambda t: starts[t] or _EARLIEST, reverse=True)
    return TraceSample({t: traces[t] for t in kept[:limit]})
