"""`observer explain`'s output: the explanation as JSON (`--json`) and as lines for a
person reading a terminal (the rules followed, the provenance checks, the record,
its signals and scores). Reads nothing: `observer.app.explain` made the explanation."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from observer.signals.output import signals_json
from observer.views.words import counted

if TYPE_CHECKING:
    from observer.app.explain import Explanation
    from observer.mapping.rules import Provenance, Step
    from observer.model import ScoreEvent


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
QUESTION_VERDICTS = {
    "asked": "",
    "cut": "cut out of a message that also shows the passages",
    "unverified": "UNVERIFIED: the message shows the passages too; left empty",
}
SCORES_VERDICTS = {
    "recorded": "recorded: the score signals are computed",
    "not_recorded": (
        "NOT RECORDED: no source carries a retrieval score; rerank_top1, crag_grade, "
        "confidence, band and ungrounded are unknown and not posted"
    ),
    "no_sources": "no sources: an answer without evidence",
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
    question = QUESTION_VERDICTS.get(provenance.question_check, provenance.question_check)
    scores = SCORES_VERDICTS.get(provenance.scores, provenance.scores)
    rows = [
        ("question", provenance.question or "-", question),
        ("answer", provenance.answer or "-", answer),
        ("sources", provenance.sources or "-", sources),
        ("scores", scores, ""),
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
    observations = counted(explanation.observations, "observation")
    lines = [f"trace {explanation.trace_id}: {observations}, {outcome}"]
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
