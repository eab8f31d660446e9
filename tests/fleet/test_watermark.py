"""The watermark rule (pure): up to the settled time, never past an undone or an
unacknowledged trace, never back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.pipeline import next_watermark

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@pytest.mark.parametrize(
    ("current", "settled", "hold", "unacked", "expected"),
    [
        (None, at(10), None, None, at(10)),  # first pass: up to the settled time
        (at(5), at(10), None, None, at(10)),
        (at(5), at(10), at(7), None, at(7)),  # an unsettled trace holds it
        (at(5), at(10), None, at(6), at(6)),  # a published trace not yet acknowledged
        (at(5), at(10), at(8), at(6), at(6)),  # the lower of the two
        (at(5), at(10), None, at(4), None),  # never back, even below an old unacked one
        (at(5), at(10), at(5), None, None),  # equal: stays
        (None, at(10), None, at(2), at(2)),
    ],
)
def test_the_watermark_rule(
    current: datetime | None,
    settled: datetime,
    hold: datetime | None,
    unacked: datetime | None,
    expected: datetime | None,
) -> None:
    assert next_watermark(current, settled, hold, unacked) == expected


moments = st.integers(0, 10_000).map(lambda s: T0 + timedelta(seconds=s))


@given(st.none() | moments, moments, st.none() | moments, st.none() | moments)
def test_it_never_passes_an_unacknowledged_trace_and_never_goes_back(
    current: datetime | None,
    settled: datetime,
    hold: datetime | None,
    unacked: datetime | None,
) -> None:
    moved = next_watermark(current, settled, hold, unacked)
    if moved is None:
        assert current is not None
        return
    assert current is None or moved > current
    assert moved <= settled
    assert hold is None or moved <= hold
    assert unacked is None or moved <= unacked


@given(st.lists(st.tuples(moments, st.none() | moments), min_size=1, max_size=8))
def test_passes_in_a_row_only_move_it_forward(
    passes: list[tuple[datetime, datetime | None]],
) -> None:
    current: datetime | None = None
    for settled, unacked in passes:
        moved = next_watermark(current, settled, None, unacked)
        if moved is not None:
            assert current is None or moved > current
            current = moved
