"""Which sources the cited sentences rest on, and source concentration (docs/signals.md).

Pure. A cited sentence is a substantive sentence with at least one valid
reference (docs/signals.md#sentences-and-coverage); only its valid refs count.
The citation pass (`observer.signals.sentences.split_answer`) hands over the
refs of its cited sentences, so concentration never walks the sentences again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from observer.model import Concentration, Sentence, Source


def cited_sources(sentences: Sequence[Sentence], n_sources: int) -> tuple[int, ...]:
    """The source numbers the cited sentences' valid refs point to: sorted, each once."""
    found = {r for s in sentences if s.cited for r in s.refs if 0 < r <= n_sources}
    return tuple(sorted(found))


def concentration(sentences: Sequence[Sentence], sources: Sequence[Source]) -> Concentration:
    """How much of the answer rests on its most-cited document alone (see `of_cited_refs`)."""
    return of_cited_refs([s.refs for s in sentences if s.cited], sources)


def of_cited_refs(
    cited_refs: Iterable[tuple[int, ...]], sources: Sequence[Source]
) -> Concentration:
    """Concentration from the refs of each cited sentence, as the citation pass found them.

    Each cited sentence rests on the documents of the sources its valid refs
    point to (a source without a doc_id is an unknown document, never the
    top one). The most-cited document is the doc_id cited by the most
    sentences; a tie goes to the one more sentences rest on alone, then to
    the smallest doc_id, so the value does not depend on the order of
    sentences or sources. Sentences citing the same refs are counted together:
    an answer repeats a handful of ref lists.
    """
    n = len(sources)
    docs_of = [source.doc_id or None for source in sources]  # an empty doc_id names no document
    citing: Counter[str] = Counter()
    alone: Counter[str] = Counter()
    n_cited = 0
    for refs, count in Counter(cited_refs).items():
        n_cited += count
        docs = {docs_of[r - 1] for r in refs if 0 < r <= n}
        for doc in docs:
            if doc is not None:
                citing[doc] += count
        if len(docs) == 1:
            (only,) = docs
            if only is not None:
                alone[only] += count
    cited_docs = tuple(sorted(citing))
    if not cited_docs:
        return Concentration(cited_docs, None, 0, n_cited, None)
    top = min(cited_docs, key=lambda d: (-citing[d], -alone[d], d))
    ratio = alone[top] / n_cited if n_cited >= 2 else None
    return Concentration(cited_docs, top, alone[top], n_cited, ratio)
