"""Wording and timestamps every notifier formats the same way (pure)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from observer.state.rows import Notification


def iso(moment: datetime) -> str:
    """RFC 3339 in UTC with a `Z` (naive times are taken as UTC), as every receiver parses it."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def finite(value: float | None) -> float | None:
    """None for NaN and infinities: JSON has neither, and a receiver would refuse the body."""
    return value if value is not None and math.isfinite(value) else None


def number(value: float) -> str:
    """Four significant digits, no exponent for the values signals take (0.4213, 0.6, 1200)."""
    return f"{value:.4g}"


def duration(seconds: float) -> str:
    """`90s`, `15m`, `1h`, `1h30m`, `2d`: how a rule's window reads in a message."""
    total = round(seconds)
    if total < 120 and total % 60:
        return f"{total}s"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if n
    ]
    return "".join(parts) or "0s"


def condition(notification: Notification) -> str | None:
    """`0.42 < 0.6` (value, op, threshold), or None when the notification has no value."""
    n = notification
    if n.value is None:
        return None
    if n.op is None or n.threshold is None:
        return number(n.value)
    return f"{number(n.value)} {n.op} {number(n.threshold)}"


def group_text(notification: Notification) -> str:
    """`environment=production, query_type=billing`, or `all` for an ungrouped rule."""
    return ", ".join(f"{key}={value}" for key, value in notification.group) or "all"


def state_word(notification: Notification) -> str:
    """`FIRING` or `RESOLVED`; `TEST` (`TEST RESOLVED`) for `observer alerts test`'s alert."""
    word = "RESOLVED" if notification.state == "resolved" else "FIRING"
    if notification.kind == "test":
        return "TEST" if notification.state == "firing" else "TEST RESOLVED"
    return word
