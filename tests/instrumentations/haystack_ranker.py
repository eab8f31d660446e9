"""The Haystack ranker component of the generator's Haystack app.

A module of its own, without ``from __future__ import annotations``: Haystack reads a
component's socket types from the live annotations of ``run``.
"""

from collections.abc import Callable

from haystack import Document, component


@component
class CrossEncoderRanker:
    """Re-scores the candidates with a fixed cross-encoder and keeps the best ``keep``."""

    def __init__(self, rerank: Callable[[str, list[str]], list[tuple[str, float]]]) -> None:
        self.rerank = rerank

    @component.output_types(documents=list[Document])
    def run(self, query: str, documents: list[Document]) -> dict[str, list[Document]]:
        """The kept documents, best first, each with its rerank score."""
        by_id = {d.id: d for d in documents}
        kept = self.rerank(query, list(by_id))
        return {
            "documents": [
                Document(id=c, content=by_id[c].content, meta=by_id[c].meta, score=s)
                for c, s in kept
            ]
        }
