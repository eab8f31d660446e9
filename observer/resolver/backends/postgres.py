"""PostgreSQL adapter: psycopg 3 on a DSN the caller gives (it comes from the environment).

A query per batch on a table or view (``schema.table`` allowed)::

    SELECT id_field, hash_field, text_field, doc_field, updated_field
    FROM table WHERE id_field = ANY(%s)

every name quoted with `psycopg.sql.Identifier`, the ids one array parameter.
An id column that is not text (integer, uuid) cannot take every id: then the
comparison falls back to ``id_field::text = ANY(%s::text[])`` for good.

One connection, opened on the first lookup (a store that is down never
delays the daemon), in autocommit, with ``statement_timeout`` = timeout_s
and ``connect_timeout`` = timeout_s (libpq waits at least 2 s); after a
connection error it is dropped and opened again on the next lookup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from observer.resolver.backends._common import (
    DEFAULT_MAX_IDS_PER_QUERY,
    batches,
    chunk_of,
    close_quietly,
    describe,
    text_of,
)
from observer.resolver.core import StoredChunk
from observer.resolver.store import Fields, ResolverError


class PostgresStore:
    kind = "postgres"

    def __init__(
        self,
        dsn: str,
        table: str,
        fields: Fields,
        *,
        timeout_s: float = 5.0,
        max_ids_per_query: int = DEFAULT_MAX_IDS_PER_QUERY,
    ) -> None:
        if not table or any(not part for part in table.split(".")):
            raise ValueError(f"postgres table {table!r} is not a table or schema.table name")
        self.table = table
        self.fields = fields
        self.timeout_s = timeout_s
        self.max_ids_per_query = max_ids_per_query
        self._dsn = dsn
        self._conn: Any = None
        self._as_text = False  # the id column is not text: compare id::text

    def _query(self) -> Any:
        from psycopg import sql

        names = [self.fields.id_field, self.fields.hash_field, self.fields.text_field]
        names += [self.fields.doc_field, self.fields.updated_field]
        columns = sql.SQL(", ").join(sql.Identifier(name) if name else sql.NULL for name in names)
        table = sql.Identifier(*self.table.split("."))
        column = sql.Identifier(self.fields.id_field)
        where = (
            sql.SQL("{}::text = ANY(%s::text[])").format(column)
            if self._as_text
            else sql.SQL("{} = ANY(%s)").format(column)
        )
        return sql.SQL("SELECT {} FROM {} WHERE {}").format(columns, table, where)

    def _connect(self) -> Any:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        import psycopg
        from psycopg import sql

        try:
            conn = psycopg.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=max(2, math.ceil(self.timeout_s)),
            )
        except Exception as error:
            raise self._translate(error, connecting=True) from None
        try:
            timeout_ms = max(1, int(self.timeout_s * 1000))
            conn.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(timeout_ms)))
        except Exception as error:
            conn.close()
            raise self._translate(error) from None
        self._conn = conn
        return conn

    def lookup(self, chunk_ids: Sequence[str]) -> dict[str, StoredChunk]:
        import psycopg

        conn = self._connect()
        found: dict[str, StoredChunk] = {}
        for batch in batches(chunk_ids, self.max_ids_per_query):
            try:
                try:
                    rows = conn.execute(self._query(), [list(batch)]).fetchall()
                except (psycopg.errors.InvalidTextRepresentation, psycopg.errors.UndefinedFunction):
                    if self._as_text:
                        raise
                    self._as_text = True  # e.g. an integer or uuid id column
                    rows = conn.execute(self._query(), [list(batch)]).fetchall()
            except Exception as error:
                failure = self._translate(error)
                if failure.reason in ("unreachable", "timeout"):
                    self.close()  # a fresh connection next time
                raise failure from None
            for row in rows:
                chunk_id = text_of(row[0])
                if chunk_id is not None and chunk_id not in found:
                    found[chunk_id] = chunk_of(
                        dict(zip(("id", "hash", "text", "doc", "updated"), row, strict=True)),
                        _POSITIONAL,
                    )
        return found

    def _translate(self, error: Exception, *, connecting: bool = False) -> ResolverError:
        import psycopg

        message = "postgres: " + describe(error, (self._dsn,))
        errors = psycopg.errors
        if isinstance(error, errors.QueryCanceled | errors.ConnectionTimeout):
            return ResolverError("timeout", message)
        if isinstance(error, errors.UndefinedColumn | errors.UndefinedTable):
            return ResolverError("bad_field", message)
        if isinstance(error, errors.InvalidSchemaName):
            return ResolverError("bad_field", message)
        if connecting or isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
            text = str(error).lower()
            if "timeout" in text:
                return ResolverError("timeout", message)
            if "authentication" in text or "does not exist" in text or "permission" in text:
                return ResolverError("error", message)  # reached, but refused us
            return ResolverError("unreachable", message)
        return ResolverError("error", message)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            close_quietly(conn)


# The SELECT's columns, read back by position.
_POSITIONAL = Fields(
    id_field="id", hash_field="hash", text_field="text", doc_field="doc", updated_field="updated"
)
