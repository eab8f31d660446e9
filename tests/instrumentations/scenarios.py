"""The RAG scenarios every instrumented app runs, and what a person reading the trace expects.

Stdlib only (the tests read it too). A tiny in-memory corpus; per question the five
candidates a first-stage retrieval returns (with its similarity), the rerank scores a
fixed cross-encoder gives them, how many the reranker keeps, and the answer the model
(the local OpenAI stub) gives, citing the kept chunks with ``[n]`` in reranked order.

The expected signals are worked out by hand from docs/signals.md (they are not computed
by observer, nor by code here); each derivation is written beside its numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = ["CHUNKS", "PROJECT_ID", "SCENARIOS", "Chunk", "Scenario"]

# The Langfuse project the fixtures' observations belong to (their `projectId`).
PROJECT_ID: Final = "fixture-project"


@dataclass(frozen=True)
class Chunk:
    """One indexed chunk of the knowledge base."""

    chunk_id: str
    doc_id: str
    title: str
    text: str


CHUNKS: Final[dict[str, Chunk]] = {
    c.chunk_id: c
    for c in (
        Chunk(
            "kb-01",
            "refund-policy",
            "Refund timing",
            "Refunds are processed within 5 business days of approval.",
        ),
        Chunk(
            "kb-02",
            "refund-policy",
            "Card refunds",
            "Card refunds can take another 3 days to appear on a statement.",
        ),
        Chunk(
            "kb-03",
            "store-credit",
            "Store credit",
            "Store credit is issued instantly when a refund is approved.",
        ),
        Chunk(
            "kb-04",
            "refund-policy",
            "Refund window",
            "Refund requests must be made within 30 days of purchase.",
        ),
        Chunk(
            "kb-05",
            "exchanges",
            "Exchanges",
            "Exchanges are free for items in their original packaging.",
        ),
        Chunk(
            "kb-06",
            "backups",
            "Backup schedule",
            "Backups run every 6 hours and are kept for 14 days.",
        ),
        Chunk(
            "kb-07",
            "backups",
            "Point-in-time restore",
            "Point-in-time restore is available for the last 7 days.",
        ),
        Chunk(
            "kb-08",
            "backups",
            "Large restores",
            "Restores of databases larger than 500 GB are queued.",
        ),
        Chunk(
            "kb-09", "replication", "Replication", "Data is replicated across 3 availability zones."
        ),
        Chunk(
            "kb-10",
            "support",
            "Enterprise support",
            "Support is available 24/7 on the Enterprise plan.",
        ),
        Chunk(
            "kb-11",
            "support",
            "Starter support",
            "The Starter plan includes email support on business days.",
        ),
        Chunk(
            "kb-12",
            "support",
            "Phone support",
            "Phone support is offered only to Enterprise customers.",
        ),
    )
}


@dataclass(frozen=True)
class Scenario:
    """One question, its retrieval and rerank, the scripted answer and the expected signals."""

    key: str
    question: str
    # (chunk id, first-stage similarity), in retrieval order: the 5 candidates.
    candidates: tuple[tuple[str, float], ...]
    # chunk id -> rerank score (a fixed cross-encoder's).
    rerank: dict[str, float]
    keep: int
    answer: str
    # What a person reading the trace expects (docs/signals.md: coverage, CRAG, confidence).
    coverage: float
    invalid_refs: tuple[int, ...]
    rerank_top1: float
    crag_grade: str
    confidence: float

    def reranked(self) -> list[tuple[str, float]]:
        """The kept chunks in reranked order: the [n] numbering the model saw."""
        ordered = sorted(self.candidates, key=lambda c: self.rerank[c[0]], reverse=True)
        return [(chunk_id, self.rerank[chunk_id]) for chunk_id, _ in ordered[: self.keep]]

    def expected(self, *, chunk_ids: bool = True, scores: bool = True) -> dict[str, Any]:
        """The expectations of one trace of this scenario (ids filled in by the generator).

        ``chunk_ids`` / ``scores``: whether the trace holds the kept chunks' ids and rerank
        scores anywhere (an agent's tool may hand the model bare texts). A source's missing
        id or score is null; with no score in the trace, the score signals (rerank top1, CRAG
        grade, confidence) are unknown, null (docs/signals.md, unknown is not zero); the text
        signals (coverage, ghost refs) are the same either way.
        """
        return {
            "scenario": self.key,
            "question": self.question,
            "sources": [
                {"chunk_id": c if chunk_ids else None, "score": s if scores else None}
                for c, s in self.reranked()
            ],
            "coverage": self.coverage,
            "invalid_refs": list(self.invalid_refs),
            "rerank_top1": self.rerank_top1 if scores else None,
            "crag_grade": self.crag_grade if scores else None,
            "confidence": self.confidence if scores else None,
        }


SCENARIOS: Final[tuple[Scenario, ...]] = (
    # 4 substantive sentences, 3 cite a valid source ([1], [2], [3]): coverage 3/4.
    # Scores [0.91, 0.78, 0.42]: top1 0.91 >= high 0.65 -> HIGH. confidence 0.75 * 0.91.
    # The reranker drops kb-04 (0.35) and kb-05, and moves kb-02 above kb-04.
    Scenario(
        key="refunds",
        question="How long does a refund take?",
        candidates=(
            ("kb-01", 0.82),
            ("kb-04", 0.79),
            ("kb-02", 0.77),
            ("kb-03", 0.70),
            ("kb-05", 0.41),
        ),
        rerank={"kb-01": 0.91, "kb-02": 0.78, "kb-03": 0.42, "kb-04": 0.35, "kb-05": 0.05},
        keep=3,
        answer=(
            "Refunds are processed within 5 business days of approval [1]. "
            "Card refunds can take another 3 days to appear on your statement [2]. "
            "If you chose store credit, it is issued instantly [3]. "
            "We will email you at every step of the process."
        ),
        coverage=0.75,
        invalid_refs=(),
        rerank_top1=0.91,
        crag_grade="HIGH",
        confidence=0.6825,
    ),
    # 4 substantive sentences: [1] and [2] valid; the third cites only the ghost [9] (4
    # sources), the fourth nothing: coverage 2/4, invalid refs [9].
    # Scores [0.52, 0.45, 0.40, 0.31]: gray zone; top1 >= 0.45 but top1 - top2 = 0.07 <
    # 0.15; mean 0.42 > 0.30 -> AMBIGUOUS. confidence 0.5 * 0.52.
    Scenario(
        key="backups",
        question="How often are backups taken and how long are they kept?",
        candidates=(
            ("kb-06", 0.74),
            ("kb-07", 0.66),
            ("kb-08", 0.58),
            ("kb-09", 0.51),
            ("kb-03", 0.20),
        ),
        rerank={"kb-06": 0.52, "kb-07": 0.45, "kb-09": 0.40, "kb-08": 0.31, "kb-03": 0.02},
        keep=4,
        answer=(
            "Backups run every 6 hours and are kept for 14 days [1]. "
            "You can restore to any point in the last 7 days [2]. "
            "Large restores are handled by a dedicated queue [9]. "
            "Contact your account team to plan a migration."
        ),
        coverage=0.5,
        invalid_refs=(9,),
        rerank_top1=0.52,
        crag_grade="AMBIGUOUS",
        confidence=0.26,
    ),
    # 3 substantive sentences, 2 cited: coverage 2/3. Scores [0.24, 0.18, 0.12]: top1
    # 0.24 <= low 0.25 -> LOW. confidence (2/3) * 0.24 = 0.16. The reranker puts the third
    # candidate (kb-12) first.
    Scenario(
        key="support",
        question="Is phone support included in the Starter plan?",
        candidates=(
            ("kb-11", 0.61),
            ("kb-10", 0.57),
            ("kb-12", 0.55),
            ("kb-05", 0.30),
            ("kb-01", 0.12),
        ),
        rerank={"kb-12": 0.24, "kb-11": 0.18, "kb-10": 0.12, "kb-05": 0.03, "kb-01": 0.01},
        keep=3,
        answer=(
            "Phone support is offered only to Enterprise customers [1]. "
            "The Starter plan includes email support on business days [2]. "
            "Upgrading is the only way to get a phone line today."
        ),
        coverage=2 / 3,
        invalid_refs=(),
        rerank_top1=0.24,
        crag_grade="LOW",
        confidence=0.16,
    ),
)
