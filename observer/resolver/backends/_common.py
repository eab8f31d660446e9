"""Helpers the adapters share: batching, values, secret-free error messages."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from observer.redaction import redact as redact_secrets
from observer.resolver.core import StoredChunk
from observer.resolver.store import Fields

DEFAULT_MAX_IDS_PER_QUERY = 500
_MESSAGE_MAX = 300
_URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
_KEY_VALUES = re.compile(r"(?i)\b(password|passwd|token|api[_-]?key|secret)\s*[=:]\s*\S+")


def batches(ids: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def text_of(value: object) -> str | None:
    """A stored value as text: None stays None, bytes are decoded, others str()."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def time_of(value: object) -> str | None:
    """`updated_at` as ISO-8601 when the store gives a datetime, else as text."""
    if isinstance(value, datetime):
        return value.isoformat()
    return text_of(value)


def lookup_path(payload: Mapping[str, Any], name: str) -> object:
    """`payload[name]`, or for a dotted name (`metadata.chunk_id`) the nested value."""
    if name in payload:
        return payload[name]
    value: object = payload
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def chunk_of(row: Mapping[str, Any], fields: Fields) -> StoredChunk:
    def get(name: str) -> object:
        return lookup_path(row, name) if name else None

    return StoredChunk(
        text_hash=text_of(get(fields.hash_field)),
        text=text_of(get(fields.text_field)),
        doc_id=text_of(get(fields.doc_field)),
        updated_at=time_of(get(fields.updated_field)),
    )


def redact(text: str, secrets: Sequence[str | None] = ()) -> str:
    """`text` without the given secrets, URL credentials or `password=...` pairs, shortened."""
    text = _URL_CREDENTIALS.sub("***@", redact_secrets(text, secrets))
    text = _KEY_VALUES.sub(lambda m: f"{m.group(1)}=***", text)
    text = " ".join(text.split())
    return text[:_MESSAGE_MAX] + ("..." if len(text) > _MESSAGE_MAX else "")


def describe(error: BaseException, secrets: Sequence[str | None] = ()) -> str:
    """`Type: message` of a client's exception, secrets redacted."""
    message = redact(str(error), secrets)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def chain(error: BaseException) -> Iterator[BaseException]:
    """The exception and its causes and contexts, each once."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def close_quietly(client: Any) -> None:
    """`client.close()`; closing a broken connection fails, and nothing is left to do then."""
    with contextlib.suppress(Exception):
        client.close()
