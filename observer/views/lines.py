"""The JSON line shapes the file commands write: a bad input line, a judged record."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from observer.views.words import counted

if TYPE_CHECKING:
    from collections.abc import Callable

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


@dataclass
class _Repeated:
    more_lines: int = 0
    last_line: int = 0


@dataclass
class BadLines:
    """Reports the bad input lines of `observer score` and `observer judge`: the first
    line with a given error as `bad_line_json`, at once; a later line with the same
    error is counted, not written, and `close` writes one line per repeated error:
    `{"error": ..., "more_lines": K, "last_line": N}` (K more lines had it, N the last).
    A file of 300 records missing the same field says so in two lines, not 300."""

    write: Callable[[str], None]
    count: int = 0
    _repeated: dict[str, _Repeated] = field(default_factory=dict)

    def __call__(self, number: int, error: RecordError) -> None:
        self.count += 1
        message = str(error)
        repeated = self._repeated.get(message)
        if repeated is None:
            self._repeated[message] = _Repeated()
            self.write(bad_line_json(number, error))
        else:
            repeated.more_lines += 1
            repeated.last_line = number

    def close(self) -> None:
        """Write the count of every error seen on more than one line (once)."""
        for message, repeated in self._repeated.items():
            if repeated.more_lines:
                self.write(
                    json.dumps(
                        {
                            "error": message,
                            "more_lines": repeated.more_lines,
                            "last_line": repeated.last_line,
                        },
                        ensure_ascii=False,
                    )
                )
        self._repeated.clear()


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
