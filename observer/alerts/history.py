"""History rows from what the pipeline and the judge found (pure).

One row per scored trace: the event time (the answer generation's start),
ids, environment, query type, the other dimensions rules may group by (`dimensions`),
and every signal value alert rules can read.
The judge's values are merged into the same row when they arrive.

An answer-looking trace that was skipped (it has a generation, but the
mapping could not read it: `no_answer_text`, `malformed_sources`, ...) gets a
row too, holding only `skipped = true` and its `skip_reason`: no rule on a
signal of answers finds a sample in it, and `skipped` is the share of such
traces among scored and skipped ones (`skip_rate_high`, mapping drift).
Traces that are not answers (`no_generation`, `no_root`, the judge's, the
observer's own, those filtered out) get none.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Final

from observer.alerts.engine import Row
from observer.alerts.rules import Value
from observer.judge.outcome import JudgeResult
from observer.model import RagRecord, Signals
from observer.resolver.core import ResolverFindings
from observer.state.rows import NO_DIMS
from observer.telemetry.metrics import NO_QUERY_TYPE
from observer.times import parse_time

# Skip reasons of traces that are not answers: no history row, never a sample of `skipped`.
NOT_ANSWERS: Final = frozenset({"no_root", "no_generation", "own_trace", "judge_environment"})


def answer_looking(reason: str) -> bool:
    """A trace skipped for `reason` had a generation: an answer observer could not read.

    Every reason counts but those of traces without an answer (`NOT_ANSWERS`) and the
    ones a filter left out (`filtered_*`): a new reason of the mapping counts by default.
    """
    return reason not in NOT_ANSWERS and not reason.startswith("filtered_")


def signal_values(signals: Signals) -> dict[str, Value]:
    cites = signals.citations
    numeric = signals.numeric
    return {
        "skipped": False,
        "confidence": signals.confidence,
        "citation_coverage": cites.coverage,
        "rerank_top1": signals.rerank_top1,
        "crag_grade": signals.crag_grade,
        "ungrounded": signals.ungrounded,
        "confidence_band": signals.confidence_band,
        "invalid_citations": float(len(cites.invalid_refs)),
        "numeric_grounding": numeric.ratio,
        "unsupported_numbers": float(numeric.numbers - numeric.grounded),
        "needs_fallback": signals.needs_fallback,
        "crag_mismatch": signals.crag_mismatch,
        "abstained": signals.abstained,
        "over_refusal": signals.over_refusal,
        "over_citation": float(signals.over_citation),
    }


def resolver_values(found: ResolverFindings) -> dict[str, Value]:
    """What the citation resolver found, when it looked the cited chunks up."""
    if not found.looked_up:
        return {}
    return {
        "missing_chunks": float(len(found.missing)),
        "stale_citations": float(len(found.stale)),
    }


def judge_values(result: JudgeResult) -> dict[str, Value]:
    """A judge error is a sample of `judge_error` and nothing else."""
    if result.error:
        return {"judge_error": True}
    return {
        "judge_error": False,
        "faithfulness": result.faithfulness,
        "citation_accuracy": result.citation_accuracy,
        "critical_unsupported": result.critical_unsupported,
    }


def event_time(record: RagRecord, fallback: datetime) -> float:
    moment = parse_time(record.timestamp) if record.timestamp else None
    return (moment or fallback).timestamp()


def dimensions(record: RagRecord, top_doc: str | None = None) -> Mapping[str, str]:
    """The record's dimensions beside environment and query type (`observer.state.rows.DIMS`),
    only those present: the prompt as `name:version` (or its name alone), `top_doc` the most
    cited document (`Signals.concentration.top_doc`)."""
    prompt = record.prompt_name
    if prompt and record.prompt_version is not None:
        prompt = f"{prompt}:{record.prompt_version}"
    found = {
        "trace_name": record.trace_name,
        "release": record.release,
        "version": record.version,
        "model": record.model,
        "prompt": prompt,
        "top_doc": top_doc,
    }
    dims = {k: v for k, v in found.items() if v}
    return dims or NO_DIMS


def trace_row(
    record: RagRecord,
    values: Mapping[str, Value],
    fallback_time: datetime,
    top_doc: str | None = None,
) -> Row:
    return Row(
        at=event_time(record, fallback_time),
        values={k: v for k, v in values.items() if v is not None},
        trace_id=record.trace_id,
        project_id=record.project_id,
        environment=record.environment or "default",
        query_type=record.query_type or NO_QUERY_TYPE,
        dims=dimensions(record, top_doc),
    )


def skip_row(
    trace_id: str,
    reason: str,
    at: datetime,
    environment: str | None,
    project_id: str | None = None,
) -> Row | None:
    """The row of a skipped trace (at its root's start), or None when it is no answer."""
    if not answer_looking(reason):
        return None
    return Row(
        at=at.timestamp(),
        values={"skipped": True, "skip_reason": reason},
        trace_id=trace_id,
        project_id=project_id,
        environment=environment or "default",
        query_type=NO_QUERY_TYPE,
    )
