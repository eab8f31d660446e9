"""`observer explain`: what observer makes of one trace, and why (docs/explain.md).

`explain` is pure: one trace's observations, the mapping rules and the signal
parameters in, an `Explanation` out: the rules the mapping followed
(`observer.mapping.convention.explain_trace`), the record, its signals and
the scores `observer run` would push for it, with their comments
(`observer.scores.score_events`, the daemon's own), or the skip and the
observation it stopped at. `explanation_json` and `explanation_lines` render
it; neither reads anything.

The I/O is thin and at the end: `read_traces_file` reads observations from a
file (a JSON list, JSON lines, or an object holding them under
`observations` or `data`) grouped by trace, and `fetch_trace` reads one trace
from Langfuse through `LangfuseSource.pages`. Their errors:

    ExplainError
     +-- BadTraceFile     the file is missing, unreadable or not observations (exit 2)
     +-- TraceNotFound    no observation of that trace where it looked (exit 1)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from observer.mapping.convention import (
    MappingRules,
    Provenance,
    Skip,
    Step,
    explain_trace,
    find_root,
)
from observer.model import RagRecord, ScoreEvent, Signals
from observer.scores import score_events
from observer.signals import SignalParams, compute
from observer.signals.output import signals_json
from observer.times import iso, parse_time

if TYPE_CHECKING:
    from observer.sources.langfuse import LangfuseSource

Observation = Mapping[str, Any]


class ExplainError(Exception):
    """A trace could not be read for explaining."""


class BadTraceFile(ExplainError):
    """The file named is missing, unreadable, or does not hold observations."""


class TraceNotFound(ExplainError):
    """No observation of the trace asked for where observer looked."""


@dataclass(frozen=True, slots=True)
class Explanation:
    """What observer made of one trace: the rules followed, then a record or a skip."""

    trace_id: str
    observations: int
    steps: tuple[Step, ...]
    record: RagRecord | None = None
    signals: Signals | None = None
    scores: tuple[ScoreEvent, ...] = ()
    skip: Skip | None = None
    provenance: Provenance | None = None

    @property
    def stopped_at(self) -> Step | None:
        """A skip's last step that named an observation: where the mapping stopped."""
        if self.skip is None:
            return None
        named = [step for step in self.steps if step.observation_id is not None]
        return named[-1] if named else None


def explain(
    trace_id: str,
    observations: Sequence[Observation],
    rules: MappingRules,
    params: SignalParams,
) -> Explanation:
    """One trace as the daemon would score it, with the trail of rules behind it.

    The record's (and its scores') timestamp is the trace's earliest root, as the
    daemon sets it (docs/scores.md#ids-and-timestamps); the resolver and the judge
    are not asked."""
    explained = explain_trace(trace_id, observations, rules)
    if isinstance(explained.result, Skip):
        return Explanation(
            trace_id,
            len(observations),
            explained.steps,
            skip=explained.result,
            provenance=explained.provenance,
        )
    record = explained.result
    root = find_root(observations)
    root_start = parse_time(root.get("startTime")) if root is not None else None
    if root_start is not None:
        record = replace(record, timestamp=iso(root_start))
    signals = compute(record, params)
    scores = tuple(score_events(record, signals, params))
    return Explanation(
        trace_id,
        len(observations),
        explained.steps,
        record,
        signals,
        scores,
        provenance=explained.provenance,
    )


def step_json(step: Step) -> dict[str, Any]:
    return {
        "part": step.part,
        "rule": step.rule,
        "observation_id": step.observation_id,
        "name": step.name,
        "type": step.type,
    }


def score_json(score: ScoreEvent) -> dict[str, Any]:
    return {
        "name": score.name,
        "value": score.value,
        "data_type": score.data_type,
        "comment": score.comment,
        "id": score.id,
        "observation_id": score.observation_id,
        "timestamp": score.timestamp,
    }


def _plain(value: Any) -> Any:
    """JSON's own types: tuples as lists (what the object reads back as)."""
    if isinstance(value, dict):
        return {key: _plain(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(inner) for inner in value]
    return value


def explanation_json(explanation: Explanation) -> dict[str, Any]:
    """The explanation as one JSON object (`observer explain --json`)."""
    skip = explanation.skip
    stopped = explanation.stopped_at
    return {
        "trace_id": explanation.trace_id,
        "observations": explanation.observations,
        "outcome": "skipped" if skip is not None else "scored",
        "steps": [step_json(step) for step in explanation.steps],
        "skip": None
        if skip is None
        else {
            "reason": skip.reason,
            "detail": skip.detail,
            "stopped_at": None if stopped is None else step_json(stopped),
        },
        "provenance": None if explanation.provenance is None else asdict(explanation.provenance),
        "record": None if explanation.record is None else _plain(asdict(explanation.record)),
        "signals": None if explanation.signals is None else signals_json(explanation.signals),
        "scores": [score_json(score) for score in explanation.scores],
    }


def describe_observation(step: Step) -> str:
    """`name (TYPE, id)`, as far as the step knows them."""
    if step.observation_id is None:
        return "-"
    kind = ", ".join(part for part in (step.type, step.observation_id) if part)
    return f"{step.name or '(unnamed)'} ({kind})"


def _short(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return str(value)


_FLAGS = (
    "environment",
    "query_type",
    "needs_fallback",
    "low_confidence",
    "app_crag_grade",
    "rerank_scores",
)


# What each verdict of the content checks means to a reader (docs/trace-convention.md).
SOURCES_VERDICTS = {
    "all": "confirmed: the answer's prompt shows every one of them",
    "some": "partly confirmed: the answer's prompt shows some of them",
    "none": "CONTRADICTED: the answer's prompt shows none of the document lists",
    "not_recorded": "not checked: the answer's prompt is not recorded (masked?); the rules chose",
    "prompt_passages": "from the prompt: no retrieval was traced; chunk ids unknown",
    "no_retrieval": "none: the trace holds no documents and the prompt no numbered passages",
}
ANSWER_VERDICTS = {
    "confirmed": "confirmed: the root's output holds it",
    "differs": "NOT confirmed: the root's output holds other text",
    "no_root_output": "not checked: the root has no output",
    "root": "the generation is the root",
}


def provenance_lines(provenance: Provenance) -> list[str]:
    """Where each part came from and what the content checks said of it."""
    sources = SOURCES_VERDICTS.get(provenance.sources_check, provenance.sources_check)
    answer = ANSWER_VERDICTS.get(provenance.answer_check, provenance.answer_check)
    rows = [
        ("question", provenance.question or "-", ""),
        ("answer", provenance.answer or "-", answer),
        ("sources", provenance.sources or "-", sources),
    ]
    lines = ["", "provenance (where each part came from, checked by content)"]
    for part, where, verdict in rows:
        lines.append(f"  {part:<9} {where}")
        if verdict:
            lines.append(f"  {'':<9} {verdict}")
    return lines


def explanation_lines(explanation: Explanation, *, text_chars: int = 160) -> list[str]:
    """The explanation for a person reading a terminal: rules, record, signals, scores."""
    skip = explanation.skip
    outcome = f"SKIPPED {skip.reason}" if skip is not None else "scored"
    lines = [f"trace {explanation.trace_id}: {explanation.observations} observations, {outcome}"]
    lines += ["", "how observer read it (rule by rule)"]
    for step in explanation.steps:
        if step.part == "skip":
            continue
        lines.append(f"  {step.part:<9} {describe_observation(step)}: {step.rule}")
    if explanation.provenance is not None:
        lines += provenance_lines(explanation.provenance)
    if skip is not None:
        stopped = explanation.stopped_at
        lines += ["", f"skipped: {skip.reason}" + (f" ({skip.detail})" if skip.detail else "")]
        if stopped is not None:
            lines.append(
                f"  stopped at {describe_observation(stopped)}, reading the {stopped.part}"
            )
        return lines
    record, signals = explanation.record, explanation.signals
    assert record is not None and signals is not None
    lines += ["", "record"]
    lines.append(f"  question  {record.question or '(empty)'}")
    answer = record.answer.splitlines() or [""]
    lines.append(f"  answer    {answer[0]}")
    lines += [f"            {line}" for line in answer[1:]]
    lines.append(f"  sources   {len(record.sources)}" + (":" if record.sources else " (none)"))
    for number, source in enumerate(record.sources, start=1):
        about = [
            f"{key} {_value(value)}"
            for key, value in (
                ("chunk", source.chunk_id),
                ("doc", source.doc_id),
                ("score", source.score),
                ("title", source.title),
            )
            if value is not None
        ]
        lines.append(f"    [{number}] " + (", ".join(about) + ": " if about else ""))
        lines[-1] += _short(source.text, text_chars)
    flags = [f"{key}={_value(getattr(record, key))}" for key in _FLAGS]
    lines.append("  flags     " + " ".join(f for f in flags if not f.endswith("=-")))
    lines += ["", "signals"]
    for key, value in signals_json(signals).items():
        if key not in ("trace_id", "sentences"):
            lines.append(f"  {key:<23} {_value(value)}")
    lines.append("  sentences")
    for sentence in signals.citations.sentences:
        mark = "cited" if sentence.cited else ("uncited" if sentence.substantive else "-")
        lines.append(f"    {mark:<8} {_short(sentence.text, text_chars)}")
    lines += ["", f"scores (on observation {record.observation_id}, as observer run pushes them)"]
    for score in explanation.scores:
        lines.append(f"  {score.name:<23} {_value(score.value):<10} {score.comment}")
    return lines


# -- reading traces ------------------------------------------------------------------


def _observations_in(data: Any, path: Path) -> list[Any]:
    if isinstance(data, list):
        return data
    if isinstance(data, Mapping):
        for key in ("observations", "data"):
            if isinstance(data.get(key), list):
                return list(data[key])
        if "traceId" in data:
            return [data]
        raise BadTraceFile(
            f"{path}: a JSON object without `observations` or `data` (a list of observations)"
        )
    raise BadTraceFile(f"{path}: holds a JSON {type(data).__name__}, not observations")


def parse_observations(text: str, path: Path) -> list[dict[str, Any]]:
    """Observations from a file's text: one JSON document, or JSON lines (each an
    observation, or a page holding them under `data`)."""
    try:
        items = _observations_in(json.loads(text), path)
    except json.JSONDecodeError:
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items += _observations_in(json.loads(line), path)
            except json.JSONDecodeError as error:
                raise BadTraceFile(
                    f"{path}: line {number} is not JSON ({error.msg}, column {error.colno})"
                ) from None
    observations = []
    for index, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise BadTraceFile(f"{path}: item {index} is a {type(item).__name__}, not an object")
        if not isinstance(item.get("traceId"), str) or not item["traceId"]:
            raise BadTraceFile(f"{path}: item {index} has no traceId")
        observations.append(item)
    if not observations:
        raise BadTraceFile(f"{path}: holds no observations")
    return observations


def by_trace(observations: Iterable[Observation]) -> dict[str, list[dict[str, Any]]]:
    """Observations grouped by `traceId`, in the order their traces first appear."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for observation in observations:
        grouped.setdefault(str(observation.get("traceId")), []).append(dict(observation))
    return grouped


def read_traces_file(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Every trace a file of observations holds; BadTraceFile naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadTraceFile(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise BadTraceFile(f"{path}: cannot be read: {error}") from None
    return by_trace(parse_observations(text, path))


def trace_from_file(path: Path, trace_id: str) -> list[dict[str, Any]]:
    """One trace of a file of observations; TraceNotFound says which traces it holds."""
    traces = read_traces_file(path)
    if trace_id in traces:
        return traces[trace_id]
    held = sorted(traces)
    listed = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
    raise TraceNotFound(f"trace {trace_id} is not in {path} (it holds {listed})")


def fetch_trace(
    source: LangfuseSource, trace_id: str, start: datetime, end: datetime, where: str
) -> list[dict[str, Any]]:
    """One trace's observations started in [start, end), every page read.

    Raises TraceNotFound (saying where it looked) and the source's RemoteErrors."""
    observations = [o for page in source.pages(start, end, trace_id=trace_id) for o in page]
    if not observations:
        raise TraceNotFound(
            f"trace {trace_id} not found in Langfuse {where}: no observation started "
            f"between {iso(start)} and {iso(end)} (an older trace: widen --since)"
        )
    return observations
