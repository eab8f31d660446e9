"""Which generation answered, and the answer the user got
(docs/trace-convention.md#the-answer-generation).

The answer is a text the model wrote for the user: the output of the last generation in
tree order, unless that one called a tool or its output is a placeholder an
instrumentation wrote in place of the completion; then the generation that continued after
the tool results (its prompt holds them) answered, and with none the final answer is not in
the trace (a skip). The text is then checked against the root's output: what the app
returned, out of a structured completion's envelope when the model wrote one. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from observer.mapping.decode import as_str, decode, decode_all
from observer.mapping.evidence import normalised, reduced, strings_in
from observer.mapping.messages import (
    PLACEHOLDERS,
    answer_of,
    tool_call_arguments,
    tool_calls_in,
    tool_results_in,
)
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


class Answered(NamedTuple):
    """The generation that answered: its place in the tree order, its text, which shape of
    its output held it, and how it was told from the others."""

    at: int
    text: str
    shape: str
    which: str


def answering_generation(
    ordered: Sequence[Observation], rules: MappingRules, root: Observation
) -> Answered | Skip:
    places: list[int] = []
    read: dict[int, tuple[str | None, str]] = {}
    for i, observation in enumerate(ordered):
        if is_generation(observation, rules):
            places.append(i)
            read[i] = _read(observation, rules)
    if not places:
        return Skip("no_generation", "no generation observation")
    if len(places) > 1:
        # A second record of a call another generation holds (an SDK's own span, empty,
        # inside the instrumentation's): not a generation of its own.
        places = [i for i in places if not _echo(ordered, i, places, read)]
    not_answers = _not_answers(ordered, places, read)
    last = _last(ordered, places, read, not_answers)
    which = f"the last of {len(places)} generations" if len(places) > 1 else "the generation"
    if last not in not_answers:
        text, shape = read[last]
        if not text or not text.strip():
            return Skip("no_answer_text", "generation output holds no text")
        return Answered(last, text, shape, which)
    found = _instead(ordered, places, read, not_answers, root, rules)
    if found is not None:
        return found
    return Skip(
        "no_final_answer",
        f"the last generation {not_answers[last]}: the final answer is not in the trace",
    )


def _read(observation: Observation, rules: MappingRules) -> tuple[str | None, str]:
    text, shape = answer_of(observation.get("output"), rules)
    if text is not None and text.strip() in ("None", "null"):  # a None content as text
        return None, f"{shape}: {text.strip()}"
    return text, shape


def _last(
    ordered: Sequence[Observation],
    places: Sequence[int],
    read: Mapping[int, tuple[str | None, str]],
    not_answers: Mapping[int, str],
) -> int:
    """The last generation in tree order; among generations the clock cannot order (the
    same start and end), the one content puts last: one that wrote text before one that
    did not, then the one whose prompt holds the most tool results (it went on after
    them), then the longest prompt."""
    last = places[-1]
    if len(places) < 2:
        return last
    moment = _moment(ordered[last])
    tied = [i for i in places if _moment(ordered[i]) == moment]
    if len(tied) < 2:
        return last
    # A wrapper and the call it wraps tie too: the tree already puts the inner one after.
    inner = {a for i in tied for a in ancestors(ordered[i], ordered)}
    tied = [i for i in tied if as_str(ordered[i].get("id")) not in inner]
    if len(tied) < 2:
        return last

    def later(i: int) -> tuple[bool, int, int, int]:
        wrote = i not in not_answers and bool((read[i][0] or "").strip())
        asked = ordered[i].get("input")
        results = sum(1 for _ in tool_results_in(asked))
        size = len(asked) if isinstance(asked, str) else 0
        return wrote, results, size, i

    return max(tied, key=later)


def _instead(
    ordered: Sequence[Observation],
    places: Sequence[int],
    read: Mapping[int, tuple[str | None, str]],
    not_answers: Mapping[int, str],
    root: Observation,
    rules: MappingRules,
) -> Answered | None:
    """The answer when the last generation called a tool or holds a placeholder. The clock
    may have ordered it after the answer: one that wrote text in the same millisecond is the
    answer (a tool call never is); else the one that went on after tool results. With none,
    the app's answer, when the root returned it and it was the last call's: its tool call's
    arguments hold it (an agent's `final_answer` tool), or the call recorded a placeholder."""
    last = _last(ordered, places, read, not_answers)
    texts = [i for i in places if i not in not_answers and (read[i][0] or "").strip()]
    tied = [i for i in texts if _moment(ordered[i]) == _moment(ordered[last])]
    if tied:
        text, shape = read[tied[-1]]
        why = "the generation that wrote text (another called a tool at the same time)"
        return Answered(tied[-1], text or "", shape, why)
    after_tools = [(sum(1 for _ in tool_results_in(ordered[i].get("input"))), i) for i in texts]
    after_tools = [(n, i) for n, i in after_tools if n]
    if after_tools:
        _, index = max(after_tools)
        text, shape = read[index]
        return Answered(
            index, text or "", shape, "the generation that went on after the tool results"
        )
    returned, _ = answer_of(root.get("output"), rules) if root is not ordered[last] else (None, "")
    if not returned or not returned.strip() or normalised(returned).lower() in PLACEHOLDERS:
        return None
    arguments = normalised(" ".join(tool_call_arguments(decode_all(ordered[last].get("output")))))
    if normalised(returned) in arguments:
        why = "the last generation, whose tool call's arguments hold the answer the root returned"
        return Answered(last, returned, "the root's output", why)
    if not_answers[last].startswith("recorded a placeholder"):
        why = f"the last generation, which {not_answers[last]}: the answer the root returned"
        return Answered(last, returned, "the root's output", why)
    return None


def _echo(
    ordered: Sequence[Observation],
    index: int,
    places: Sequence[int],
    read: Mapping[int, tuple[str | None, str]],
) -> bool:
    """A generation with no output at all whose time overlaps another generation's that
    has one: a second record of that call."""
    output = ordered[index].get("output")
    if output not in (None, "", "null") or read[index][0]:
        return False
    start, end = sibling_key(ordered[index])[:2]
    for other in places:
        if other == index or ordered[other].get("output") in (None, "", "null"):
            continue
        other_start, other_end = sibling_key(ordered[other])[:2]
        if start <= other_end and other_start <= end:
            return True
    return False


def _not_answers(
    ordered: Sequence[Observation],
    places: Sequence[int],
    read: Mapping[int, tuple[str | None, str]],
) -> dict[int, str]:
    """Generations whose output is no answer, and why: a tool call, or a placeholder (a
    known one, or one text recorded for generations that were asked different things and
    are not a wrapper and the call it wraps, which record one completion twice)."""
    found: dict[int, str] = {}
    folded: dict[int, str] = {}
    same: dict[str, list[int]] = {}
    for i in places:
        text = (read[i][0] or "").strip()
        if text:
            folded[i] = normalised(text).lower()
            same.setdefault(folded[i], []).append(i)
    repeated = set()
    if len(same) < len(folded):  # some text recorded more than once
        repeated = {t for t, group in same.items() if len(group) > 1 and _apart(ordered, group)}
    for i in places:
        if i in folded:
            if folded[i] in PLACEHOLDERS or folded[i] in repeated:
                text = (read[i][0] or "").strip()
                found[i] = f"recorded a placeholder ({text[:60]!r}) as its output"
            continue
        calls = tool_calls_in(ordered[i].get("output"))
        if calls:
            found[i] = f"called a tool ({', '.join(sorted(set(calls))[:3])})"
    return found


def _moment(observation: Observation) -> tuple[Any, ...]:
    """When an observation ran, as recorded (one trace's times share one format)."""
    return observation.get("startTime"), observation.get("endTime")


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
    held = strings_in(output)
    shown = [normalised(s) for s in held]
    whole = normalised(text)
    if any(whole in s for s in shown):
        return text, "", ANSWER_CONFIRMED
    if envelope is not None and any(normalised(envelope[0]) in s for s in shown):
        return envelope[0], envelope[1], ANSWER_CONFIRMED
    parts = [h for h, n in zip(held, shown, strict=True) if len(n) >= _MIN_PART and n in whole]
    if parts:
        return max(parts, key=len), "the part the root's output holds", ANSWER_CONFIRMED
    if any(_cut_short(s, whole) for s in shown):
        return text, "the root's output holds it cut short", ANSWER_CONFIRMED
    return fallback[0], fallback[1], ANSWER_DIFFERS


_ELLIPSIS = ("...", "…")


def _cut_short(shown: str, whole: str) -> bool:
    """An output an instrumentation cut to a length, ending in an ellipsis: from where the
    answer starts in it, what it holds is the answer's start."""
    if not shown.endswith(_ELLIPSIS) or len(whole) < _MIN_PART:
        return False
    at = shown.find(whole[:_MIN_PART])
    if at < 0:
        return False
    held = shown[at:].rstrip(".…").rstrip()
    return len(held) >= _MIN_PART and whole.startswith(held)


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
