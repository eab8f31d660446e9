"""Resolver hooks for the tests, named `tests.resolver.hooks:<function>` like a user's own."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

# The hook's "store", filled by the tests: {chunk_id: {"text_hash", "text", "doc_id", ...}}.
STORE: dict[str, dict[str, Any]] = {}
CALLS: list[list[str]] = []
RELEASE = threading.Event()  # slow() waits on it, so a test can let it finish


def seed_from_examples() -> None:
    """The store holds every chunk the bundled examples cite, as their answers saw it."""
    STORE.clear()
    CALLS.clear()
    examples = Path(__file__).resolve().parents[2] / "examples" / "records.jsonl"
    for line in examples.read_text().splitlines():
        for source in json.loads(line)["sources"]:
            if source.get("chunk_id"):
                STORE[source["chunk_id"]] = {"text": source["text"], "doc_id": "kb"}


def lookup(ids: list[str]) -> dict[str, dict[str, Any]]:
    CALLS.append(list(ids))
    return {i: STORE[i] for i in ids if i in STORE}


def slow(ids: list[str]) -> dict[str, dict[str, Any]]:
    RELEASE.wait(5.0)
    return lookup(ids)


def wrong_fields(ids: list[str]) -> dict[str, dict[str, Any]]:
    return {i: {"hash": "abc", "body": "text"} for i in ids}


def nothing(ids: list[str]) -> dict[str, dict[str, Any]]:
    """A store queried by the wrong id field: it answers, with nothing."""
    return {}


def doc_only(ids: list[str]) -> dict[str, dict[str, Any]]:
    """A store whose hash and text live under other names than the configured ones."""
    return {i: {"doc_id": "kb"} for i in ids}


def not_a_dict(ids: list[str]) -> list[str]:
    return ids


def broken(ids: list[str]) -> dict[str, dict[str, Any]]:
    raise RuntimeError("the knowledge base said no")


NOT_CALLABLE = 42
