"""The JSON line shapes the file commands write: a bad input line, a judged record."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from observer.views.words import counted

if TYPE_CHECKING:
    from observer.judge.outcome import JudgeResult
    from observer.records import RecordError
    from observer.resolver.core import ResolverFindings


def bad_line_json(number: int, error: RecordError) -> str:
    """`{"line": N, "column": C, "error": ...}`: C is within input line N, when known."""
    report: dict[str, Any] = {"line": number}
    if error.column is not None:
        report["column"] = error.column
    report["error"] = str(error)
    return json.dumps(report, ensure_ascii=False)


def judge_json(
    signals_obj: dict[str, Any], result: JudgeResult, findings: ResolverFindings | None = None
) -> dict[str, Any]:
    """`observer score` output plus what the resolver (when configured) and the judge found."""
    resolver = (
        {}
        if findings is None
        else {
            "missing_chunks": list(findings.missing),
            "stale_chunks": list(findings.stale),
            "unverifiable_chunks": findings.unverifiable,
        }
    )
    return {
        **signals_obj,
        **resolver,
        "claims": [
            {"id": c.id, "text": c.text, "sentence": c.sentence, "citations": list(c.citations)}
            for c in result.claims
        ],
        "verdicts": [
            {"id": v.id, "supported": v.supported, "cited_support": v.cited_support}
            | ({"reason": v.reason} if v.reason else {})
            for v in result.verdicts
        ],
        "faithfulness": result.faithfulness,
        "citation_accuracy": result.citation_accuracy,
        "critical_unsupported": result.critical_unsupported,
        "no_claims": result.abstained,
        "calls": result.calls,
        "tokens": result.tokens,
        "judge_error": result.error,
    }


@dataclass
class JudgeTally:
    """`observer judge`'s closing line: records, judged, not judged by reason, tokens."""

    judged: int = 0
    failed: int = 0
    tokens: int = 0
    bad_lines: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    def add(self, result: JudgeResult) -> None:
        self.tokens += result.tokens
        if result.error is None:
            self.judged += 1
        else:
            self.failed += 1
            self.errors[result.error.split(":", 1)[0]] += 1

    def line(self) -> str:
        records = counted(self.judged + self.failed, "record")
        summary = f"observer judge: {records}, {self.judged} judged"
        if self.failed:
            reasons = ", ".join(f"{reason} {count}" for reason, count in self.errors.most_common())
            summary += f", {self.failed} not judged ({reasons})"
        summary += f", {counted(self.tokens, 'token')}"
        if self.bad_lines:
            summary += f", {counted(self.bad_lines, 'bad line')}"
        return summary

    def none_reached(self) -> bool:
        """Every record failed for one reason: the endpoint could not be reached."""
        return bool(self.failed) and not self.judged and set(self.errors) == {"unreachable"}
