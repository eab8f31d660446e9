"""Observations made writable everywhere, at the edge where they enter a pass. Pure.

JSON can carry what no later step can write: half of a surrogate pair
(`"\\ud800"`, which Python decodes into a string no UTF-8 encoder takes: the
state file, orjson and the log all refuse it) and integers past 64 bits (a
`promptVersion` of 2^70: orjson and SQLite refuse it). A trace id, an
environment or a prompt version holding one failed every pass, for ever
(issue 43). `clean(observation)` returns the observation itself when orjson
can write it, which is one C call for the common case; otherwise a copy with
every lone surrogate, in keys and values, replaced by U+FFFD and every integer
outside the signed 64-bit range written as its decimal string. The walk is
iterative: nesting costs no stack.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from observer.mapping.decode import clean_text

_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**63 - 1


def clean(observation: dict[str, Any]) -> dict[str, Any]:
    """The observation, or a cleaned copy when it holds what cannot be written."""
    try:
        orjson.dumps(observation)
    except (orjson.JSONEncodeError, TypeError):
        cleaned = _cleaned(observation)
        assert isinstance(cleaned, dict)
        return cleaned
    return observation


def clean_page(page: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [clean(o) if isinstance(o, dict) else o for o in page]


def _cleaned(value: Any) -> Any:
    holder: list[Any] = [value]
    todo: list[tuple[Any, Any]] = [(holder, 0)]
    while todo:
        container, key = todo.pop()
        item = container[key]
        if isinstance(item, str):
            container[key] = clean_text(item)
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int) and not _INT_MIN <= item <= _INT_MAX:
            container[key] = str(item)
        elif isinstance(item, dict):
            copied = {clean_text(k) if isinstance(k, str) else k: v for k, v in item.items()}
            container[key] = copied
            todo.extend((copied, k) for k in copied)
        elif isinstance(item, list | tuple):
            listed = list(item)
            container[key] = listed
            todo.extend((listed, i) for i in range(len(listed)))
    return holder[0]
