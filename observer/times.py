"""Time helpers every layer uses: parsing API timestamps, writing ISO-8601, durations.

Pure: no clock is read here; callers pass `now`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any


def parse_time(value: Any) -> datetime | None:
    """An API timestamp (ISO string or datetime) as an aware UTC datetime."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and value:
        return _parsed(value)
    else:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


@lru_cache(maxsize=4096)
def _parsed(value: str) -> datetime | None:
    """A timestamp string parsed once while recent: every rule of a trace reads its times."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def iso_text(value: Any) -> str | None:
    """An API timestamp written as `iso` writes it (None when it is no time); a string
    already written so is kept as it is."""
    if isinstance(value, str) and _CANONICAL.match(value):
        return value
    moment = parse_time(value)
    return iso(moment) if moment is not None else None


_CANONICAL = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def iso(moment: datetime) -> str:
    """UTC ISO-8601 with milliseconds and Z, as Langfuse writes it."""
    return (
        moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    )


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> timedelta:
    """A Prometheus-style duration: `15m`, `4h`, `1h30m`, `0s`, `90s`. Raises ValueError."""
    value = text.strip()
    position, total = 0, 0.0
    for match in _DURATION.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        position = match.end()
    if not value or position != len(value):
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 15m, 4h, 1h30m, 0s)")
    try:
        return timedelta(seconds=total)
    except OverflowError:
        raise ValueError(f"not a duration: {text!r} is too long") from None


def format_duration(seconds: float) -> str:
    """The shortest readable form: 900 -> 15m, 5400 -> 1h30m, 0 -> 0s."""
    if seconds <= 0:
        return "0s"
    parts = []
    rest = round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) or f"{seconds:g}s"
