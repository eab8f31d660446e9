"""Durations as rules write them, and the timestamps of the API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.times import format_duration, iso, parse_duration, parse_time


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0s", 0.0),
        ("90s", 90.0),
        ("15m", 900.0),
        ("4h", 14400.0),
        ("1h30m", 5400.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("250ms", 0.25),
        ("1m500ms", 60.5),
        ("1.5h", 5400.0),
        ("  2m ", 120.0),
        ("1d2h3m4s", 93784.0),
    ],
    ids=[
        "zero",
        "seconds",
        "minutes",
        "hours",
        "hours_and_minutes",
        "day",
        "week",
        "milliseconds",
        "minute_and_milliseconds",
        "fractional_hours",
        "surrounding_spaces",
        "every_unit",
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "15", "m", "15 m", "-5m", "15M", "1h 30m", "15min", "1y", "abc", "5m!", "1.m"],
    ids=[
        "empty",
        "blank",
        "no_unit",
        "no_number",
        "space_inside",
        "negative",
        "upper_case_unit",
        "space_between_parts",
        "long_unit",
        "unknown_unit",
        "words",
        "trailing_junk",
        "dangling_point",
    ],
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    "text", ["99999999999w", "9" * 400 + "s"], ids=["beyond_timedelta", "beyond_float"]
)
def test_a_duration_too_long_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="is too long"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (-5, "0s"),
        (1, "1s"),
        (59, "59s"),
        (60, "1m"),
        (90, "1m30s"),
        (900, "15m"),
        (3600, "1h"),
        (5400, "1h30m"),
        (14400, "4h"),
        (86400, "1d"),
        (90061, "1d1h1m1s"),
        (0.25, "0.25s"),
    ],
    ids=[
        "zero",
        "negative_is_zero",
        "one_second",
        "under_a_minute",
        "minute",
        "minute_and_a_half",
        "quarter_hour",
        "hour",
        "hour_and_a_half",
        "four_hours",
        "day",
        "every_unit",
        "under_a_second",
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=10 * 365 * 86400))
def test_whole_seconds_survive_format_then_parse(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)).total_seconds() == seconds


@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=500), st.sampled_from("smhdw")),
        min_size=1,
        max_size=5,
    )
)
def test_any_written_duration_formats_to_one_canonical_text(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{unit}" for n, unit in parts)
    seconds = parse_duration(text).total_seconds()
    canonical = format_duration(seconds)
    assert parse_duration(canonical).total_seconds() == seconds
    assert format_duration(parse_duration(canonical).total_seconds()) == canonical
    # Each unit at most once, largest first: 90s is written 1m30s, never 90s.
    units = [u for u in canonical if u.isalpha()]
    assert units == sorted(set(units), key="dhms".index)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-24T10:00:00Z", datetime(2026, 11, 24, 10, tzinfo=UTC)),
        ("2026-11-24T10:00:00.123Z", datetime(2026, 11, 24, 10, 0, 0, 123000, tzinfo=UTC)),
        ("2026-11-24T12:00:00+02:00", datetime(2026, 11, 24, 10, tzinfo=UTC)),
        ("2026-11-24T10:00:00", datetime(2026, 11, 24, 10, tzinfo=UTC)),
        (
            datetime(2026, 11, 24, 11, tzinfo=timezone(timedelta(hours=1))),
            datetime(2026, 11, 24, 10, tzinfo=UTC),
        ),
        (datetime(2026, 11, 24, 10), datetime(2026, 11, 24, 10, tzinfo=UTC)),
        ("", None),
        ("yesterday", None),
        (None, None),
        (1764000000, None),
    ],
    ids=[
        "zulu",
        "milliseconds",
        "offset_converted_to_utc",
        "naive_string_is_utc",
        "aware_datetime",
        "naive_datetime_is_utc",
        "empty",
        "not_a_time",
        "none",
        "number",
    ],
)
def test_parse_time(value: object, expected: datetime | None) -> None:
    parsed = parse_time(value)
    assert parsed == expected
    if parsed is not None:
        assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2026, 11, 24, 10, 0, 0, tzinfo=UTC), "2026-11-24T10:00:00.000Z"),
        (datetime(2026, 11, 24, 10, 0, 0, 123456, tzinfo=UTC), "2026-11-24T10:00:00.123Z"),
        (
            datetime(2026, 11, 24, 12, 0, 0, tzinfo=timezone(timedelta(hours=2))),
            "2026-11-24T10:00:00.000Z",
        ),
    ],
    ids=["whole_second", "milliseconds_truncated", "offset_to_utc"],
)
def test_iso(moment: datetime, text: str) -> None:
    assert iso(moment) == text


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(2200, 1, 1),
        timezones=st.just(UTC),
    )
)
def test_iso_reads_back_to_the_millisecond(moment: datetime) -> None:
    back = parse_time(iso(moment))
    assert back == moment.replace(microsecond=moment.microsecond // 1000 * 1000)
