"""Stream entries: encoded and decoded unchanged; anything else is a BadEntry."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.fleet.entry import BadEntry, Entry, decode, encode

ROOT = datetime(2026, 12, 1, 12, 0, 0, 123000, tzinfo=UTC)
NOW = datetime(2026, 12, 1, 12, 5, tzinfo=UTC)


def _fields(entry: Entry) -> dict[bytes, bytes]:
    return {k.encode(): v for k, v in encode(entry).items()}


@given(
    st.text(min_size=1, max_size=30),
    st.lists(
        st.dictionaries(
            st.text(max_size=5), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5)
        ),
        max_size=4,
    ),
    st.none() | st.integers(min_value=1, max_value=10**9),
)
def test_an_entry_survives_the_stream(
    trace_id: str, observations: list[dict[str, object]], too_large: int | None
) -> None:
    entry = Entry(trace_id, observations, ROOT, NOW, NOW, too_large)
    back = decode(_fields(entry))
    assert back == entry
    assert back.digest == entry.digest


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {b"trace": b"t"},
        {b"trace": b"t", b"body": b"not json"},
        {b"trace": b"t", b"body": b'{"root": "x", "now": "y", "observations": []}'},
        {b"trace": b"\xff", b"body": b"{}"},
    ],
)
def test_anything_else_is_a_bad_entry(fields: dict[bytes, bytes]) -> None:
    with pytest.raises(BadEntry):
        decode(fields)


def test_the_digest_changes_with_the_observations() -> None:
    one = Entry("t", [{"id": "a"}], ROOT, NOW)
    two = Entry("t", [{"id": "a"}, {"id": "b"}], ROOT, NOW)
    assert one.digest != two.digest
    assert one.digest == Entry("t", [{"id": "a"}], ROOT, ROOT).digest  # not when read
