"""Qdrant adapter: `QdrantClient(url=...)` on a server, or local mode on a path.

A scroll per batch with a payload filter ``MatchAny`` on the id field (a
payload key; dotted for a nested one, ``metadata.chunk_id``), fetching only
the configured payload fields and no vectors, following `next_page_offset`.

Qdrant has no schema for payloads: a misnamed id field matches nothing. So
when a batch finds none of its ids the adapter checks (once) that some
point has the id field at all; if none has it while the collection has
points, that is a `bad_field`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from observer.resolver.backends._common import (
    DEFAULT_MAX_IDS_PER_QUERY,
    batches,
    chain,
    chunk_of,
    close_quietly,
    describe,
    lookup_path,
    text_of,
)
from observer.resolver.core import StoredChunk
from observer.resolver.store import Fields, ResolverError


def is_url(uri: str) -> bool:
    return "://" in uri


class QdrantStore:
    kind = "qdrant"

    def __init__(
        self,
        uri: str,
        collection: str,
        fields: Fields,
        *,
        api_key: str | None = None,
        timeout_s: float = 5.0,
        max_ids_per_query: int = DEFAULT_MAX_IDS_PER_QUERY,
        client_factory: Callable[..., Any] | None = None,
    ) -> None:
        self.uri = uri
        self.collection = collection
        self.fields = fields
        self.timeout_s = timeout_s
        self.max_ids_per_query = max_ids_per_query
        self._api_key = api_key
        self._factory = client_factory
        self._client: Any = None
        self._id_field_seen = False

    def _connect(self) -> Any:
        if self._client is not None:
            return self._client
        factory = self._factory
        if factory is None:
            from qdrant_client import QdrantClient

            factory = QdrantClient
        try:
            if is_url(self.uri):
                client = factory(
                    url=self.uri,
                    api_key=self._api_key or None,
                    timeout=max(1, math.ceil(self.timeout_s)),
                    check_compatibility=False,  # no request at start: the store may be down
                )
            elif self.uri == ":memory:":
                client = factory(location=":memory:")
            else:
                client = factory(path=self.uri)
        except Exception as error:
            raise self._translate(error, connecting=True) from None
        self._client = client
        return client

    def _scroll(self, client: Any, **kwargs: Any) -> tuple[list[Any], Any]:
        if is_url(self.uri):
            kwargs["timeout"] = max(1, math.ceil(self.timeout_s))
        try:
            records, offset = client.scroll(self.collection, with_vectors=False, **kwargs)
        except Exception as error:
            raise self._translate(error) from None
        return list(records), offset

    def lookup(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        from qdrant_client import models

        client = self._connect()
        id_field = self.fields.id_field
        found: dict[str, StoredChunk] = {}
        for batch in batches(chunk_ids, self.max_ids_per_query):
            where = models.Filter(
                must=[models.FieldCondition(key=id_field, match=models.MatchAny(any=list(batch)))]
            )
            offset: Any = None
            matched = 0
            while True:
                records, offset = self._scroll(
                    client,
                    scroll_filter=where,
                    limit=len(batch),
                    offset=offset,
                    with_payload=list(self.fields.read),
                )
                matched += len(records)
                for record in records:
                    payload = record.payload or {}
                    chunk_id = text_of(lookup_path(payload, id_field))
                    if chunk_id is not None and chunk_id not in found:
                        found[chunk_id] = chunk_of(payload, self.fields)
                if offset is None or not records:
                    break
            if matched:
                self._id_field_seen = True
            elif not self._id_field_seen:
                self._probe_id_field(client)
        return found

    def _probe_id_field(self, client: Any) -> None:
        from qdrant_client import models

        key = models.PayloadField(key=self.fields.id_field)
        has_field = models.Filter(must_not=[models.IsEmptyCondition(is_empty=key)])
        with_field, _ = self._scroll(client, scroll_filter=has_field, limit=1, with_payload=False)
        if with_field:
            self._id_field_seen = True
            return
        any_point, _ = self._scroll(client, limit=1, with_payload=False)
        if any_point:
            raise ResolverError(
                "bad_field",
                f"qdrant: no point of {self.collection!r} has the payload field "
                f"{self.fields.id_field!r}",
            )

    def _translate(self, error: Exception, *, connecting: bool = False) -> ResolverError:
        message = "qdrant: " + describe(error, (self._api_key,))
        causes = list(chain(error))
        names = {type(e).__name__ for e in causes}
        text = " ".join(str(e) for e in causes).lower()
        if names & {"ReadTimeout", "WriteTimeout", "PoolTimeout", "TimeoutException"}:
            return ResolverError("timeout", message)
        if "timed out" in text and "ConnectTimeout" not in names:
            return ResolverError("timeout", message)
        if connecting or names & {"ConnectError", "ConnectTimeout", "ConnectionRefusedError"}:
            return ResolverError("unreachable", message)
        if "connection refused" in text or "name or service not known" in text:
            return ResolverError("unreachable", message)
        status = getattr(error, "status_code", None)
        if (status == 404 or "not found" in text) and "collection" in text:
            return ResolverError("bad_field", message)
        return ResolverError("error", message)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            close_quietly(client)
