"""Chunk store adapters, one thin file each over the store's own client, and their factory.

| kind | client (extra `resolver`) | uri | collection |
| --- | --- | --- | --- |
| milvus | pymilvus (+ milvus-lite for a file) | server URI or Milvus Lite file | collection |
| qdrant | qdrant-client | URL, or a local-mode path | collection |
| postgres | psycopg 3 | the DSN, unless the secret holds it | table or view (schema.table) |
| hook | none | unused | unused |

`build_store` checks the configuration and that the client is installed, and
connects to nothing: each adapter connects on its first lookup.
"""

from observer.resolver.backends.factory import build_store

__all__ = ["build_store"]
