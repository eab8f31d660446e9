"""A running summary of many records' signals (`observer score --summary`, the demo);
its table is `observer.views.summary`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from observer.model import Signals

# The grade or band of a record without retrieval scores (docs/signals.md#unknown-is-not-zero).
UNKNOWN = "unknown"


@dataclass
class Summary:
    """Aggregates signals one record at a time; holds no per-record data."""

    records: int = 0
    bad_lines: int = 0
    coverage_sum: float = 0.0
    coverage_n: int = 0
    confidence_sum: float = 0.0
    confidence_n: int = 0
    # Records with sources but no retrieval score: no grade, band or confidence.
    scores_not_recorded: int = 0
    grades: Counter[str] = field(default_factory=Counter)
    bands: Counter[str] = field(default_factory=Counter)
    ungrounded: int = 0
    fallbacks: int = 0
    ghost_records: int = 0
    ghost_refs: int = 0
    numbers: int = 0
    unsupported_numbers: int = 0
    unsupported_records: int = 0
    grade_mismatches: int = 0
    concentration_sum: float = 0.0
    concentration_n: int = 0
    single_doc_records: int = 0
    refusals: int = 0
    over_refusals: int = 0
    over_cited_records: int = 0

    def add(self, signals: Signals) -> None:
        self.records += 1
        coverage = signals.citations.coverage
        if coverage is not None:
            self.coverage_sum += coverage
            self.coverage_n += 1
        if signals.confidence is not None:
            self.confidence_sum += signals.confidence
            self.confidence_n += 1
        self.grades[signals.crag_grade or UNKNOWN] += 1
        self.bands[signals.confidence_band or UNKNOWN] += 1
        self.ungrounded += signals.ungrounded is True
        self.scores_not_recorded += not signals.scores_recorded
        self.fallbacks += signals.needs_fallback
        self.refusals += signals.abstained
        self.over_refusals += signals.over_refusal is True
        self.over_cited_records += signals.over_citation > 0
        ghosts = len(signals.citations.invalid_refs)
        self.ghost_refs += ghosts
        self.ghost_records += ghosts > 0
        numeric = signals.numeric
        self.numbers += numeric.numbers
        self.unsupported_numbers += numeric.numbers - numeric.grounded
        self.unsupported_records += numeric.grounded < numeric.numbers
        self.grade_mismatches += signals.crag_mismatch is True
        ratio = signals.concentration.ratio
        if ratio is not None:
            self.concentration_sum += ratio
            self.concentration_n += 1
            self.single_doc_records += ratio == 1.0
