"""Content checks of a record's parts (docs/trace-convention.md, "Checked by content").

The rules of the convention say where the parts of a record usually are; what this module
reads holds whatever the library: the texts the answering model was shown (its recorded
input), whether a list of documents is among them and in which order, the passages of a
prompt whose retrieval was not traced, and the part of a structured completion an app
returns. Pure: strings in, strings and positions out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from observer.mapping.decode import decode

# Of a document's text, this much (whitespace collapsed) must be found in the prompt for
# the document to count as shown: prompts quote chunks whole, or cut their ends.
PREFIX_CHARS = 60


def normalised(text: str) -> str:
    """The text with every run of whitespace one space, and none at either end."""
    if len(text) < 4096:
        return _normalised(text)  # the same texts are compared again and again
    return " ".join(text.split())


@lru_cache(maxsize=1024)
def _normalised(text: str) -> str:
    return " ".join(text.split())


def normalised_start(text: str, chars: int) -> str:
    """`normalised(text)[:chars]`, reading only as much of the text as it needs."""
    window = chars * 4
    while True:
        start = normalised(text[:window])
        if len(start) >= chars + 1 or window >= len(text):
            return start[:chars]
        window *= 4


def strings_in(value: Any) -> list[str]:
    """Every string in a decoded JSON value that holds more than whitespace, in order (keys
    of tool calls' arguments and message parts included: a prompt's text is wherever the
    library put it)."""
    found: list[str] = []
    _strings(value, 0, found)
    return found


def _strings(value: Any, depth: int, found: list[str]) -> None:
    if depth > 64:
        return
    if isinstance(value, str):
        # Only a text starting with a bracket (after whitespace) decodes to an object.
        if value[:1] in "[{" or value[:1].isspace():
            inner = decode(value)
            if isinstance(inner, (Mapping, list)) and depth < 8:
                _strings(inner, depth + 1, found)  # JSON in a string: a tool's result
                return
        if value.strip():
            found.append(value)
        return
    if isinstance(value, list):
        items: Iterable[Any] = value
    elif isinstance(value, (dict, Mapping)):  # a dict is told without the ABC's check
        items = value.values()
    else:
        return
    for item in items:
        if isinstance(item, str) and item[:1] not in "[{" and not item[:1].isspace():
            if depth < 64 and item.strip():
                found.append(item)  # a plain text, the usual item: no call
        else:
            _strings(item, depth + 1, found)


def prompt_text(value: Any) -> str | None:
    """The text a generation was shown, from its recorded input: every string in it,
    whitespace collapsed, in order. None when nothing is recorded (masked or absent)."""
    decoded = decode(value)
    if decoded is None or decoded == "" or decoded == {} or decoded == []:
        return None
    text = "\n".join(map(normalised, strings_in(decoded)))
    return text or None


@lru_cache(maxsize=1024)
def _probe(text: str) -> str:
    return normalised_start(text, PREFIX_CHARS)


def positions(texts: Sequence[str], prompt: str) -> list[int | None]:
    """Where each text starts in the prompt (a normalised prefix of it), or None."""
    found: list[int | None] = []
    for text in texts:
        probe = _probe(text)
        if not probe:
            found.append(None)
            continue
        at = prompt.find(probe)
        found.append(at if at >= 0 else None)
    return found


# Numbered passages in a prompt whose retrieval was not traced: `[1] …`, `Source 1: …`,
# `Document 1: …`, `===== Document 1 =====`, one per line start. Numbered from 1 up.
_PASSAGE = re.compile(
    r"(?m)^[ \t]*(?:\[(\d{1,3})\]|(?:#+ *)?(?:=+ *)?(?:source|document|passage|context|chunk)"
    r" *#?(\d{1,3}) *(?:=+|:|\.|\))?)[ \t]*",
    re.IGNORECASE,
)
_QUOTES = "«»\"'“”"
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def prompt_passages(value: Any) -> list[str]:
    """The numbered passages of a recorded prompt, [1] first; [] when there are none.

    Read per string of the input (a message's content), so a system prompt's instruction
    never joins a user message's passages. A run must start at 1 and count up by one; a
    passage ends at the next marker or a blank line."""
    decoded = decode(value)
    if decoded is None:
        return []
    best: list[str] = []
    for text in strings_in(decoded):
        passages = passages_in(text)
        if len(passages) > len(best):
            best = passages
    return best


def passages_in(text: str) -> list[str]:
    """The numbered passages of one text, [1] first; [] when there are none."""
    marks = list(_PASSAGE.finditer(text))
    passages: list[str] = []
    expected = 1
    for index, mark in enumerate(marks):
        number = int(mark.group(1) or mark.group(2))
        if number != expected:
            if passages:
                break
            continue
        end = marks[index + 1].start() if index + 1 < len(marks) else len(text)
        body = _BLANK_LINE.split(text[mark.end() : end].lstrip(), maxsplit=1)[0]
        body = body.strip().strip(_QUOTES).strip()
        if not body:
            break
        passages.append(body)
        expected += 1
    return passages


# A structured completion's fields: DSPy's `[[ ## name ## ]]` markers.
_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]")
ANSWER_FIELDS = ("response", "answer", "output", "final_answer", "result")
_REASONING = ("reasoning", "rationale", "thought", "thoughts", "completed")


def reduced(text: str) -> tuple[str, str] | None:
    """The part of a structured completion an app returns, and the envelope it came out of:
    a field-marker completion's answer field (`[[ ## response ## ]] …`), or a JSON object's
    `answer`/`response` field. None when the text is no such envelope."""
    marks = list(_FIELD.finditer(text))
    if marks:
        fields: dict[str, str] = {}
        for index, mark in enumerate(marks):
            end = marks[index + 1].start() if index + 1 < len(marks) else len(text)
            fields.setdefault(mark.group(1), text[mark.end() : end].strip())
        for name in ANSWER_FIELDS:
            if fields.get(name):
                return fields[name], f"the [[ ## {name} ## ]] field of a structured completion"
        answers = [(n, v) for n, v in fields.items() if n not in _REASONING and v]
        if answers:
            name, value = answers[-1]
            return value, f"the [[ ## {name} ## ]] field of a structured completion"
        return None
    decoded = decode(text)
    if isinstance(decoded, Mapping):
        for key in ANSWER_FIELDS:
            field = decoded.get(key)
            if isinstance(field, str) and field.strip():
                return field, f"the {key!r} field of a JSON completion"
    return None


# A prompt template's label before the user's question: `Question: …`, `Query: …`, `问题：…`.
_QUESTION_LABEL = re.compile(
    r"(?im)^[ \t#*>-]*(?:the |user(?:'s)? |current |new )?(?:question|query|task|问题|提问)"
    r"[ \t]*[:：][ \t]*"
)
_LINE_MARK = re.compile(
    r"^\s*(?:\[\d{1,3}\]|(?:source|document|passage|context|chunk)\s*#?\d{1,3}\s*[:.)=]?)\s*",
    re.IGNORECASE,
)


def holds_passages(text: str, passages: Sequence[str]) -> bool:
    """The text shows one of the passages (a normalised prefix of it)."""
    flat = normalised(text)
    return any(probe and probe in flat for probe in map(_probe, passages))


def labelled_question(text: str) -> str | None:
    """The text after a prompt template's question label (`Question:`, `Current Task:`),
    to the next blank line; None without one."""
    labels = list(_QUESTION_LABEL.finditer(text))
    if not labels:
        return None
    after = _BLANK_LINE.split(text[labels[-1].end() :], maxsplit=1)[0].strip()
    return after or None


def cut_question(text: str, passages: Sequence[str]) -> str | None:
    """The question in a user message that also shows the passages (a template that puts
    the context and the question in one message): the text after a question label, else
    the one line, of those that are not passages, that asks (ends with `?`). None when it
    cannot be told apart."""
    probes = [p for p in (_probe(p) for p in passages) if p]
    labels = list(_QUESTION_LABEL.finditer(text))
    if labels:
        after = _BLANK_LINE.split(text[labels[-1].end() :], maxsplit=1)[0].strip()
        if after and not any(p in normalised(after) for p in probes):
            return after
    whole = [normalised(p) for p in passages]
    asking = []
    for line in text.splitlines():
        flat = normalised(_LINE_MARK.sub("", line))
        if not flat or any(p in flat for p in probes) or any(flat in w for w in whole):
            continue
        if flat.endswith(("?", "？")):
            asking.append(flat)
    return asking[0] if len(asking) == 1 else None
