"""`observer explain`: what observer makes of one trace, and why (docs/explain.md).

`explain` is pure: one trace's observations, the mapping rules and the signal
parameters in, an `Explanation` out: the rules the mapping followed
(`observer.mapping.convention.explain_trace`), the record, its signals and
the scores `observer run` would push for it, with their comments
(`observer.scores.score_events`, the daemon's own), or the skip and the
observation it stopped at. `observer.views.explain` renders it (JSON, or
lines for a terminal).

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
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from observer.mapping.convention import explain_trace, find_root
from observer.mapping.rules import MappingRules, Provenance, Skip, Step
from observer.model import RagRecord, ScoreEvent, Signals
from observer.scores import score_events
from observer.signals import SignalParams, compute
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
