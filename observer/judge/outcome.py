"""From verdicts to the judge's scores (docs/scores.md, docs/judge.md). Pure.

Never NaN, never a vacuous 1.0: with no claims there is no faithfulness
score, only `no_claims`; with no cited claim there is no citation accuracy.
A claim holding a number, a date or an amount is critical; an unsupported
critical claim sets `critical_unsupported`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from observer.judge.agreement import Judge
from observer.judge.identity import judge_metadata
from observer.judge.protocol import Claim, Verdict
from observer.model import RagRecord, ScoreEvent
from observer.scores import catalogue, score_events_of
from observer.scores.catalogue import Producer, ScoreEntry

JUDGE_SCORE_NAMES = catalogue.names_of(Producer.JUDGE)
_CRITICAL_RE = re.compile(
    r"[0-9０-９]|[$€£¥￥₹]|%|"
    r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\b|"
    r"[一二三四五六七八九十百千万亿两]+\s*(?:元|块|万|亿|年|月|日|天|周|小时|分钟|个|次|倍|人)",
)


def is_critical(text: str) -> bool:
    """A claim with a number, a date or an amount: wrong ones do the most harm."""
    return _CRITICAL_RE.search(text) is not None


@dataclass(frozen=True, slots=True)
class JudgeResult:
    trace_id: str
    claims: tuple[Claim, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    error: str | None = None
    unsupported: tuple[str, ...] = field(default=())

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def abstained(self) -> bool | None:
        return None if self.error else not self.claims

    @property
    def judged(self) -> tuple[Verdict, ...]:
        """The verdicts the LLM gave (the funnel's decided claims are not among them)."""
        return tuple(v for v in self.verdicts if v.supported is not None)

    @property
    def decided(self) -> tuple[Verdict, ...]:
        """Claims the funnel decided without the LLM: their cited chunks are missing or stale."""
        return tuple(v for v in self.verdicts if v.supported is None)

    @property
    def faithfulness(self) -> float | None:
        judged = self.judged
        if self.error or not judged:
            return None
        return sum(bool(v.supported) for v in judged) / len(judged)

    @property
    def citation_accuracy(self) -> float | None:
        if self.error:
            return None
        cited = [v for v in self.verdicts if v.cited_support is not None]
        return sum(bool(v.cited_support) for v in cited) / len(cited) if cited else None

    @property
    def critical_unsupported(self) -> bool | None:
        if self.error:
            return None
        return bool(self.critical_claims())

    def critical_claims(self) -> list[str]:
        by_id = {c.id: c for c in self.claims}
        return [
            by_id[v.id].text
            for v in self.verdicts
            if v.supported is False and is_critical(by_id[v.id].text)
        ]


def _quote(texts: Sequence[str], budget: int = 300) -> str:
    out: list[str] = []
    used = 0
    for text in texts:
        short = text if len(text) <= 80 else text[:77] + "..."
        if used + len(short) > budget:
            out.append(f"+{len(texts) - len(out)} more")
            break
        out.append(f'"{short}"')
        used += len(short)
    return "; ".join(out)


def _claims(count: int) -> str:
    return f"{count} claim" if count == 1 else f"{count} claims"


def _reasons(decided: Sequence[Verdict]) -> str:
    """What the funnel found for the claims it decided, each distinct reason once."""
    reasons = list(dict.fromkeys(v.reason for v in decided if v.reason))
    shown = "; ".join(reasons[:3]) + (f"; +{len(reasons) - 3} more" if len(reasons) > 3 else "")
    return f"not supported without asking the judge ({shown})"


def judge_score_events(
    record: RagRecord, result: JudgeResult, judge: Judge | None = None
) -> list[ScoreEvent]:
    """The judge's scores, with the same id and timestamp rules as every score; with
    `judge`, each one's metadata says which judge wrote it (observer.judge.identity)."""
    if result.error:
        return []
    by_id = {c.id: c for c in result.claims}
    judged = result.judged
    unsupported = [by_id[v.id].text for v in judged if not v.supported]
    decided = result.decided
    entries: list[ScoreEntry] = []
    faithfulness = result.faithfulness
    if faithfulness is not None:
        supported = len(judged) - len(unsupported)
        note = f"; unsupported: {_quote(unsupported)}" if unsupported else ""
        if decided:
            note += f"; {_claims(len(decided))} not judged: cited chunks missing or changed"
        entries.append(
            catalogue.FAITHFULNESS.entry(
                faithfulness,
                f"{supported}/{len(judged)} claims supported by the context{note}",
            )
        )
    accuracy = result.citation_accuracy
    if accuracy is not None:
        cited = [v for v in result.verdicts if v.cited_support is not None]
        wrong = [by_id[v.id].text for v in cited if not v.cited_support and v.supported is not None]
        note = f"; not in their cited sources: {_quote(wrong)}" if wrong else ""
        if decided:
            note += f"; {_claims(len(decided))} {_reasons(decided)}"
        entries.append(
            catalogue.CITATION_ACCURACY.entry(
                accuracy,
                f"{len(cited) - len(wrong) - len(decided)}/{len(cited)} cited claims "
                f"supported by their citations{note}",
            )
        )
    critical = result.critical_claims()
    entries.append(
        catalogue.CRITICAL_UNSUPPORTED.entry(
            1.0 if critical else 0.0,
            f"unsupported claims with numbers, dates or amounts: {_quote(critical)}"
            if critical
            else "no unsupported claim with a number, date or amount",
        )
    )
    entries.append(
        catalogue.NO_CLAIMS.entry(
            1.0 if not result.claims else 0.0,
            "the judge found no factual claim in the answer"
            if not result.claims
            else f"{len(result.claims)} claims",
        )
    )
    return score_events_of(record, entries, judge_metadata(judge) if judge else None)
