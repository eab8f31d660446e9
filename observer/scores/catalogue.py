"""Every score observer writes, declared once: name, data type, range or categories,
description and producer (docs/scores.md). Pure: no I/O.

    CATALOGUE                      every ScoreSpec, in the order observer writes them:
                                   the signals, then the resolver, then the judge
    names_of(Producer.JUDGE)       one producer's score names, in that order
    spec_of("crag_grade")          one ScoreSpec by name
    CONFIDENCE.entry(0.5, "...")   a (name, value, data type, comment) for observer.scores

The producers (`observer.scores`, `observer.resolver.scores`,
`observer.judge.outcome`) write their scores through these specs,
`observer init-langfuse` makes a Langfuse score config of each, and a test holds
docs/scores.md's tables to them.

- NUMERIC: `min_value` and `max_value`, either None for no bound (a count has no
  maximum).
- CATEGORICAL: `categories`, the labels worst first (`LOW` first), so a config
  numbering them 0, 1, 2 ... reads "higher is better".
- BOOLEAN: 1.0 or 0.0; no categories (Langfuse makes True and False itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from observer.model import Band, Grade, ScoreDataType

ScoreEntry = tuple[str, float | str, ScoreDataType, str]  # name, value, data type, comment


class Producer(StrEnum):
    """The part of observer that computes a score."""

    SIGNALS = "signals"  # observer.scores, for every answer
    RESOLVER = "resolver"  # observer.resolver.scores, with a citation resolver
    JUDGE = "judge"  # observer.judge.outcome, for judged traces


@dataclass(frozen=True, slots=True)
class ScoreSpec:
    """One score: what it is called, what values it takes, who writes it."""

    name: str
    data_type: ScoreDataType
    producer: Producer
    description: str  # for Langfuse's UI (its score config)
    min_value: float | None = None
    max_value: float | None = None
    categories: tuple[str, ...] = ()  # CATEGORICAL labels, worst first

    def entry(self, value: float | str, comment: str) -> ScoreEntry:
        """This score with a value and its comment, as `observer.scores.score_events_of`
        takes it."""
        return (self.name, value, self.data_type, comment)


def _ratio(name: str, producer: Producer, description: str) -> ScoreSpec:
    return ScoreSpec(name, "NUMERIC", producer, description, min_value=0.0, max_value=1.0)


def _count(name: str, producer: Producer, description: str) -> ScoreSpec:
    return ScoreSpec(name, "NUMERIC", producer, description, min_value=0.0)


def _flag(name: str, producer: Producer, description: str) -> ScoreSpec:
    return ScoreSpec(name, "BOOLEAN", producer, description)


def _ordinal(
    name: str, producer: Producer, worst_first: Sequence[StrEnum], description: str
) -> ScoreSpec:
    labels = tuple(label.value for label in worst_first)
    return ScoreSpec(name, "CATEGORICAL", producer, description, categories=labels)


_S, _R, _J = Producer.SIGNALS, Producer.RESOLVER, Producer.JUDGE

CONFIDENCE: Final = _ratio(
    "confidence", _S, "observer: citation coverage x rerank top1 of the answer"
)
CITATION_COVERAGE: Final = _ratio(
    "citation_coverage",
    _S,
    "observer: share of the answer's substantive sentences that cite a source",
)
RERANK_TOP1: Final = _ratio(
    "rerank_top1", _S, "observer: best retrieval score of the answer's sources, 0..1"
)
CRAG_GRADE: Final = _ordinal(
    "crag_grade",
    _S,
    (Grade.LOW, Grade.AMBIGUOUS, Grade.HIGH),
    "observer: retrieval grade (CRAG rules), LOW to HIGH",
)
UNGROUNDED: Final = _flag(
    "ungrounded", _S, "observer: 1 when retrieval is LOW and no substantive sentence cites"
)
CONFIDENCE_BAND: Final = _ordinal(
    "confidence_band",
    _S,
    (Band.LOW, Band.MEDIUM, Band.HIGH),
    "observer: confidence band, LOW to HIGH",
)
INVALID_CITATIONS: Final = _count(
    "invalid_citations",
    _S,
    "observer: count of distinct ghost references (citations of missing sources)",
)
NUMERIC_GROUNDING: Final = _ratio(
    "numeric_grounding",
    _S,
    "observer: numbers of the answer found in its cited sources / numbers",
)
CITATION_CONCENTRATION: Final = _ratio(
    "citation_concentration",
    _S,
    "observer: share of cited sentences resting on the single most-cited document",
)
MISSING_CHUNKS: Final = _count(
    "missing_chunks",
    _R,
    "observer: cited chunks no longer in the vector store (citation resolver)",
)
STALE_CITATIONS: Final = _count(
    "stale_citations",
    _R,
    "observer: cited chunks whose text changed since the answer (citation resolver)",
)
FAITHFULNESS: Final = _ratio(
    "faithfulness", _J, "observer's judge: claims supported by the context / claims"
)
CITATION_ACCURACY: Final = _ratio(
    "citation_accuracy",
    _J,
    "observer's judge: cited claims supported by their own citations / cited claims",
)
CRITICAL_UNSUPPORTED: Final = _flag(
    "critical_unsupported",
    _J,
    "observer's judge: 1 when a claim with a number, date or amount is unsupported",
)
ABSTAINED: Final = _flag(
    "abstained", _S, "observer: 1 when the answer is a refusal (I don't know, 知识库未匹配)"
)
OVER_REFUSAL: Final = _flag(
    "over_refusal", _S, "observer: 1 when the answer is a refusal although retrieval was HIGH"
)
OVER_CITATION: Final = _count(
    "over_citation",
    _S,
    "observer: count of sentences citing more distinct sources than max_refs_per_sentence",
)
NO_CLAIMS: Final = _flag(
    "no_claims", _J, "observer's judge: 1 when the judge found no factual claim in the answer"
)

CATALOGUE: Final[tuple[ScoreSpec, ...]] = (
    CONFIDENCE,
    CITATION_COVERAGE,
    RERANK_TOP1,
    CRAG_GRADE,
    UNGROUNDED,
    CONFIDENCE_BAND,
    INVALID_CITATIONS,
    NUMERIC_GROUNDING,
    CITATION_CONCENTRATION,
    ABSTAINED,
    OVER_REFUSAL,
    OVER_CITATION,
    MISSING_CHUNKS,
    STALE_CITATIONS,
    FAITHFULNESS,
    CITATION_ACCURACY,
    CRITICAL_UNSUPPORTED,
    NO_CLAIMS,
)
_BY_NAME: Final[dict[str, ScoreSpec]] = {spec.name: spec for spec in CATALOGUE}


def names_of(producer: Producer) -> tuple[str, ...]:
    """The names of `producer`'s scores, in the catalogue's order."""
    return tuple(spec.name for spec in CATALOGUE if spec.producer is producer)


def spec_of(name: str) -> ScoreSpec:
    """The spec of the score called `name`; KeyError for a name observer never writes."""
    return _BY_NAME[name]
