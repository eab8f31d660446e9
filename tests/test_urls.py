"""A URL as observer shows it (observer/urls.py): never with its credentials."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.urls import without_credentials


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://proxy:hunter2@langfuse.internal/x?y=1#z", "https://langfuse.internal/x"),
        ("https://token@langfuse.internal", "https://langfuse.internal"),
        ("redis://:hunter2@redis:6379/0", "redis://redis:6379/0"),
        ("rediss://user:hunter2@[::1]:6380/1", "rediss://[::1]:6380/1"),
        ("redis://redis:6379/0?password=hunter2", "redis://redis:6379/0"),
        ("unix:///run/redis.sock?password=hunter2", "unix:///run/redis.sock"),
        ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"),
        ("./milvus.db", "./milvus.db"),  # a file, not a URL: as it is
        (":memory:", ":memory:"),
        ("http://user:hunter2@[::1", "http://[::1"),  # a malformed host: cut by hand
        ("http://user:hunter2@[::1?password=hunter2", "http://[::1"),
        ("", ""),
    ],
)
def test_a_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    assert without_credentials(url) == shown


SECRET = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=12, max_size=20)


@given(
    scheme=st.sampled_from(["http", "https", "redis", "rediss", "unix"]),
    host=st.sampled_from(["langfuse.internal", "127.0.0.1:6379", "[::1]:80", "[::1", ""]),
    user=st.sampled_from(["", "user", "default"]),
    secret=SECRET,
    path=st.sampled_from(["", "/", "/0", "/api/public"]),
    where=st.sampled_from(["password", "query"]),
)
def test_a_secret_in_a_url_is_never_shown(
    scheme: str, host: str, user: str, secret: str, path: str, where: str
) -> None:
    if where == "password":
        url = f"{scheme}://{user}:{secret}@{host}{path}"
    else:
        url = f"{scheme}://{host}{path}?password={secret}&token={secret}"
    assert secret not in without_credentials(url)
