"""Milvus adapter: pymilvus `MilvusClient` on a server URI or a Milvus Lite file.

A query per batch: ``filter='<id_field> in ["a", "b"]'`` (ids quoted as JSON
strings, which Milvus' expression parser reads: quotes, backslashes and
control characters escaped), ``output_fields`` the configured fields.

The client connects on the first lookup, not at start, so a store that is
down never delays the daemon; a failed connection is retried on the next
lookup. The schema is read once: with dynamic fields off, a configured field
the collection lacks is a `bad_field`; with them on, a field may be dynamic,
so when a batch finds none of its ids the adapter checks (once) that some
row has the id field at all. A Milvus Lite file holds collections released
after a restart: the adapter loads its collection (never a server's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from observer.resolver.backends._common import (
    DEFAULT_MAX_IDS_PER_QUERY,
    batches,
    chain,
    chunk_of,
    close_quietly,
    describe,
    text_of,
)
from observer.resolver.core import StoredChunk
from observer.resolver.store import Fields, ResolverError

_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def in_filter(field: str, ids: Sequence[str]) -> str:
    """``field in ["a", "b\\"c"]``: every id a JSON string literal, non-ASCII kept as is."""
    return f"{field} in [{', '.join(json.dumps(i, ensure_ascii=False) for i in ids)}]"


def is_lite(uri: str) -> bool:
    """A Milvus Lite file (a path ending in `.db`, as pymilvus decides) rather than a server."""
    return uri.endswith(".db")


class MilvusStore:
    kind = "milvus"

    def __init__(
        self,
        uri: str,
        collection: str,
        fields: Fields,
        *,
        token: str | None = None,
        timeout_s: float = 5.0,
        max_ids_per_query: int = DEFAULT_MAX_IDS_PER_QUERY,
        client_factory: Callable[..., Any] | None = None,
    ) -> None:
        for name in fields.read:
            if not _FIELD_NAME.fullmatch(name):
                raise ValueError(f"milvus field name {name!r} is not a plain field name")
        self.uri = uri
        self.collection = collection
        self.fields = fields
        self.timeout_s = timeout_s
        self.max_ids_per_query = max_ids_per_query
        self._token = token
        self._factory = client_factory
        self._client: Any = None
        self._dynamic_id = False  # the id field is not in the schema: maybe a dynamic field
        self._id_field_seen = False

    # ---- connecting -------------------------------------------------------------------

    def _connect(self) -> Any:
        if self._client is not None:
            return self._client
        factory = self._factory
        if factory is None:
            from pymilvus import MilvusClient  # type: ignore[import-untyped]

            factory = MilvusClient
        try:
            client = factory(uri=self.uri, token=self._token or "", timeout=self.timeout_s)
        except Exception as error:
            raise self._translate(error, connecting=True) from None
        try:
            self._check_schema(client)
        except BaseException:
            close_quietly(client)
            raise
        self._client = client
        return client

    def _check_schema(self, client: Any) -> None:
        try:
            if not client.has_collection(self.collection, timeout=self.timeout_s):
                raise ResolverError(
                    "bad_field", f"milvus: collection {self.collection!r} does not exist"
                )
            described = client.describe_collection(self.collection, timeout=self.timeout_s)
            if is_lite(self.uri):  # a Lite file's collections come back released
                client.load_collection(self.collection, timeout=self.timeout_s)
        except ResolverError:
            raise
        except Exception as error:
            raise self._translate(error) from None
        names = {f.get("name") for f in described.get("fields", ())}
        dynamic = bool(described.get("enable_dynamic_field"))
        unknown = [name for name in self.fields.read if name not in names]
        if unknown and not dynamic:
            raise ResolverError(
                "bad_field",
                f"milvus: collection {self.collection!r} has no field "
                + ", ".join(repr(n) for n in unknown)
                + f" (fields: {', '.join(sorted(str(n) for n in names))})",
            )
        self._dynamic_id = self.fields.id_field not in names

    # ---- looking up -------------------------------------------------------------------

    def lookup(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        client = self._connect()
        found: dict[str, StoredChunk] = {}
        id_field = self.fields.id_field
        for batch in batches(chunk_ids, self.max_ids_per_query):
            try:
                rows = client.query(
                    self.collection,
                    filter=in_filter(id_field, batch),
                    output_fields=list(self.fields.read),
                    timeout=self.timeout_s,
                )
            except Exception as error:
                failure = self._translate(error)
                if failure.reason == "unreachable":
                    self.close()  # connect again, and check the schema, next time
                raise failure from None
            for row in rows:
                chunk_id = text_of(row.get(id_field))
                if chunk_id is not None and chunk_id not in found:
                    found[chunk_id] = chunk_of(row, self.fields)
            if rows:
                self._id_field_seen = True
            elif self._dynamic_id and not self._id_field_seen:
                self._probe_id_field(client)
        return found

    def _probe_id_field(self, client: Any) -> None:
        """A dynamic id field no row has, in a collection with rows, is a misnamed field."""
        try:
            with_field = client.query(
                self.collection,
                filter=f"exists {self.fields.id_field}",
                output_fields=[self.fields.id_field],
                limit=1,
                timeout=self.timeout_s,
            )
            any_row = with_field or client.query(
                self.collection, filter="", limit=1, timeout=self.timeout_s
            )
        except Exception as error:
            raise self._translate(error) from None
        if with_field:
            self._id_field_seen = True
        elif any_row:
            raise ResolverError(
                "bad_field",
                f"milvus: no row of {self.collection!r} has the field {self.fields.id_field!r}",
            )

    def _translate(self, error: Exception, *, connecting: bool = False) -> ResolverError:
        message = "milvus: " + describe(error, (self._token,))
        text = " ".join(str(e) for e in chain(error)).lower()
        if connecting or getattr(error, "code", None) == 2 or "fail connecting" in text:
            return ResolverError("unreachable", message)
        if "deadline" in text or "timed out" in text or "timeout" in text:
            return ResolverError("timeout", message)
        if "unavailable" in text or "connection refused" in text:
            return ResolverError("unreachable", message)
        if "collection" in text and ("not found" in text or "not exist" in text):
            return ResolverError("bad_field", message)
        if "field" in text and ("not exist" in text or "unknown" in text):
            return ResolverError("bad_field", message)
        return ResolverError("error", message)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            close_quietly(client)
