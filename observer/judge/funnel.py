"""The judge's funnel over the resolver's findings (docs/judge.md, the funnel). Pure.

Only fresh cited chunks go to the verdicts call: a source whose chunk is
missing from the store or changed since the answer is left out of it, and a
claim that cites only such sources is not cited-supported, decided without
an LLM call (and, its evidence gone, not judged for faithfulness). With no
findings (no resolver, or its lookup failed) every source is fresh and every
claim goes to the LLM: a resolver failure never changes what the judge does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from observer.judge.protocol import Claim, Verdict
from observer.model import RagRecord
from observer.resolver.core import ResolverFindings

_SHOWN = 10


@dataclass(frozen=True, slots=True)
class ClaimDecision:
    """Whether a claim goes to the verdicts call; when not, why it is not cited-supported."""

    needs_llm: bool
    reason: str = ""


_LLM = ClaimDecision(True)


def _ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:_SHOWN])
    return shown + (f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else "")


def claim_needs_llm(
    citations: Sequence[int], record: RagRecord, findings: ResolverFindings | None
) -> ClaimDecision:
    """False, with the reason, when every chunk the claim cites is missing or stale.

    `citations` are the claim's source numbers ([n]). An uncited claim, one
    citing any fresh, unverifiable or id-less source, and any claim without
    findings need the LLM.
    """
    if findings is None or not citations or not findings.flagged:
        return _LLM
    missing, stale = set(findings.missing), set(findings.stale)
    gone: list[str] = []
    changed: list[str] = []
    for number in sorted(set(citations)):
        if not 1 <= number <= len(record.sources):
            return _LLM
        chunk_id = record.sources[number - 1].chunk_id
        if chunk_id in missing:
            if chunk_id not in gone:
                gone.append(chunk_id)
        elif chunk_id in stale:
            if chunk_id not in changed:
                changed.append(chunk_id)
        else:
            return _LLM
    parts = []
    if gone:
        parts.append(f"cited chunks missing from the store: {_ids(gone)}")
    if changed:
        parts.append(f"cited chunks changed since the answer: {_ids(changed)}")
    return ClaimDecision(False, "; ".join(parts))


def fresh_sources(
    record: RagRecord,
    findings: ResolverFindings | None,
    numbers: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """The source numbers that may go into the verdicts call, sorted.

    All of the record's sources (or of `numbers`, e.g. one claim's
    citations) but those whose chunk is missing or stale. Sources not looked
    up (uncited, or without a chunk_id) are kept: nothing says they changed.
    """
    n = len(record.sources)
    wanted = range(1, n + 1) if numbers is None else sorted({x for x in numbers if 1 <= x <= n})
    if findings is None or not findings.flagged:
        return tuple(wanted)
    flagged = set(findings.missing) | set(findings.stale)
    return tuple(x for x in wanted if record.sources[x - 1].chunk_id not in flagged)


@dataclass(frozen=True, slots=True)
class FunnelRoute:
    """Which claims go to the verdicts call, which are decided here, with which sources."""

    asked: tuple[Claim, ...]  # their citations narrowed to fresh sources
    decided: tuple[Verdict, ...]  # not cited-supported, with the reason
    keep: tuple[int, ...] | None  # the sources the verdicts call sees; None: all of them


def route(
    claims: Sequence[Claim], record: RagRecord, findings: ResolverFindings | None
) -> FunnelRoute:
    """Split the claims of call 1 by the funnel; without flagged findings, all are asked."""
    if findings is None or not findings.flagged:
        return FunnelRoute(tuple(claims), (), None)
    asked: list[Claim] = []
    decided: list[Verdict] = []
    for claim in claims:
        decision = claim_needs_llm(claim.citations, record, findings)
        if decision.needs_llm:
            fresh = fresh_sources(record, findings, claim.citations) if claim.citations else ()
            asked.append(replace(claim, citations=fresh))
        else:
            decided.append(Verdict(claim.id, None, False, decision.reason))
    return FunnelRoute(tuple(asked), tuple(decided), fresh_sources(record, findings))
