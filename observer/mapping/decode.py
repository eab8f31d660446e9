"""Decoding of the loosely typed values Langfuse hands back.

`input`/`output` come back as raw strings (JSON text when the app logged a
structure) and metadata values may be JSON-encoded strings (`"true"`,
`"0.82"`, `"[0.9, 0.1]"`): decode when it parses, keep the text otherwise.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

import orjson

# Texts shorter than this are decoded once while they are recent: one trace's input and
# output are read by several rules. What decode returns is never changed by its callers.
_CACHED_CHARS = 65_536


def decode(value: Any) -> Any:
    """JSON-decode a string when it parses; anything else as it is."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped and stripped[0] in "tfn":  # only a literal: no parser for a word
            return _LITERALS.get(stripped, value)
        if stripped and stripped[0] in '[{"-0123456789':
            if len(stripped) < _CACHED_CHARS:
                found = _decoded(stripped)
                return value if found is _NOT_JSON else found
            found = _loads(stripped)
            return value if found is _NOT_JSON else found
    return value


_NOT_JSON = object()
_LITERALS = {"true": True, "false": False, "null": None}


@lru_cache(maxsize=32)
def _decoded(text: str) -> Any:
    return _loads(text)


def _loads(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass  # NaN, a lone surrogate's escape, deep nesting: the standard library's rules
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past any reason
        return _NOT_JSON


def decode_all(value: Any) -> Any:
    """`decode`, again while the result is JSON text (a value encoded twice or more)."""
    for _ in range(4):
        inner = decode(value)
        if inner is value or not isinstance(value, str):
            return inner
        value = inner
    return value


def as_bool(value: Any) -> bool | None:
    if isinstance(value, str):
        value = decode(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
        return value.strip().lower() in ("true", "yes")
    return None


def as_float(value: Any) -> float | None:
    if isinstance(value, str):
        value = decode(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def as_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def as_float_list(value: Any) -> tuple[float, ...] | None:
    if isinstance(value, str):
        value = decode(value)
    if not isinstance(value, list):
        return None
    numbers = [as_float(v) for v in value]
    if any(n is None for n in numbers):
        return None
    return tuple(n for n in numbers if n is not None)


def clean_text(value: str) -> str:
    """The text with lone surrogates replaced by U+FFFD, so it can be written as UTF-8.

    JSON may escape half of a surrogate pair (`"\\ud800"`); Python decodes it into a
    string no UTF-8 encoder accepts. Paired surrogates become the character they pair to.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return value
