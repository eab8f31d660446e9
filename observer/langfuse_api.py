"""The one place the Langfuse SDK's API client is built, and its errors translated.

observer reads and writes through `langfuse.api.client.LangfuseAPI` (SDK 5)
with the SDK's own retries turned off (`max_retries: 0`): the rate limiter,
`Retry-After` and the backoff live in observer, where every request is
counted.
"""

from __future__ import annotations

import httpx
from langfuse.api.client import LangfuseAPI
from langfuse.api.core.api_error import ApiError
from langfuse.api.core.request_options import RequestOptions

from observer import __version__
from observer.errors import AuthRejected, RateLimited, Rejected, RemoteError, Unreachable
from observer.retry import parse_retry_after

NO_RETRIES: RequestOptions = {"max_retries": 0}


def build_api(base_url: str, public_key: str, secret_key: str, timeout_s: float) -> LangfuseAPI:
    return LangfuseAPI(
        base_url=base_url.rstrip("/"),
        username=public_key,
        password=secret_key,
        x_langfuse_sdk_name="observer",
        x_langfuse_sdk_version=__version__,
        x_langfuse_public_key=public_key,
        timeout=timeout_s,
    )


def _retry_after(headers: dict[str, str] | None) -> float | None:
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    return parse_retry_after(lowered.get("retry-after"))


def translate(error: Exception, what: str) -> RemoteError:
    """An SDK or transport error as one of observer's RemoteErrors; never echoes secrets."""
    if isinstance(error, RemoteError):
        return error
    if isinstance(error, ApiError):
        status = error.status_code or 0
        if status == 429:
            return RateLimited(f"{what}: rate limited (429)", _retry_after(error.headers))
        if status in (401, 403):
            return AuthRejected(f"{what}: Langfuse rejected the keys ({status})", status)
        if status >= 500 or status in (408, 409):
            return Unreachable(f"{what}: Langfuse answered {status}", status)
        body = str(error.body)[:200] if error.body is not None else ""
        return Rejected(f"{what}: Langfuse answered {status} {body}".rstrip(), status)
    if isinstance(error, httpx.TimeoutException):
        return Unreachable(f"{what}: timed out")
    if isinstance(error, httpx.HTTPError):
        return Unreachable(f"{what}: {type(error).__name__}: {error}")
    return Unreachable(f"{what}: unexpected {type(error).__name__}: {error}")
