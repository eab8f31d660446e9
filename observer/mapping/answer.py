"""Which generation answered, and the answer the user got (docs/trace-convention.md#the-answer).

The answer is a text the model wrote for the user: the output of the last generation in
tree order, unless that one called a tool or its output is a placeholder an
instrumentation wrote in place of the completion; then the generation that continued after
the tool results (its prompt holds them) answered, and with none the final answer is not in
the trace (a skip). The text is then checked against the root's output: what the app
returned, out of a structured completion's envelope when the model wrote one. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from observer.mapping.decode import as_str, decode
from observer.mapping.evidence import normalised, reduced, strings_in
from observer.mapping.messages import PLACEHOLDERS, answer_of, tool_calls_in, tool_results_in
from observer.mapping.rules import (
    ANSWER_CONFIRMED,
    ANSWER_DIFFERS,
    ANSWER_IS_ROOT,
    ANSWER_NO_ROOT_OUTPUT,
    MappingRules,
    Observation,
    Skip,
)
from observer.mapping.tree import ancestors, sibling_key


def is_generation(observation: Observation, rules: MappingRules) -> bool:
    """An observation the mapping reads as a generation (names, when set, else types)."""
    if rules.generation_names:
        return observation.get("name") in rules.generation_names
    return observation.get("type") in rules.generation_types


@dataclass(frozen=True, slots=True)
class Answered:
    """The generation that answered: its place in the tree order, its text, which shape of
    its output held it, and how it was told from the others."""

    index: int
    text: str
    shape: str
    which: str


def answering_generation(ordered: Sequence[Observation], rules: MappingRules) -> Answered | Skip:
    places = [i for i, o in enumerate(ordered) if is_generation(o, rules)]
    if not places:
        return Skip("no_generation", "no generation observation")
    read = {i: answer_of(ordered[i].get("output"), rules) for i in places}
    not_answers = _not_answers(ordered, places, read)
    last = places[-1]
    which = f"the last of {len(places)} generations" if len(places) > 1 else "the generation"
    if last not in not_answers:
        text, shape = read[last]
        if not text or not text.strip():
            return Skip("no_answer_text", "generation output holds no text")
        return Answered(last, text, shape, which)
    # The last one called a tool or holds a placeholder. The clock may have ordered it after
    # the answer: one that wrote text in the same millisecond is the answer (a tool call
    # never is); else the one that went on after tool results, if one did.
    tied = [
        i
        for i in places
        if i not in not_answers
        and (read[i][0] or "").strip()
        and _moment(ordered[i]) == _moment(ordered[last])
    ]
    if tied:
        text, shape = read[tied[-1]]
        assert text is not None
        return Answered(
            tied[-1],
            text,
            shape,
            "the generation that wrote text (another called a tool at the same time)",
        )
    after_tools = [
        (sum(1 for _ in tool_results_in(ordered[i].get("input"))), i)
        for i in places
        if i not in not_answers and (read[i][0] or "").strip()
    ]
    after_tools = [(n, i) for n, i in after_tools if n]
    if after_tools:
        _, index = max(after_tools)
        text, shape = read[index]
        assert text is not None
        return Answered(index, text, shape, "the generation that went on after the tool results")
    return Skip(
        "no_final_answer",
        f"the last generation {not_answers[last]}: the final answer is not in the trace",
    )


def _not_answers(
    ordered: Sequence[Observation],
    places: Sequence[int],
    read: Mapping[int, tuple[str | None, str]],
) -> dict[int, str]:
    """Generations whose output is no answer, and why: a tool call, or a placeholder (a
    known one, or one text recorded for generations that were asked different things and
    are not a wrapper and the call it wraps, which record one completion twice)."""
    found: dict[int, str] = {}
    same: dict[str, list[int]] = {}
    for i in places:
        text = (read[i][0] or "").strip()
        if text:
            same.setdefault(normalised(text).lower(), []).append(i)
    repeated = {text for text, group in same.items() if _apart(ordered, group)}
    for i in places:
        text = (read[i][0] or "").strip()
        folded = normalised(text).lower()
        if text and (folded in PLACEHOLDERS or folded in repeated):
            found[i] = f"recorded a placeholder ({text[:60]!r}) as its output"
            continue
        calls = tool_calls_in(ordered[i].get("output"))
        if calls and not text:
            found[i] = f"called a tool ({', '.join(sorted(set(calls))[:3])})"
    return found


def _moment(observation: Observation) -> tuple[Any, ...]:
    return sibling_key(observation)[:2]


def _apart(ordered: Sequence[Observation], group: Sequence[int]) -> bool:
    """Two of these generations were asked different things, neither nested in the other."""
    if len(group) < 2:
        return False
    nested = {i: ancestors(ordered[i], ordered) for i in group}
    for a in group:
        for b in group:
            if a < b and ordered[a].get("input") != ordered[b].get("input"):
                ids = (as_str(ordered[a].get("id")), as_str(ordered[b].get("id")))
                if ids[0] not in nested[b] and ids[1] not in nested[a]:
                    return True
    return False


# What the user got is usually all of it; a part shorter than this is no evidence.
_MIN_PART = 20


def user_answer(text: str, root: Observation, generation: Observation) -> tuple[str, str, str]:
    """The answer the user got: (text, how, check). The root's output, when it holds the
    generation's text or a part of it; else the generation's, reduced out of a structured
    completion's envelope."""
    envelope = reduced(text)
    fallback = (envelope[0], envelope[1]) if envelope is not None else (text, "")
    if root is generation:
        return fallback[0], fallback[1], ANSWER_IS_ROOT
    output = decode(root.get("output"))
    if output is None or output == "":
        return fallback[0], fallback[1], ANSWER_NO_ROOT_OUTPUT
    held = [s for s in strings_in(output) if s.strip()]
    shown = [normalised(s) for s in held]
    whole = normalised(text)
    if any(whole in s for s in shown):
        return text, "", ANSWER_CONFIRMED
    if envelope is not None and any(normalised(envelope[0]) in s for s in shown):
        return envelope[0], envelope[1], ANSWER_CONFIRMED
    parts = [h for h, n in zip(held, shown, strict=True) if len(n) >= _MIN_PART and n in whole]
    if parts:
        return max(parts, key=len), "the part the root's output holds", ANSWER_CONFIRMED
    return fallback[0], fallback[1], ANSWER_DIFFERS


def name_of(observation: Observation) -> str:
    return as_str(observation.get("name")) or as_str(observation.get("id")) or "?"


def first_str(first: Observation, second: Observation, key: str) -> str | None:
    """A dimension (docs/trace-convention.md#dimensions) of the first observation, else
    of the second: release and version are the trace's (its root first), model and prompt
    the answering generation's."""
    return as_str(first.get(key)) or as_str(second.get(key)) or None


# Prompt versions are small counters; a larger number is no version (bounded for storage).
_MAX_VERSION = 2**31 - 1


def prompt_version(generation: Observation, root: Observation) -> int | None:
    """The version beside the prompt name that was read (the generation's when it names a
    prompt, else the root's); None without a prompt name."""
    holder = next((o for o in (generation, root) if as_str(o.get("promptName"))), None)
    if holder is None:
        return None
    version: Any = holder.get("promptVersion")
    if isinstance(version, bool):
        return None
    if isinstance(version, str) and version.strip().isdigit() and len(version.strip()) < 12:
        version = int(version)
    if isinstance(version, int) and 0 <= version <= _MAX_VERSION:
        return version
    return None
