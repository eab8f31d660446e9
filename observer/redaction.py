"""Secrets kept out of what observer says: one redaction for every error text.

A remote endpoint may echo what it was sent (a gateway's 401 that names the key
it got, a proxy's error page quoting the request): the notifiers and the judge
pass every error text they log, print or store through `redact`, with the
secrets they hold.
"""

from __future__ import annotations

from collections.abc import Iterable


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with every occurrence of each non-empty secret replaced by `***`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
