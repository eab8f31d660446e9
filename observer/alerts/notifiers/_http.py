"""What the HTTP notifiers share: one client builder and one translation of failures.

Status classes, the same for every receiver:

    2xx                  delivered
    429                  NotifyError(retry_after_s=Retry-After)     retried after it
    408, 425, 5xx        NotifyError (retryable; Retry-After kept)  retried with backoff
    3xx, other 4xx       NotifyError(retryable=False)               the request is wrong
    no answer            NotifyError (retryable)                    retried with backoff

Error messages carry the status and a short excerpt of the answer (receivers
say what they disliked there) with every secret the notifier knows replaced
by `***`; never the URL, which may itself be the secret (Slack).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import httpx

from observer import USER_AGENT
from observer.alerts.notifiers import NotifyError
from observer.redaction import redact
from observer.retry import parse_retry_after

_RETRYABLE_4XX = frozenset({408, 425, 429})
_EXCERPT_CHARS = 200


def make_client(timeout_s: float) -> httpx.Client:
    """The client of one notifier: pooled keep-alive, no redirects, proxies from the environment."""
    return httpx.Client(
        timeout=httpx.Timeout(timeout_s),
        headers={"User-Agent": USER_AGENT},
        follow_redirects=False,  # a receiver that moved is a configuration error to fix
    )


def check_url(what: str, url: str) -> str:
    """`url` without a trailing slash, or ValueError (naming no part of it) when not http(s)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        raise ValueError(f"{what}: the url is not a valid URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{what}: the url must be an absolute http:// or https:// URL")
    return url.rstrip("/")


def check_status(
    what: str,
    status: int,
    headers: Mapping[str, str],
    body: str,
    secrets: Iterable[str | None] = (),
) -> None:
    """Return for a 2xx; raise the NotifyError the module docstring's table names otherwise."""
    if 200 <= status < 300:
        return
    excerpt = " ".join(redact(body, secrets).split())[:_EXCERPT_CHARS]
    message = f"{what} answered HTTP {status}" + (f": {excerpt}" if excerpt else "")
    retry_after = _header(headers, "retry-after")
    if status == 429 or status >= 500 or status in _RETRYABLE_4XX:
        raise NotifyError(message, retry_after_s=parse_retry_after(retry_after))
    raise NotifyError(message, retryable=False)


def transport_error(what: str, error: Exception, secrets: Iterable[str | None] = ()) -> NotifyError:
    """No answer (refused, timed out, reset): worth another try."""
    detail = redact(str(error), secrets)
    return NotifyError(
        f"{what} unreachable: {type(error).__name__}" + (f": {detail}" if detail else "")
    )


def post(
    client: httpx.Client,
    what: str,
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    secrets: Iterable[str | None] = (),
) -> httpx.Response:
    """POST `content`; the response when it is a 2xx, else NotifyError."""
    secrets = tuple(secrets)
    try:
        response = client.post(url, content=content, headers=dict(headers))
    except httpx.HTTPError as error:
        raise transport_error(what, error, secrets) from None
    check_status(what, response.status_code, response.headers, response.text, secrets)
    return response


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None
