"""Which sources the cited sentences rest on, and source concentration (docs/signals.md).

Pure. A cited sentence is a substantive sentence with at least one valid
reference (docs/signals.md#sentences-and-coverage); only its valid refs count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from observer.model import Concentration, Sentence, Source


def cited_sources(sentences: Sequence[Sentence], n_sources: int) -> tuple[int, ...]:
    """The source numbers the cited sentences' valid refs point to: sorted, each once."""
    found = {r for s in sentences if s.cited for r in s.refs if 0 < r <= n_sources}
    return tuple(sorted(found))


def _doc(source: Source) -> str | None:
    return source.doc_id or None  # an empty doc_id names no document


def concentration(sentences: Sequence[Sentence], sources: Sequence[Source]) -> Concentration:
    """How much of the answer rests on its most-cited document alone.

    Each cited sentence rests on the documents of the sources its valid refs
    point to (a source without a doc_id is an unknown document, never the
    top one). The most-cited document is the doc_id cited by the most
    sentences; a tie goes to the one more sentences rest on alone, then to
    the smallest doc_id, so the value does not depend on the order of
    sentences or sources.
    """
    n = len(sources)
    per_sentence = [
        frozenset(_doc(sources[r - 1]) for r in s.refs if 0 < r <= n) for s in sentences if s.cited
    ]
    citing: Counter[str] = Counter()
    alone: Counter[str] = Counter()
    for docs in per_sentence:
        citing.update(d for d in docs if d is not None)
        if len(docs) == 1:
            (only,) = docs
            if only is not None:
                alone[only] += 1
    cited_docs = tuple(sorted(citing))
    if not cited_docs:
        return Concentration(cited_docs, None, 0, len(per_sentence), None)
    top = min(cited_docs, key=lambda d: (-citing[d], -alone[d], d))
    ratio = alone[top] / len(per_sentence) if len(per_sentence) >= 2 else None
    return Concentration(cited_docs, top, alone[top], len(per_sentence), ratio)
