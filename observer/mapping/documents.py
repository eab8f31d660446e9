"""Lists of documents wherever a trace holds them, read into Sources, and copies merged
(docs/trace-convention.md#the-sources).

A document is an object with a text (`text`, `content`, `page_content`, in any case style)
and, looked up on it and then in its `metadata` (LangChain) or `meta` (Haystack), a chunk
id, a score, a doc id, a title. Lists come as JSON, as JSON inside a JSON string (a tool's
result), as a Python repr of a list of dicts (read with a bounded literal parse, never
`eval`), as parallel columns (DSPy), in OpenInference's retrieval attributes, or as several
passages joined in one text block. Pure.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any, NamedTuple

from observer.mapping.decode import as_float, as_str, decode
from observer.mapping.evidence import normalised_start, passages_in
from observer.mapping.messages import content_text
from observer.mapping.rules import MappingRules, Skip
from observer.model import Source

# How deep under an output's keys document lists are looked for (a graph state's field, a
# component's result: `{"ranker": {"documents": [...]}}`).
LIST_DEPTH = 3
# A Python repr longer than this is not parsed (ast's parser is not linear in nesting).
MAX_REPR_CHARS = 200_000


# Bounded: the keys come from the traces, and a daemon sees new ones for as long as it
# runs (an id used as a key); the usual few hundred stay.
@lru_cache(maxsize=4096)
def _fold(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


@lru_cache(maxsize=256)  # the rules' key lists
def _folded(keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(_fold(k) for k in keys)


class _Item:
    """A document's keys folded once (`relevance_score` is `relevanceScore` in a JavaScript
    app's documents), and its metadata's, for every lookup of `Source` fields."""

    __slots__ = ("inner", "own")

    def __init__(self, item: Mapping[str, Any]) -> None:
        self.own = _index(item)
        self.inner: list[dict[str, Any]] = []
        for nested in ("metadata", "meta"):  # LangChain documents, Haystack's
            value = item.get(nested)
            if isinstance(value, dict):
                self.inner.append(_index(value))

    def first(self, keys: Sequence[str]) -> Any:
        """The first of `keys` on the item, else in its metadata."""
        return _first_in((self.own, *self.inner), _folded(tuple(keys)))


def _first_in(indexes: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> Any:
    """The first of `keys` in the first index that holds one."""
    for index in indexes:
        for key in keys:
            value = index.get(key)
            if value is not None:
                return value
    return None


def _index(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object's values by folded key; of keys that fold alike, the first."""
    index: dict[str, Any] = {}
    for key, value in obj.items():
        if value is not None and isinstance(key, str):
            index.setdefault(_fold(key), value)
    return index


def is_document(item: Any, rules: MappingRules) -> bool:
    """An object with a text (a chat message, an object with a `role`, is not one)."""
    if not isinstance(item, dict) or "role" in item:
        return False
    return text_of(item, rules) is not None


def text_of(item: Mapping[str, Any], rules: MappingRules) -> str | None:
    """A document's text: under a text key as written, else in another case style or in
    its metadata."""
    for key in rules.text_keys:
        value = item.get(key)
        if value is not None:
            text = as_str(value)
            if text is not None:
                return text
    return as_str(_Item(item).first(rules.text_keys))


class Read(NamedTuple):
    """A list of documents as read: its Sources, and how good each one's score is (the
    rank of its score key: a reranker's own before a first-stage similarity)."""

    sources: tuple[Source, ...]
    score_ranks: tuple[int, ...]


def read_documents(
    items: Sequence[Mapping[str, Any]],
    rules: MappingRules,
    texts: Sequence[str] | None = None,
) -> Read:
    """Each document's Source (its fields on it, else in its metadata) and score rank;
    `texts`, when given, each item's text (`DocumentList.texts`, used when it has one for
    every item)."""
    ids, scores = _folded(rules.chunk_id_keys), _folded(rules.score_keys)
    sources = []
    ranks = []
    if texts is not None and len(texts) != len(items):
        texts = None
    for at, raw in enumerate(items):
        text = texts[at] if texts is not None else text_of(raw, rules)
        if text is None:
            continue
        source, rank = _read_one(raw, text, ids, scores)
        sources.append(source)
        ranks.append(rank)
    return Read(tuple(sources), tuple(ranks))


def _read_one(
    raw: Mapping[str, Any], text: str, ids: tuple[str, ...], scores: tuple[str, ...]
) -> tuple[Source, int]:
    """One document's Source and score rank, its keys folded in one pass (`_Item`'s
    lookups): a field on the document, else in its `metadata`, else its `meta`; of the ids,
    any on the document before any in its metadata; of the scores, the first key in order
    of preference wherever it sits."""
    merged: dict[str, Any] = {}  # by folded key: the document's, then its metadata's
    setdefault = merged.setdefault
    chunk_id = None
    for level in (raw, raw.get("metadata"), raw.get("meta")):  # LangChain's, Haystack's
        if level is not raw and not isinstance(level, dict):
            continue
        for key, value in level.items():
            if value is not None and isinstance(key, str):
                setdefault(_fold(key), value)
        if chunk_id is None:  # only this level's ids are new: the first one found
            chunk_id = _first_in((merged,), ids)
    rank, score = len(scores), None
    for at, key in enumerate(scores):
        score = merged.get(key)
        if score is not None:
            rank = at
            break
    get = merged.get
    source = Source(  # positional: a frozen dataclass's keywords cost a dict per call
        text,
        as_str(chunk_id),
        as_str(get("docid")),
        as_str(get("title")),
        as_float(score),
        as_str(get("texthash")),
        "web" if get("origin") == "web" else "kb",
    )
    return source, rank


def to_sources(items: Sequence[Mapping[str, Any]], rules: MappingRules) -> tuple[Source, ...]:
    return read_documents(items, rules).sources


# Documents kept as parallel columns, a list of texts beside lists of ids and scores of the
# same length (DSPy's `Prediction(passages, pids, scores)`): the text keys, then the others.
_TEXT_COLUMNS = ("passages", "texts", "contexts", "context", "docs", "documents", "chunks")
_ID_COLUMNS = ("pids", "ids", "chunk_ids", "doc_ids")
_SCORE_COLUMNS = ("rerank_scores", "relevance_scores", "scores")


class DocumentList(NamedTuple):
    """A non-empty list of documents a value holds, where it sits, and each one's text (of
    parallel columns, of the rows that have one)."""

    items: list[Any]
    where: str
    texts: tuple[str, ...]


def document_texts(items: list[Any], rules: MappingRules) -> tuple[str, ...] | None:
    """Each item's text when every item is a document (`is_document`), else None."""
    texts: list[str] = []
    for item in items:
        if not isinstance(item, dict) or "role" in item:
            return None
        text = text_of(item, rules)
        if text is None:
            return None
        texts.append(text)
    return tuple(texts)


def _columns(value: dict[str, Any], rules: MappingRules) -> DocumentList | None:
    """Documents held as parallel columns: [{"text", "id", "score"}, ...] under the text
    key."""
    for key in _TEXT_COLUMNS:
        texts = value.get(key)
        if not isinstance(texts, list) or not texts:
            continue
        if not all(isinstance(t, str) and t.strip() for t in texts):
            continue
        rows: list[dict[str, Any]] = [{rules.text_keys[0]: t} for t in texts]
        for names, field_name in ((_ID_COLUMNS, "id"), (_SCORE_COLUMNS, "score")):
            for name in names:
                column = value.get(name)
                if isinstance(column, list) and len(column) == len(texts):
                    for row, item in zip(rows, column, strict=True):
                        row[field_name] = item
                    break
        found = [text_of(row, rules) for row in rows]
        return DocumentList(rows, key, tuple(t for t in found if t is not None))
    return None


def document_lists(value: Any, rules: MappingRules, where: str = "output") -> list[DocumentList]:
    """Every non-empty list of documents a decoded value holds, and where: the value itself,
    its sources keys first, then any key (a graph state's `context`, `docs`, `results` ...);
    a JSON string inside it (a tool's result) is read too."""
    found: list[DocumentList] = []
    _visit(value, where, 0, rules, found)
    return found


def _visit(value: Any, where: str, depth: int, rules: MappingRules, found: list[Any]) -> None:
    if isinstance(value, str):
        if depth and value[:1] in "[{" and value[-1:] in "]}":
            inner = decode(value)
            if not isinstance(inner, str):  # JSON in a string: a tool's result
                _visit(inner, where, depth + 1, rules, found)
        return
    if isinstance(value, list):
        texts = document_texts(value, rules) if value else None
        if texts is not None:
            found.append(DocumentList(value, where, texts))
        return
    if not isinstance(value, dict) or depth >= LIST_DEPTH:
        return
    columns = _columns(value, rules)
    if columns is not None:
        found.append(columns._replace(where=f"{where}.{columns.where}"))
    keys = [k for k in rules.sources_keys if k in value]
    keys += [k for k in value if isinstance(k, str) and k not in rules.sources_keys]
    for key in keys:
        _visit(value[key], f"{where}.{key}", depth + 1, rules, found)


def sources_of(output: Any, rules: MappingRules) -> tuple[Source, ...] | Skip:
    """The numbered sources held by a retriever's output, or why they are malformed."""
    items = decode(output)
    if items is None or items == "":
        return ()
    found = _document_list(items, rules)
    if found is None:
        if isinstance(items, dict):
            return Skip(
                "malformed_sources", "retriever output is an object without a list of sources"
            )
        return Skip(
            "malformed_sources", f"retriever output is a {type(items).__name__}, not a list"
        )
    for index, item in enumerate(found):
        if not isinstance(item, dict):
            return Skip(
                "malformed_sources", f"source {index + 1} is a {type(item).__name__}, not an object"
            )
        if not is_document(item, rules):
            return Skip("malformed_sources", f"source {index + 1} has no text")
    return to_sources(found, rules)


def _document_list(items: Any, rules: MappingRules) -> list[Any] | None:
    """The list an output holds (itself, or under a sources key)."""
    if isinstance(items, list):
        return items
    if isinstance(items, dict):
        for key in rules.sources_keys:
            if isinstance(items.get(key), list):
                return list(items[key])
    return None


# OpenInference's retrieval attributes, as Langfuse keeps them in an observation's
# metadata (flattened into dotted keys by the Observations API v2, or nested).
# A reranker span's kept documents (`reranker.output_documents`) are what the model
# saw; its `input_documents` are the candidates and are not read.
_OPENINFERENCE_RE = re.compile(
    r"^(?:attributes\.)?(retrieval\.documents|reranker\.output_documents)\.(\d+)\.document\."
    r"(id|content|score|metadata)(?:\.(.+))?$"
)


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, inner in value.items():
        dotted = f"{prefix}{key}"
        if isinstance(inner, dict):
            flat.update(_flatten(inner, dotted + "."))
        else:
            flat[dotted] = inner
    return flat


def openinference_documents(metadata: Mapping[str, Any]) -> tuple[Read, str] | None:
    """The documents of OpenInference retrieval (or reranker output) attributes in
    `metadata`, in index order, and which kind they are; None without any."""
    if "attributes" not in metadata:
        for key in metadata:  # a loop, not `any`: read for every observation of a trace
            if "retrieval" in key or "reranker" in key:
                break
        else:
            return None
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for key, value in _flatten(metadata).items():
        match = _OPENINFERENCE_RE.match(key)
        if match is None:
            continue
        kind = found.setdefault(match.group(1), {})
        document = kind.setdefault(int(match.group(2)), {"metadata": {}})
        field_name, rest = match.group(3), match.group(4)
        if field_name == "metadata":
            if rest is None:
                decoded = decode(value)
                if isinstance(decoded, dict):
                    document["metadata"].update(decoded)
            else:
                document["metadata"][rest] = decode(value)
        else:
            document[field_name] = value
    which = "reranker.output_documents" if "reranker.output_documents" in found else ""
    documents = found.get(which) or found.get("retrieval.documents") or {}
    if not documents:
        return None
    sources = []
    for index in sorted(documents):
        document = documents[index]
        text = as_str(document.get("content"))
        if text is None:
            continue
        meta = _Item(document["metadata"])
        origin = as_str(meta.first(("origin",)))
        sources.append(
            Source(
                text=text,
                chunk_id=as_str(document.get("id")) or as_str(meta.first(("chunk_id",))),
                doc_id=as_str(meta.first(("doc_id", "file_name", "document_id"))),
                title=as_str(meta.first(("title",))),
                score=as_float(document.get("score")),
                text_hash=as_str(meta.first(("text_hash",))),
                origin="web" if origin == "web" else "kb",
            )
        )
    if not sources:
        return None
    # A reranker's output scores are its own; retrieval's a first stage's similarity.
    rank = 0 if which else len(("rerank_score", "relevance_score", "score")) - 1
    return Read(tuple(sources), (rank,) * len(sources)), which or "retrieval.documents"


def payload_documents(payload: Any, rules: MappingRules) -> tuple[Read, str] | None:
    """The documents of a tool's result as a prompt shows it, and their form: a list of
    documents (JSON, JSON in a JSON string, a Python repr) or, from a text, its passages
    (numbered, or blocks between blank lines). None when the payload holds no text."""
    value = unwrapped_text(_text_parts(payload) or payload)
    if isinstance(value, (dict, list)):
        lists = document_lists(value, rules, "result")
        if lists:
            items, where, texts = lists[0]
            return read_documents(items, rules, texts), f"documents as JSON ({where})"
        return None
    if not isinstance(value, str) or not value.strip():
        return None
    embedded = embedded_list(value)
    if embedded is not None:
        lists = document_lists(embedded, rules, "result")
        if lists:
            items, where, texts = lists[0]
            return read_documents(items, rules, texts), f"documents in a text ({where})"
    numbered = passages_in(value)
    if numbered:
        items = [{rules.text_keys[0]: p} for p in numbered]
    else:
        items = _headed_blocks(value, rules)
    form = "one text" if len(items) == 1 else f"{len(items)} passages of one text"
    return read_documents(items, rules), form


def _text_parts(payload: Any) -> str | None:
    """A tool result given as content parts (`[{"type": "text", "text": ...}]`): their text."""
    if (
        isinstance(payload, list)
        and payload
        and all(
            isinstance(p, str) or (isinstance(p, dict) and p.get("type") == "text") for p in payload
        )
    ):
        return content_text(payload)
    return None


_BLANK = re.compile(r"\n[ \t]*\n")
# A block of `field_name: value` lines before a passage is its header (LlamaIndex formats a
# node for the model as its metadata lines, a blank line, then its text).
_HEADER_LINE = re.compile(r"^[ \t]*([a-z_][a-z0-9_]{0,39})[ \t]*:[ \t]*(\S.{0,199})$")


def _headed_blocks(text: str, rules: MappingRules) -> list[dict[str, Any]]:
    """The blocks of a text between blank lines, each a passage; a block of `key: value`
    lines only is the header of the passage after it, read as its fields."""
    items: list[dict[str, Any]] = []
    header: dict[str, Any] = {}
    for block in (b.strip() for b in _BLANK.split(text)):
        if not block:
            continue
        lines = block.splitlines()
        fields = [_HEADER_LINE.match(line) for line in lines]
        if len(lines) <= 8 and all(fields):
            header = {m.group(1).strip(): m.group(2).strip() for m in fields if m is not None}
            continue
        items.append({**header, rules.text_keys[0]: block})
        header = {}
    return items


# Where a list of objects may start inside a text (`Observation:\n[{'id': ...}]`).
_LIST_START = re.compile(r"\[\s*\{")


def embedded_list(text: str) -> Any:
    """The first list of objects written inside a text, as JSON or a Python literal; None
    when there is none. A bounded number of starts is tried, each read once."""
    if len(text) > MAX_REPR_CHARS:
        return None
    for tries, start in enumerate(_LIST_START.finditer(text)):
        if tries >= 8:
            break
        end = _closing(text, start.start())
        if end is None:
            continue
        value = unwrapped_text(text[start.start() : end])
        if isinstance(value, list):
            return value
    return None


def _closing(text: str, start: int) -> int | None:
    """The end of the bracketed value opening at `start`: a linear scan that skips quoted
    strings (either quote, with escapes)."""
    depth = 0
    quote = ""
    index = start
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return None


def unwrapped_text(value: Any) -> Any:
    """A value with its text decoded: JSON, JSON inside a JSON string (a tool's result
    encoded twice), or a Python literal; the text itself when it is none of these."""
    for _ in range(4):
        if not isinstance(value, str):
            return value
        decoded = decode(value)
        if decoded is value or decoded == value:
            return literal_of(value) or value
        value = decoded
    return value


def literal_of(text: str) -> Any:
    """A Python repr of a list or dict (`[{'text': ...}]`, `[Document(page_content=...)]`
    is not one), parsed as a literal; None when it is not one or is too long."""
    stripped = text.strip()
    if len(stripped) > MAX_REPR_CHARS or stripped[:1] not in "[{(" or "'" not in stripped:
        return None
    try:
        value = ast.literal_eval(stripped)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    return value if isinstance(value, (list, dict, tuple)) and not isinstance(value, str) else None


def text_key(text: str) -> str:
    """How a passage is matched across copies: its normalised start."""
    return normalised_start(text, 80)


def merge_copies(chosen: Read, copies: Sequence[Read]) -> tuple[Source, ...]:
    """The chosen list, each passage completed from the other copies of it (matched by
    text): each field from the copy that has it, a score from the copy whose score is a
    reranker's before a first-stage one; a copy without scores never hides one with them."""
    by_text: dict[str, list[tuple[Source, int]]] = {}
    for copy in copies:
        for source, rank in zip(copy.sources, copy.score_ranks, strict=True):
            by_text.setdefault(text_key(source.text), []).append((source, rank))
    merged = []
    for source, rank in zip(chosen.sources, chosen.score_ranks, strict=True):
        others = by_text.get(text_key(source.text))
        if others:
            source = _completed(source, rank, others)
        merged.append(source)
    return tuple(merged)


def _completed(source: Source, rank: int, others: list[tuple[Source, int]]) -> Source:
    changes: dict[str, Any] = {}
    for name in ("chunk_id", "doc_id", "title", "text_hash"):
        if getattr(source, name) is None:
            value = next(
                (getattr(o, name) for o, _ in others if getattr(o, name) is not None), None
            )
            if value is not None:
                changes[name] = value
    scored = [(r, o.score) for o, r in others if o.score is not None]
    if scored:
        best_rank, best = min(scored, key=lambda pair: pair[0])
        if source.score is None or best_rank < rank:
            changes["score"] = best
    return replace(source, **changes) if changes else source
