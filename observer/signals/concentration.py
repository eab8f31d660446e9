"""Which sources the cited sentences rest on, and source concentration (docs/signals.md).

Pure. A cited sentence is a substantive sentence with at least one valid
reference (docs/signals.md#sentences-and-coverage); only its valid refs count.
The citation pass (`observer.signals.sentences.split_answer`) hands over the
refs of its cited sentences, so concentration never walks the sentences again.
"""

from __future__ import annotations

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
    # Plain dicts and loops, no Counter or comprehension: this runs for every
    # answer, and those cost a Python-level call each (bench/signals.py).
    counts: dict[tuple[int, ...], int] = {}
    for refs in cited_refs:
        counts[refs] = counts.get(refs, 0) + 1
    citing: dict[str, int] = {}
    alone: dict[str, int] = {}
    n_cited = 0
    for refs, count in counts.items():
        n_cited += count
        if len(refs) == 1:  # most sentences cite one source
            r = refs[0]
            if 0 < r <= n and (doc := docs_of[r - 1]) is not None:
                citing[doc] = citing.get(doc, 0) + count
                alone[doc] = alone.get(doc, 0) + count
            continue
        docs: set[str | None] = set()
        for r in refs:
            if 0 < r <= n:
                docs.add(docs_of[r - 1])
        for doc in docs:
            if doc is not None:
                citing[doc] = citing.get(doc, 0) + count
        if len(docs) == 1:
            (only,) = docs
            if only is not None:
                alone[only] = alone.get(only, 0) + count
    cited_docs = tuple(sorted(citing))
    if not cited_docs:
        return Concentration(cited_docs, None, 0, n_cited, None)
    if len(cited_docs) == 1:
        top = cited_docs[0]
    else:
        top = min(cited_docs, key=lambda d: (-citing[d], -alone.get(d, 0), d))
    top_alone = alone.get(top, 0)
    ratio = top_alone / n_cited if n_cited >= 2 else None
    return Concentration(cited_docs, top, top_alone, n_cited, ratio)
