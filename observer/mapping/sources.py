"""The documents the answering model saw: found by content wherever the trace holds them,
checked against its prompt, copies merged (docs/trace-convention.md#checked-by-content).

Candidates are every list of documents in the trace: under any key of any observation's
output, in OpenInference's retrieval attributes, in a tool's output, and in the tool results
of the answering generation's own prompt. When the prompt is recorded, the list it shows is
the one, numbered as it shows it, whatever its place in the tree or its timestamps; the
rules of the convention (`rules_pick`: the last list before the generation) decide only
between lists the prompt shows equally, and when the prompt is not recorded. The chosen
list is then completed from the other copies of its passages. A contradiction is a
`sources_unverified` skip naming the candidates; retrieval that left no list observer can
read is a skip naming where it looked, never an answer without evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from observer.mapping.decode import as_str, decode
from observer.mapping.documents import (
    LIST_DEPTH,
    DocumentList,
    Read,
    document_lists,
    merge_copies,
    openinference_documents,
    payload_documents,
    read_documents,
    sources_of,
    text_key,
    unwrapped_text,
)
from observer.mapping.evidence import normalised, positions, prompt_passages, prompt_text
from observer.mapping.messages import tool_call_arguments, tool_results_in
from observer.mapping.rules import (
    CHECK_ALL,
    CHECK_NO_RETRIEVAL,
    CHECK_NONE,
    CHECK_NOT_RECORDED,
    CHECK_PROMPT,
    CHECK_SOME,
    MappingRules,
    Observation,
    Skip,
    Trail,
    note,
)
from observer.mapping.tree import ancestors
from observer.model import Source


class TraceView:
    """A trace in tree order, each observation's output and metadata decoded once."""

    __slots__ = ("_lists", "_metadata", "_outputs", "_reads", "ordered", "rules")

    def __init__(self, ordered: Sequence[Observation], rules: MappingRules) -> None:
        self.ordered = ordered
        self.rules = rules
        self._outputs: dict[int, Any] = {}
        self._metadata: dict[int, Mapping[str, Any]] = {}
        self._lists: dict[int, list[DocumentList]] = {}
        self._reads: dict[int, Read] = {}

    def lists(self, index: int) -> list[DocumentList]:
        """The lists of documents an observation's output holds (`document_lists`)."""
        if index not in self._lists:
            self._lists[index] = document_lists(self.output(index), self.rules)
        return self._lists[index]

    def read(self, documents: DocumentList) -> Read:
        """A list of documents read into Sources, once per trace whoever asks."""
        found = self._reads.get(id(documents.items))
        if found is None:
            found = read_documents(documents.items, self.rules, documents.texts)
            self._reads[id(documents.items)] = found
        return found

    def output(self, index: int) -> Any:
        if index not in self._outputs:
            # JSON, JSON in a JSON string, a Python repr of a list of dicts (a tool's)
            self._outputs[index] = unwrapped_text(self.ordered[index].get("output"))
        return self._outputs[index]

    def metadata(self, index: int) -> Mapping[str, Any]:
        if index not in self._metadata:
            self._metadata[index] = metadata_of(self.ordered[index])
        return self._metadata[index]


def metadata_of(observation: Observation | None) -> Mapping[str, Any]:
    metadata = observation.get("metadata") if observation is not None else None
    if isinstance(metadata, str):
        metadata = decode(metadata)
    return metadata if isinstance(metadata, dict) else {}


class Candidate:
    """A list of documents somewhere in the trace: a candidate for what the model saw. Its
    texts are read first (what the prompt check needs); its Sources only when asked."""

    __slots__ = ("_list", "_read", "_texts", "_view", "from_text", "index", "observation", "where")

    def __init__(
        self,
        index: int,
        observation: Observation,
        where: str,
        read: Read | None = None,
        from_text: bool = False,
        documents: DocumentList | None = None,
        view: TraceView | None = None,
    ) -> None:
        self.index = index  # place in the tree order
        self.observation = observation
        self.where = where
        # Read from a text (a tool's result as passages): it competes only where no list of
        # documents does as well, and it carries no ids or scores of its own.
        self.from_text = from_text
        self._read = read
        self._list = documents
        self._view = view
        self._texts: tuple[str, ...] | None = None

    @property
    def texts(self) -> tuple[str, ...]:
        if self._texts is None:
            if self._read is not None:
                self._texts = tuple([s.text for s in self._read.sources])
            else:
                assert self._list is not None
                self._texts = self._list.texts
        return self._texts

    @property
    def read(self) -> Read:
        if self._read is None:
            assert self._view is not None and self._list is not None
            self._read = self._view.read(self._list)
        return self._read

    @property
    def sources(self) -> tuple[Source, ...]:
        return self.read.sources

    def named(self) -> str:
        name = as_str(self.observation.get("name")) or as_str(self.observation.get("id")) or "?"
        return f"{name} {self.where} ({len(self.texts)})"


def candidates(
    view: TraceView, generation: int, rules: MappingRules, tool_types: Sequence[str]
) -> list[Candidate]:
    """Every list of documents in the trace, wherever it sits: the outputs and
    OpenInference attributes of every other observation, the text results of its tools,
    and the tool results the answering generation's prompt holds."""
    found: list[Candidate] = []
    for index, observation in enumerate(view.ordered):
        if index == generation:
            continue
        for listed in view.lists(index):
            found.append(Candidate(index, observation, listed.where, documents=listed, view=view))
        documents = openinference_documents(view.metadata(index))
        if documents is not None:
            read, kind = documents
            found.append(Candidate(index, observation, f"metadata {kind}", read))
        output = view.output(index)
        if observation.get("type") in tool_types and isinstance(output, str):
            passages = payload_documents(output, rules)
            if passages is not None and passages[0].sources:
                found.append(
                    Candidate(index, observation, f"output: {passages[1]}", passages[0], True)
                )
    asked = view.ordered[generation]
    for where, payload in tool_results_in(asked.get("input")):
        documents = payload_documents(payload, rules)
        if documents is not None and documents[0].sources:
            read, form = documents
            from_text = not form.startswith("documents")
            found.append(Candidate(generation, asked, f"input: {where}, {form}", read, from_text))
    return found


def rules_pick(
    view: TraceView, before: int, rules: MappingRules, trail: Trail | None
) -> Read | Skip | None:
    """The documents the rules of the convention choose: from the last observation before
    the generation (tree order) whose output is a list of documents, of whatever type (a
    retriever, a reranker after it, an untyped function, a tool). A retriever met on the way
    back whose output is empty decides: no evidence (scored). One whose output is not such a
    list is passed over for a retriever it is nested in that holds documents; the trace is
    malformed when none does. None: no retrieval at all.

    With `retriever_names` configured, only observations of those names count.
    """
    named = bool(rules.retriever_names)
    malformed: Skip | None = None
    enclosing: set[str] = set()  # the ancestors of the malformed retriever
    for index in range(before - 1, -1, -1):
        observation = view.ordered[index]
        if named and observation.get("name") not in rules.retriever_names:
            continue
        retriever = named or observation.get("type") in rules.retriever_types
        lists = view.lists(index)
        documents = None if lists else openinference_documents(view.metadata(index))
        nested = observation.get("id") in enclosing
        if malformed is not None and (lists or documents) and not nested:
            return malformed  # an earlier step's documents, not what the model saw
        if lists:
            items, where, _ = lists[0]
            if trail is not None:  # the daemon's path keeps no trail: nothing to format
                noun = "document" if len(items) == 1 else "documents"
                note(trail, "sources", f"{where}: {len(items)} {noun}", observation)
            return view.read(lists[0])
        if documents is not None:
            read, kind = documents
            noun = "document" if len(read.sources) == 1 else "documents"
            note(
                trail,
                "sources",
                f"metadata {kind}.*: {len(read.sources)} OpenInference {noun}",
                observation,
            )
            return read
        if retriever:
            found = sources_of(observation.get("output"), rules)
            if not isinstance(found, Skip):
                note(trail, "sources", "retriever output is empty: no evidence", observation)
                return Read(found, (len(rules.score_keys),) * len(found))
            if malformed is None:
                # Nested retrievers (LlamaIndex's retrieve around _retrieve): the outer
                # may hold the documents the inner only shows as text. Only a retriever
                # it is nested in may stand in for it; else the trace is malformed.
                malformed = found
                enclosing = ancestors(observation, view.ordered)
            note(trail, "sources", f"passed over: {found.detail}", observation)
    return malformed


class _Shown(NamedTuple):
    """A candidate's documents as the prompt shows them."""

    candidate: Candidate
    at: tuple[int | None, ...]  # where each text starts in the prompt
    found: int  # how many texts the prompt shows
    whole: bool  # every one of them

    @classmethod
    def of(cls, candidate: Candidate, prompt: str) -> _Shown:
        at = tuple(positions(candidate.texts, prompt))
        found = len(at) - at.count(None)
        return cls(candidate, at, found, found == len(at))

    def numbered(self) -> Read:
        """The documents in the order the prompt shows them (those it does not, after)."""
        order = sorted(
            range(len(self.at)),
            key=lambda i: (self.at[i] is None, self.at[i] or 0, i),
        )
        read = self.candidate.read
        return Read(
            tuple(map(read.sources.__getitem__, order)),
            tuple(map(read.score_ranks.__getitem__, order)),
        )


class Found(NamedTuple):
    """What `find_sources` found: the sources (or a skip, or None: no retrieval), where they
    came from, and the content check's verdict."""

    sources: tuple[Source, ...] | Skip | None
    where: str = ""
    check: str = CHECK_NO_RETRIEVAL


def find_sources(
    view: TraceView,
    generation: int,
    rules: MappingRules,
    trail: Trail | None,
    tool_types: Sequence[str] = ("TOOL",),
    answer: str = "",
) -> Found:
    """The documents the answering model saw (docs/trace-convention.md#checked-by-content)."""
    picked = rules_pick(view, generation, rules, trail)
    asked = view.ordered[generation]
    prompt = prompt_text(asked.get("input"))
    every = candidates(view, generation, rules, tool_types)
    if prompt is None:
        # Not recorded: the rules decide, among what came before the generation.
        before = [c for c in every if c.index < generation]
        return _as_picked(picked, before, every)
    if not every:
        return _untraced(view, generation, picked, trail)
    shown = [_Shown.of(c, prompt) for c in every]
    picked_key = _picked_key(picked)

    def preference(entry: _Shown) -> tuple[int, bool, bool, bool, int]:
        is_picked = _texts_key(entry.candidate.texts) == picked_key
        structured = not entry.candidate.from_text
        return (entry.found, entry.whole, structured, is_picked, entry.candidate.index)

    ranked = sorted(shown, key=preference, reverse=True)
    best = ranked[0]
    if best.found == 0:
        if not rules.verify_sources:
            return _as_picked(picked, [c for c in every if c.index < generation], every)
        detail = "; ".join(c.named() for c in every)
        # The setting is suggested only where what it would score passes the checks.
        hint = _fallback_hint(view, picked, answer)
        return Found(
            Skip(
                "sources_unverified",
                f"the answer's prompt shows none of the document lists: {detail}{hint}",
            ),
            "",
            CHECK_NONE,
        )
    if rules.retriever_names:
        # A configured mapping is not overridden: its list stands when the prompt shows it
        # as well as any other, else the contradiction is a skip.
        mine = [e for e in shown if _texts_key(e.candidate.texts) == picked_key]
        if not mine or (mine[-1].found, mine[-1].whole) < (best.found, best.whole):
            return Found(
                Skip(
                    "sources_unverified",
                    f"mapping.retriever_names chose documents the prompt does not show "
                    f"(all of); it shows {best.candidate.named()}",
                ),
                "",
                CHECK_NONE,
            )
        best = mine[-1]
    if trail is None:
        pass  # the daemon's path keeps no trail: nothing to format
    elif _texts_key(best.candidate.texts) != picked_key:
        note(
            trail,
            "check",
            f"sources overridden by content: the prompt shows {best.candidate.where} "
            f"({best.found} of {len(best.at)} texts)",
            best.candidate.observation,
        )
    else:
        note(trail, "check", f"sources: the prompt shows {best.found} of {len(best.at)} texts")
    # Copies in the order the prompt confirms them: a score of equal rank comes from the
    # list the prompt shows best (the reranked one, not the first stage's superset).
    sources = _merged(best.numbered(), [e.candidate for e in ranked])
    observation = best.candidate.observation
    name = as_str(observation.get("name")) or as_str(observation.get("id")) or "?"
    return Found(sources, f"{name} {best.candidate.where}", CHECK_ALL if best.whole else CHECK_SOME)


def _fallback_hint(view: TraceView, picked: Read | Skip | None, answer: str) -> str:
    """` (a prompt recorded without its documents: mapping.verify_sources = false)` when the
    rules' own pick is something to score: documents, none holding the answer or a tool
    call's arguments; else nothing."""
    if not isinstance(picked, Read) or not picked.sources:
        return ""
    calls = {
        normalised(a)
        for i in range(len(view.ordered))
        for a in tool_call_arguments(view.output(i))
        if a.strip()
    }
    said = normalised(answer)[:60]
    for source in picked.sources:
        text = normalised(source.text)
        if text in calls or (len(said) >= 20 and said in text):
            return ""
    return " (a prompt recorded without its documents: mapping.verify_sources = false)"


def _as_picked(
    picked: Read | Skip | None, before: Sequence[Candidate], every: Sequence[Candidate]
) -> Found:
    """What the rules picked, the prompt not telling (not recorded, or
    `mapping.verify_sources = false`), completed from its copies."""
    if not isinstance(picked, Read):
        return Found(picked, "", CHECK_NO_RETRIEVAL)
    if not picked.sources:
        return Found((), "", CHECK_NOT_RECORDED)
    latest_first = sorted(every, key=lambda c: c.index, reverse=True)
    return Found(_merged(picked, latest_first), _where_picked(picked, before), CHECK_NOT_RECORDED)


def _merged(chosen: Read, every: Sequence[Candidate]) -> tuple[Source, ...]:
    """The chosen list completed from the copies of its passages anywhere in the trace,
    `every` best first (of copies whose scores rank alike, the first one's score)."""
    if all(s.score is not None and s.chunk_id and s.doc_id for s in chosen.sources):
        return chosen.sources  # nothing a copy could add that a signal reads
    wanted = {text_key(s.text) for s in chosen.sources}
    copies = [c.read for c in every if any(text_key(t) in wanted for t in c.texts)]
    return merge_copies(chosen, copies)


def _untraced(
    view: TraceView, generation: int, picked: Read | Skip | None, trail: Trail | None
) -> Found:
    """No list of documents anywhere: the prompt's numbered passages, when retrieval was
    not traced. `picked` is a malformed skip or an empty retriever here."""
    if isinstance(picked, Skip):
        return Found(picked, "", CHECK_NONE)
    if isinstance(picked, Read):
        return Found((), "", CHECK_NO_RETRIEVAL)
    asked = view.ordered[generation]
    passages = prompt_passages(asked.get("input"))
    if passages and not _unread_lists(view, generation):
        note(
            trail,
            "sources",
            f"no traced retrieval: the prompt's {len(passages)} numbered passages",
            asked,
        )
        sources = tuple(Source(text=text) for text in passages)
        return Found(sources, "the prompt's numbered passages", CHECK_PROMPT)
    return Found(None, "", CHECK_NO_RETRIEVAL)


def _unread_lists(view: TraceView, before: int) -> bool:
    """An output before the generation holds a list of objects the rules do not read as
    documents: retrieval was traced, in a shape a mapping must name (not the prompt's
    passages, which carry no ids or scores)."""

    def holds(value: Any, depth: int) -> bool:
        if isinstance(value, list):
            return bool(value) and all(
                isinstance(item, dict) and "role" not in item for item in value
            )
        if isinstance(value, dict) and depth < LIST_DEPTH:
            return any(holds(inner, depth + 1) for inner in value.values())
        return False

    return any(holds(view.output(i), 0) for i in range(before))


def retrieval_signs(
    view: TraceView, generation: int, rules: MappingRules, tool_types: Sequence[str]
) -> list[str]:
    """What shows that retrieval happened although no documents were found: a retriever
    or a tool in the trace, tool results in the answer's prompt (docs/trace-convention.md:
    absence of evidence is not evidence of absence)."""
    signs = []
    for observation in view.ordered:
        kind = observation.get("type")
        named = rules.retriever_names and observation.get("name") in rules.retriever_names
        if named or kind in rules.retriever_types or kind in tool_types:
            signs.append(f"{kind or 'observation'} {as_str(observation.get('name')) or '?'}")
    results = [where for where, _ in tool_results_in(view.ordered[generation].get("input"))]
    if results:
        signs.append(f"{len(results)} tool result(s) in the answer's prompt ({results[0]})")
    return signs


def _texts_key(texts: tuple[str, ...]) -> tuple[str, ...]:
    return _sorted_texts(texts)


@lru_cache(maxsize=256)
def _sorted_texts(texts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(texts))


def _picked_key(picked: Read | Skip | None) -> tuple[str, ...] | None:
    if isinstance(picked, Read) and picked.sources:
        return _texts_key(tuple([s.text for s in picked.sources]))
    return None


def _where_picked(picked: Read, found: Sequence[Candidate]) -> str:
    key = _picked_key(picked)
    named = [c for c in found if _texts_key(c.texts) == key]
    return named[-1].named() if named else ""


__all__ = ["Candidate", "Found", "TraceView", "find_sources", "metadata_of", "retrieval_signs"]
