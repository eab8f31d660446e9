"""Each adapter against a real store on this machine (docs/resolver.md).

Milvus Lite (a temporary file), Qdrant local mode (a temporary path),
PostgreSQL (a throwaway cluster, tests/resolver/conftest.py) and a hook are
seeded with the same chunks as they are *after* the answers were given: one
deleted, some re-written, one holding neither hash nor text. The same
records then give the same findings through every store. Faults: a store
that is down or unreachable, one too slow, misnamed fields, 10,000 ids.
"""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import replace
from typing import Any

import pytest

from observer.model import RagRecord, Source
from observer.resolver import (
    ChunkStore,
    Fields,
    Resolver,
    ResolverError,
    ResolverFindings,
    cited_chunks,
)
from observer.resolver.backends import build_store
from observer.signals import SignalParams, compute
from tests.resolver import hooks
from tests.resolver.conftest import PostgresCluster
from tests.servers import free_port
from tests.waiting import wait_until


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


ODD_ID = 'kb-"7\\ ü'  # a quote, a backslash, a space and non-ASCII: quoted right or not found

# The sources as the answers saw them.
ANSWERED = {
    "kb-1": "Refunds take five business days.",
    "kb-2": "The fee is 20 euros.",
    "kb-3": "Shipping is free worldwide.",
    "kb-4": "Support answers within 4 hours.",
    "kb-5": "Passwords expire after 90 days.",
    "kb-6": "Badges are issued at reception.",
    ODD_ID: "Odd ids are looked up too.",
}

# The store now. kb-3 was deleted; kb-4 re-written (text and hash); kb-5 re-written (text
# only, no hash field); kb-6 holds neither hash nor text; kb-2 and ODD_ID have no hash.
STORED: list[dict[str, Any]] = [
    {
        "chunk_id": "kb-1",
        "text_hash": sha(ANSWERED["kb-1"]),
        "text": ANSWERED["kb-1"],
        "doc_id": "handbook",
        "updated_at": "2026-11-01T00:00:00+00:00",
    },
    {"chunk_id": "kb-2", "text": ANSWERED["kb-2"], "doc_id": "pricing"},
    {
        "chunk_id": "kb-4",
        "text_hash": sha("Support answers within 2 hours."),
        "text": "Support answers within 2 hours.",
        "doc_id": "support",
        "updated_at": "2026-12-01T00:00:00+00:00",
    },
    {"chunk_id": "kb-5", "text": "Passwords expire after 60 days.", "doc_id": "it"},
    {"chunk_id": "kb-6", "doc_id": "admin"},
    {"chunk_id": ODD_ID, "text": ANSWERED[ODD_ID], "doc_id": "odd"},
]
STORED_IDS = {row["chunk_id"] for row in STORED}


def record(trace_id: str, *sources: Source) -> RagRecord:
    answer = " ".join(f"Sentence about item number {n} [{n}]." for n in range(1, len(sources) + 1))
    return RagRecord(trace_id=trace_id, question="q", answer=answer, sources=sources)


def kb(chunk_id: str, **kw: Any) -> Source:
    return Source(text=ANSWERED[chunk_id], chunk_id=chunk_id, **kw)


RECORDS = [
    record("r1", kb("kb-1"), kb("kb-2"), kb("kb-3"), kb(ODD_ID)),
    record("r2", kb("kb-4"), kb("kb-5"), kb("kb-6"), Source(text="no id")),
    record("r3", Source(text="", chunk_id="kb-1", text_hash=sha(ANSWERED["kb-1"]).upper())),
]
EXPECTED = [
    ResolverFindings(("kb-3",), (), 0, 4),
    ResolverFindings((), ("kb-4", "kb-5"), 2, 3),
    ResolverFindings((), (), 0, 1),
]

StoreFactory = Callable[..., ChunkStore]


# ---- the stores -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def milvus_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Milvus Lite file: `kb` (dynamic fields) seeded, `kb_strict` without dynamic fields."""
    pymilvus = pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    path = str(tmp_path_factory.mktemp("milvus") / "kb.db")
    client = pymilvus.MilvusClient(path)
    try:
        for name, dynamic in (("kb", True), ("kb_strict", False)):
            schema = pymilvus.MilvusClient.create_schema(
                auto_id=False, enable_dynamic_field=dynamic
            )
            schema.add_field("chunk_id", pymilvus.DataType.VARCHAR, is_primary=True, max_length=256)
            schema.add_field("vector", pymilvus.DataType.FLOAT_VECTOR, dim=2)
            if not dynamic:
                schema.add_field("text", pymilvus.DataType.VARCHAR, max_length=4096)
            index = client.prepare_index_params()
            index.add_index("vector", index_type="FLAT", metric_type="L2")
            client.create_collection(name, schema=schema, index_params=index)
        client.insert("kb", [{**row, "vector": [0.1, 0.2]} for row in STORED])
        client.insert("kb_strict", [{"chunk_id": "kb-1", "vector": [0.1, 0.2], "text": "t"}])
    finally:
        client.close()  # the adapter opens the file itself
    yield path


@pytest.fixture(scope="module")
def qdrant_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    qdrant_client = pytest.importorskip("qdrant_client")
    models = qdrant_client.models
    path = str(tmp_path_factory.mktemp("qdrant"))
    client = qdrant_client.QdrantClient(path=path)
    try:
        vectors = models.VectorParams(size=2, distance=models.Distance.COSINE)
        client.create_collection("kb", vectors_config=vectors)
        client.upsert(
            "kb",
            [
                models.PointStruct(id=i, vector=[0.1, 0.2], payload=row)
                for i, row in enumerate(STORED)
            ],
        )
    finally:
        client.close()  # local mode locks the path: one client at a time
    return path


@pytest.fixture(scope="module")
def postgres_table(postgres: PostgresCluster) -> PostgresCluster:
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS kb CASCADE")
        conn.execute("CREATE SCHEMA kb")
        conn.execute(
            "CREATE TABLE kb.chunks (chunk_id text PRIMARY KEY, text_hash text, text text,"
            " doc_id text, updated_at timestamptz)"
        )
        for row in STORED:
            conn.execute(
                "INSERT INTO kb.chunks VALUES (%s, %s, %s, %s, %s)",
                [row.get(k) for k in ("chunk_id", "text_hash", "text", "doc_id", "updated_at")],
            )
        conn.execute(
            "CREATE VIEW kb.slow_chunks AS SELECT * FROM kb.chunks WHERE pg_sleep(0.3) IS NOT NULL"
        )
        conn.execute("CREATE TABLE kb.numbered (id integer PRIMARY KEY, text text)")
        conn.execute("INSERT INTO kb.numbered VALUES (1, 'one'), (2, 'two')")
    return postgres


@pytest.fixture
def hook_store() -> Iterator[None]:
    hooks.STORE.clear()
    hooks.STORE.update(
        {row["chunk_id"]: {k: v for k, v in row.items() if k != "chunk_id"} for row in STORED}
    )
    hooks.CALLS.clear()
    yield
    hooks.STORE.clear()


KINDS = ["milvus", "qdrant", "postgres", "hook"]


@pytest.fixture(params=KINDS)
def make_store(request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    """Builds stores of one kind on its seeded store (closed after the test)."""
    kind: str = request.param
    made: list[ChunkStore] = []

    def build(**settings: Any) -> ChunkStore:
        if kind == "milvus":
            base = {"uri": request.getfixturevalue("milvus_file"), "collection": "kb"}
        elif kind == "qdrant":
            base = {"uri": request.getfixturevalue("qdrant_path"), "collection": "kb"}
        elif kind == "postgres":
            cluster = request.getfixturevalue("postgres_table")
            base = {"secret": cluster.dsn, "collection": "kb.chunks"}
        else:
            request.getfixturevalue("hook_store")
            base = {"hook": "tests.resolver.hooks:lookup"}
        store = build_store(kind, **{**base, **settings})
        made.append(store)
        return store

    yield build
    for store in made:
        store.close()


# ---- the findings through every store ------------------------------------------------------


def test_findings_through_the_store(make_store: StoreFactory) -> None:
    resolver = Resolver(make_store())
    got = resolver.resolve_records([(r, compute(r, SignalParams())) for r in RECORDS])
    assert [g.findings for g in got] == EXPECTED
    assert [g.error for g in got] == [None, None, None]
    assert resolver.stats.lookups == 1


def test_stored_chunk_fields(make_store: StoreFactory) -> None:
    got = make_store().lookup(["kb-1", "kb-6", "kb-3"])
    assert set(got) == {"kb-1", "kb-6"}
    assert got["kb-1"].text == ANSWERED["kb-1"]
    assert got["kb-1"].doc_id == "handbook"
    assert got["kb-1"].updated_at is not None
    assert got["kb-1"].updated_at.startswith("2026-11-01")
    assert (got["kb-6"].text_hash, got["kb-6"].text, got["kb-6"].doc_id) == (None, None, "admin")


# A hook returns its four keys whatever the field names.
@pytest.mark.parametrize("make_store", ["milvus", "qdrant", "postgres"], indirect=True)
def test_fields_left_out_are_not_read(make_store: StoreFactory) -> None:
    store = make_store(fields=Fields(hash_field="", text_field="", updated_field=""))
    got = store.lookup(["kb-1"])
    assert (got["kb-1"].text_hash, got["kb-1"].text, got["kb-1"].doc_id) == (None, None, "handbook")


def test_ten_thousand_cited_ids_in_batches(make_store: StoreFactory) -> None:
    ids = [f"absent-{i}" for i in range(10_000 - len(STORED_IDS))] + sorted(STORED_IDS)
    cited = cited_chunks(
        record("big", *(Source(text="t", chunk_id=i) for i in ids)),
        compute(record("big", *(Source(text="t", chunk_id=i) for i in ids)), SignalParams()),
    )
    assert len(cited.chunks) == 10_000
    resolver = Resolver(make_store(), batch_size=500)
    [got] = resolver.resolve([cited])
    assert got.findings is not None
    assert len(got.findings.missing) == 10_000 - len(STORED_IDS)
    assert resolver.stats.lookups == 20


# ---- faults ---------------------------------------------------------------------------------


def reason_of(store: ChunkStore, ids: list[str] | None = None) -> ResolverError:
    with pytest.raises(ResolverError) as caught:
        store.lookup(ids or ["kb-1"])
    return caught.value


def test_milvus_unreachable_and_no_secret_in_the_message() -> None:
    pytest.importorskip("pymilvus")
    store = build_store(
        "milvus",
        uri=f"http://127.0.0.1:{free_port()}",
        collection="kb",
        secret="tok-s3cret",
        timeout_s=1,
    )
    with closing(store):
        error = reason_of(store)
    assert error.reason == "unreachable"
    assert "tok-s3cret" not in str(error)
    # Through the front: findings left out, counted, never raised.
    resolver = Resolver(store)
    [got] = resolver.resolve_records([(RECORDS[0], compute(RECORDS[0], SignalParams()))])
    assert (got.findings, got.error) == (None, "unreachable")
    assert resolver.stats.errors["unreachable"] == 1


def test_milvus_misnamed_fields(milvus_file: str) -> None:
    strict = build_store("milvus", uri=milvus_file, collection="kb_strict")
    with closing(strict):
        error = reason_of(strict)
    assert error.reason == "bad_field"
    assert "'text_hash'" in str(error) and "'doc_id'" in str(error)
    dynamic = build_store("milvus", uri=milvus_file, collection="kb", fields=Fields("chunkid"))
    with closing(dynamic):
        assert reason_of(dynamic).reason == "bad_field"  # no row has a field "chunkid"
    missing = build_store("milvus", uri=milvus_file, collection="nope")
    with closing(missing):
        assert reason_of(missing).reason == "bad_field"


def test_milvus_field_names_are_plain() -> None:
    pytest.importorskip("pymilvus")
    with pytest.raises(ValueError, match="plain field name"):
        build_store("milvus", uri="x.db", collection="kb", fields=Fields('id"] or ["'))


def test_milvus_ids_are_quoted() -> None:
    from observer.resolver.backends.milvus import in_filter

    assert in_filter("chunk_id", ["a", 'b"c', "d\\e", "f\ng", "中"]) == (
        'chunk_id in ["a", "b\\"c", "d\\\\e", "f\\ng", "中"]'
    )


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_qdrant_unreachable_and_slow() -> None:
    pytest.importorskip("qdrant_client")
    nowhere = build_store(
        "qdrant", uri=f"http://127.0.0.1:{free_port()}", collection="kb", secret="key-s3cret"
    )
    with closing(nowhere):
        error = reason_of(nowhere)
    assert error.reason == "unreachable"
    assert "key-s3cret" not in str(error)
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        slow = build_store("qdrant", uri=f"http://127.0.0.1:{port}", collection="kb", timeout_s=1)
        with closing(slow):
            began = time.monotonic()
            assert reason_of(slow).reason == "timeout"
            assert time.monotonic() - began < 5


def test_qdrant_misnamed_fields(qdrant_path: str) -> None:
    store = build_store("qdrant", uri=qdrant_path, collection="kb", fields=Fields("chunkid"))
    with closing(store):
        error = reason_of(store)
    assert error.reason == "bad_field" and "'chunkid'" in str(error)
    store = build_store("qdrant", uri=qdrant_path, collection="nope")
    with closing(store):
        assert reason_of(store).reason == "bad_field"


def test_postgres_stopped_then_back(postgres_table: PostgresCluster) -> None:
    store = build_store("postgres", secret=postgres_table.dsn, collection="kb.chunks")
    with closing(store):
        assert "kb-1" in store.lookup(["kb-1"])  # connected
        postgres_table.stop()
        try:
            error = reason_of(store)
            assert error.reason == "unreachable"
            assert reason_of(store).reason == "unreachable"  # a new connection fails too
        finally:
            postgres_table.start()
        assert "kb-1" in store.lookup(["kb-1"])  # and comes back by itself


def test_postgres_unreachable_no_secret_in_the_message() -> None:
    pytest.importorskip("psycopg")
    dsn = f"host=127.0.0.1 port={free_port()} user=u password=pw-s3cret dbname=kb"
    store = build_store("postgres", secret=dsn, collection="chunks")
    with closing(store):
        error = reason_of(store)
    assert error.reason == "unreachable"
    assert "pw-s3cret" not in str(error)
    assert "s3cret" not in repr(error.detail)


def test_postgres_slow_and_misnamed(postgres_table: PostgresCluster) -> None:
    slow = build_store(
        "postgres", secret=postgres_table.dsn, collection="kb.slow_chunks", timeout_s=0.1
    )
    with closing(slow):
        assert reason_of(slow).reason == "timeout"
        assert reason_of(slow).reason == "timeout"  # again, on a new connection
    for table, fields in (("kb.chunks", Fields(hash_field="hash")), ("kb.nope", Fields())):
        store = build_store("postgres", secret=postgres_table.dsn, collection=table, fields=fields)
        with closing(store):
            assert reason_of(store).reason == "bad_field"


def test_postgres_integer_ids(postgres_table: PostgresCluster) -> None:
    fields = Fields(id_field="id", hash_field="", doc_field="", updated_field="")
    store = build_store(
        "postgres", secret=postgres_table.dsn, collection="kb.numbered", fields=fields
    )
    with closing(store):
        got = store.lookup(["2", "kb-1", "7"])
    assert set(got) == {"2"}
    assert got["2"].text == "two"


def test_hook_slow(hook_store: None) -> None:
    hooks.RELEASE.clear()
    store = build_store("hook", hook="tests.resolver.hooks:slow", timeout_s=0.1)
    try:
        began = time.monotonic()
        assert reason_of(store).reason == "timeout"
        assert time.monotonic() - began < 1
        assert reason_of(store).reason == "timeout"  # still running: no second thread
    finally:
        hooks.RELEASE.set()
    wait_until(lambda: hooks.CALLS, "the released hook call finished")
    assert "kb-1" in store.lookup(["kb-1"])


@pytest.mark.parametrize(
    ("function", "reason"),
    [("wrong_fields", "bad_field"), ("not_a_dict", "bad_field"), ("broken", "error")],
)
def test_hook_faults(function: str, reason: str) -> None:
    store = build_store("hook", hook=f"tests.resolver.hooks:{function}")
    error = reason_of(store)
    assert error.reason == reason
    if function == "wrong_fields":
        assert "'body', 'hash'" in str(error)


# ---- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "settings", "problem"),
    [
        ("redis", {}, "not one of"),
        ("hook", {}, "module:function"),
        ("hook", {"hook": "tests.resolver.hooks"}, "module:function"),
        ("hook", {"hook": "tests.resolver.nothing_here:f"}, "cannot import"),
        ("hook", {"hook": "tests.resolver.hooks:absent"}, "has no"),
        ("hook", {"hook": "tests.resolver.hooks:NOT_CALLABLE"}, "not callable"),
        ("milvus", {"uri": "x.db"}, "needs collection"),
        ("milvus", {"collection": "kb"}, "needs uri"),
        ("milvus", {"collection": "kb", "uri": "milvus:19530"}, "Milvus server URI"),
        ("postgres", {"collection": "chunks"}, "needs a DSN"),
        ("postgres", {"collection": "a..b", "uri": "host=x"}, "table"),
        ("qdrant", {"collection": "kb", "uri": "x", "timeout_s": 0}, "timeout_s"),
    ],
)
def test_bad_settings_are_refused_at_build(
    kind: str, settings: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        build_store(kind, **settings)


def test_fields_need_an_id_field() -> None:
    with pytest.raises(ValueError, match="id_field"):
        Fields(id_field="")
    assert Fields(hash_field="", doc_field="chunk_id").read == (
        "chunk_id",
        "text",
        "updated_at",
    )
    assert replace(Fields(), text_field="body").read[2] == "body"


@pytest.mark.parametrize(
    ("text", "secrets", "expected"),
    [
        ("failed for http://admin:hunter2@milvus:19530", (), "failed for http://***@milvus:19530"),
        ("dsn host=db password=hunter2 user=u", (), "dsn host=db password=*** user=u"),
        ("token: abc.def rejected", (), "token=*** rejected"),
        ("bad key k-123 given", ("k-123",), "bad key *** given"),
        ("two\n  lines", (), "two lines"),
    ],
)
def test_error_messages_hold_no_secret(text: str, secrets: tuple[str, ...], expected: str) -> None:
    from observer.resolver.backends._common import redact

    assert redact(text, secrets) == expected


# ---- observer check on every store ----------------------------------------------------------


def resolver_env(kind: str, request: pytest.FixtureRequest) -> dict[str, str]:
    if kind == "milvus":
        return {"URI": request.getfixturevalue("milvus_file"), "COLLECTION": "kb"}
    if kind == "qdrant":
        return {"URI": request.getfixturevalue("qdrant_path"), "COLLECTION": "kb"}
    if kind == "postgres":
        return {"SECRET_ENV": "KB_DSN", "COLLECTION": "kb.chunks"}
    request.getfixturevalue("hook_store")
    return {"HOOK": "tests.resolver.hooks:lookup"}


def check_row(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, **extra: str
) -> tuple[str, bool]:
    from observer import app
    from observer.config import load_settings

    if kind == "postgres":
        monkeypatch.setenv("KB_DSN", request.getfixturevalue("postgres_table").dsn)
    for key, value in {"KIND": kind, **resolver_env(kind, request), **extra}.items():
        monkeypatch.setenv(f"OBSERVER_RESOLVER__{key}", value)
    recent = [(r, compute(r, SignalParams())) for r in RECORDS]
    return app.check_resolver(load_settings(), recent)


@pytest.mark.parametrize("kind", KINDS)
def test_check_looks_up_recently_cited_chunks(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    row, failed = check_row(kind, request, monkeypatch)
    assert not failed, row
    assert "reachable, chunk_id queried; 7 recently cited chunks looked up: 6 found (" in row
    assert row.endswith("), 1 missing, 2 stale")


@pytest.mark.parametrize("kind", ["milvus", "qdrant", "postgres"])
def test_check_fails_on_a_wrong_id_field(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    row, failed = check_row(kind, request, monkeypatch, ID_FIELD="doc_id")
    assert failed
    assert "none of 7 recently cited chunk ids is in the store: is id_field 'doc_id' right" in row
