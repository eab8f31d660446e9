"""The chunk store adapters' factory: the kinds, their clients, build_store."""

from __future__ import annotations

import importlib.util
from typing import Literal, get_args

from observer.resolver.backends._common import DEFAULT_MAX_IDS_PER_QUERY
from observer.resolver.store import ChunkStore, Fields

Kind = Literal["milvus", "qdrant", "postgres", "hook"]
KINDS: tuple[str, ...] = get_args(Kind)
_CLIENTS = {"milvus": "pymilvus", "qdrant": "qdrant_client", "postgres": "psycopg"}


def _require(kind: str) -> None:
    module = _CLIENTS.get(kind)
    if module is not None and importlib.util.find_spec(module) is None:
        raise ValueError(
            f"resolver kind {kind!r} needs the {module} package: pip install 'observer[resolver]'"
        )


def build_store(
    kind: str,
    *,
    uri: str = "",
    collection: str = "",
    secret: str | None = None,
    hook: str = "",
    fields: Fields | None = None,
    timeout_s: float = 5.0,
    max_ids_per_query: int = DEFAULT_MAX_IDS_PER_QUERY,
) -> ChunkStore:
    """The adapter of `kind`; ValueError naming the problem when the settings cannot work.

    `secret` is the value of the variable `secret_env` names: the Milvus
    token, the Qdrant API key, or the PostgreSQL DSN (else `uri` is the DSN).
    """
    fields = fields or Fields()
    if kind not in KINDS:
        raise ValueError(f"resolver kind {kind!r} is not one of {', '.join(KINDS)}")
    if timeout_s <= 0:
        raise ValueError("resolver timeout_s must be positive")
    if max_ids_per_query < 1:
        raise ValueError("resolver max_ids_per_query must be at least 1")
    _require(kind)
    if kind == "hook":
        from observer.resolver.backends.hook import HookStore, load_hook

        if not hook:
            raise ValueError("resolver kind 'hook' needs hook = 'module:function'")
        return HookStore(
            load_hook(hook), name=hook, timeout_s=timeout_s, max_ids_per_query=max_ids_per_query
        )
    if not collection:
        what = "table" if kind == "postgres" else "collection"
        raise ValueError(f"resolver kind {kind!r} needs collection (the {what})")
    if kind == "postgres":
        from observer.resolver.backends.postgres import PostgresStore

        dsn = secret or uri
        if not dsn:
            raise ValueError(
                "resolver kind 'postgres' needs a DSN: in secret_env's variable or uri"
            )
        return PostgresStore(
            dsn, collection, fields, timeout_s=timeout_s, max_ids_per_query=max_ids_per_query
        )
    if not uri:
        raise ValueError(f"resolver kind {kind!r} needs uri")
    if kind == "milvus":
        from observer.resolver.backends.milvus import MilvusStore

        _check_milvus_uri(uri)
        return MilvusStore(
            uri,
            collection,
            fields,
            token=secret,
            timeout_s=timeout_s,
            max_ids_per_query=max_ids_per_query,
        )
    from observer.resolver.backends.qdrant import QdrantStore

    return QdrantStore(
        uri,
        collection,
        fields,
        api_key=secret,
        timeout_s=timeout_s,
        max_ids_per_query=max_ids_per_query,
    )


def _check_milvus_uri(uri: str) -> None:
    """A Milvus server URI, or a Milvus Lite file with milvus-lite installed."""
    from observer.resolver.backends.milvus import is_lite

    if is_lite(uri):
        if importlib.util.find_spec("milvus_lite") is None:
            raise ValueError(
                "a Milvus Lite file needs the milvus-lite package: pip install 'observer[resolver]'"
            )
    elif "://" not in uri:
        raise ValueError(
            f"resolver uri {uri!r}: a Milvus server URI (http://host:19530) "
            "or a Milvus Lite file ending in .db"
        )
