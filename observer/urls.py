"""A URL as observer shows it: in output, log lines and error messages, never with the
credentials a URL can carry.

A URL may hold a password (`https://user:secret@langfuse.internal`,
`redis://:secret@redis:6379/0`) or a token in its query (`?password=...`,
`?api_key=...`). `without_credentials` keeps what says where observer went
(scheme, host, port, path) and drops the user information, the query and the
fragment. Every URL observer prints or logs goes through it first.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit


def without_credentials(url: str) -> str:
    """`url` without its user information, query and fragment; text that is not a URL
    (a file path, `:memory:`) as it is."""
    try:
        parts = urlsplit(url)
    except ValueError:  # a malformed host ("[::1"): cut by hand
        scheme, sep, rest = url.partition("://")
        host = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[2]
        return f"{scheme}{sep}{host}" if sep else url
    if not parts.scheme or "://" not in url:  # a path, `:memory:`, `C:\\...`
        return url
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}"
