"""Hook adapter: the user's own `module:function` looks chunks up.

The function takes a list of chunk ids and returns
``{chunk_id: {"text_hash": ..., "text": ..., "doc_id": ..., "updated_at": ...}}``
(every key optional; ids it does not know are left out). It is called per
batch in a daemon thread and waited for at most timeout_s: a hook that
takes longer is a `timeout`, and is left to finish on its own; while it
runs, further lookups fail at once as a timeout rather than pile up
threads. An exception in the hook is an `error`; a reply of another shape,
or an entry with a key not in the four above, is a `bad_field`.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from observer.resolver.backends._common import (
    DEFAULT_MAX_IDS_PER_QUERY,
    batches,
    describe,
    text_of,
    time_of,
)
from observer.resolver.core import StoredChunk
from observer.resolver.store import ResolverError

HOOK_KEYS = frozenset({"text_hash", "text", "doc_id", "updated_at"})
HookFunction = Callable[[list[str]], Mapping[str, Mapping[str, Any]]]


def load_hook(spec: str) -> HookFunction:
    """The function `module:function` names; ValueError saying why it cannot be had."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"resolver hook {spec!r} is not 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise ValueError(
            f"resolver hook {spec!r}: cannot import {module_name!r}: {error}"
        ) from None
    function: object = module
    for part in attribute.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise ValueError(f"resolver hook {spec!r}: {module_name!r} has no {attribute!r}")
    if not callable(function):
        raise ValueError(f"resolver hook {spec!r} is not callable")
    return function


class _Call:
    """One hook call in a daemon thread: its result or its exception."""

    def __init__(self, function: HookFunction, ids: list[str]) -> None:
        self.result: object = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._function = function
        self._ids = ids
        self.thread = threading.Thread(target=self._run, name="observer-resolver-hook", daemon=True)

    def _run(self) -> None:
        try:
            self.result = self._function(self._ids)
        except BaseException as error:  # handed to the caller
            self.error = error
        finally:
            self.done.set()


class HookStore:
    kind = "hook"

    def __init__(
        self,
        function: HookFunction,
        *,
        name: str = "hook",
        timeout_s: float = 5.0,
        max_ids_per_query: int = DEFAULT_MAX_IDS_PER_QUERY,
    ) -> None:
        self.function = function
        self.name = name
        self.timeout_s = timeout_s
        self.max_ids_per_query = max_ids_per_query
        self._running: _Call | None = None

    def lookup(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        found: dict[str, StoredChunk] = {}
        for batch in batches(chunk_ids, self.max_ids_per_query):
            found.update(self._parse(self._call(list(batch)), batch))
        return found

    def _call(self, ids: list[str]) -> object:
        if self._running is not None and not self._running.done.is_set():
            raise ResolverError(
                "timeout", f"hook {self.name}: an earlier call is still running past timeout_s"
            )
        call = _Call(self.function, ids)
        self._running = call
        call.thread.start()
        if not call.done.wait(self.timeout_s):
            raise ResolverError(
                "timeout", f"hook {self.name}: no answer within {self.timeout_s:g}s"
            )
        if call.error is not None:
            raise ResolverError("error", f"hook {self.name}: " + describe(call.error))
        return call.result

    def _parse(self, reply: object, asked: Sequence[str]) -> dict[str, StoredChunk]:
        if not isinstance(reply, Mapping):
            raise ResolverError(
                "bad_field",
                f"hook {self.name}: returned {type(reply).__name__}, not a dict by chunk id",
            )
        wanted = set(asked)
        found: dict[str, StoredChunk] = {}
        for chunk_id, entry in reply.items():
            if not isinstance(entry, Mapping):
                raise ResolverError(
                    "bad_field",
                    f"hook {self.name}: the entry of {str(chunk_id)[:80]!r} is "
                    f"{type(entry).__name__}, not a dict",
                )
            unknown = sorted(str(k) for k in entry if k not in HOOK_KEYS)
            if unknown:
                raise ResolverError(
                    "bad_field",
                    f"hook {self.name}: unknown field {', '.join(repr(k) for k in unknown)} "
                    f"(expected {', '.join(sorted(HOOK_KEYS))})",
                )
            key = text_of(chunk_id)
            if key in wanted:
                found[key] = StoredChunk(
                    text_hash=text_of(entry.get("text_hash")),
                    text=text_of(entry.get("text")),
                    doc_id=text_of(entry.get("doc_id")),
                    updated_at=time_of(entry.get("updated_at")),
                )
        return found

    def close(self) -> None:
        """Nothing to close: a hook owns its own clients."""
