"""The one place the Langfuse SDK's API client is built, and its errors translated.

observer reads and writes through `langfuse.api.client.LangfuseAPI` (SDK 5)
with the SDK's own retries turned off (`max_retries: 0`): the rate limiter,
`Retry-After` and the backoff live in observer, where every request is
counted.

`translate(error, what)` turns an SDK or transport error into observer's
RemoteError tree (observer.errors). A 403 whose message says "Usage threshold
exceeded" (Langfuse Cloud's `Ingestion suspended: Usage threshold exceeded.
Please upgrade your plan.` on score posts, ingestion and OTLP; `Access
suspended: ...` on MCP) is `UsageSuspended`: the project's usage limit, not
its keys. A 429 is `RateLimited` with its `Retry-After` and its
`X-RateLimit-Limit` (the request budget settles by it; observer.sources.ratelimit).

`build_api` runs the client on `observer.http_bounds.bounded_client`: no
redirect followed by a write or to another origin (`Misdirected`, naming the
`Location`), every answer bounded in size (`source.max_response_mb`, also
once decompressed) and in time (`source.request_deadline_s`).

`check_server_version(api, base_url)` reads `GET /api/public/health`
(`{"status", "version"}`, no auth, no rate limit) and raises
`UnsupportedServer` for a self-hosted server older than v4.59, the first to
take a JSON array of scores (older ones answer 400 to the batches observer
posts). The server reports its release as `4.59.0` (its `VERSION` constant
without the `v`), Cloud included; Cloud runs the newest code, so a Cloud host
(`cloud.langfuse.com`, `<region>.cloud.langfuse.com`) is never refused. A
version that does not parse is logged (`server_version_unknown`) and let
through; an unreadable health endpoint raises the RemoteError, for the caller
to decide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, cast
from urllib.parse import urlsplit

import httpx
import pydantic
import structlog
from langfuse.api.client import LangfuseAPI
from langfuse.api.core.api_error import ApiError
from langfuse.api.core.request_options import RequestOptions
from packaging.version import InvalidVersion, Version

from observer import USER_AGENT, __version__
from observer.errors import (
    AuthRejected,
    Misdirected,
    RateLimited,
    Rejected,
    RemoteError,
    Unreachable,
    UnsupportedServer,
    UsageSuspended,
)
from observer.http_bounds import bounded_client
from observer.retry import parse_retry_after
from observer.urls import without_credentials

log = structlog.get_logger("observer.langfuse")

NO_RETRIES: RequestOptions = {"max_retries": 0}

# The first self-hosted release that takes a JSON array on POST /api/public/scores.
MIN_SERVER_VERSION: Final = "4.59.0"
CLOUD_HOST: Final = "cloud.langfuse.com"
_USAGE_SUSPENDED: Final = "usage threshold exceeded"
# The defaults of source.max_response_mb and source.request_deadline_s (docs/configuration.md).
MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024
REQUEST_DEADLINE_S: Final = 120.0
FIX_BASE_URL: Final = (
    "set LANGFUSE_BASE_URL to the address Langfuse itself answers on "
    "(https:// where an ingress redirects to it)"
)


def build_api(
    base_url: str,
    public_key: str,
    secret_key: str,
    timeout_s: float,
    *,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    deadline_s: float = REQUEST_DEADLINE_S,
) -> LangfuseAPI:
    client = bounded_client(
        timeout_s=timeout_s,
        max_bytes=max_response_bytes,
        deadline_s=deadline_s,
        limit_name="source.max_response_mb",
        deadline_name="source.request_deadline_s",
        fix=FIX_BASE_URL,
    )
    return LangfuseAPI(
        base_url=base_url.rstrip("/"),
        username=public_key,
        password=secret_key,
        x_langfuse_sdk_name="observer",
        x_langfuse_sdk_version=__version__,
        x_langfuse_public_key=public_key,
        headers={"User-Agent": USER_AGENT},
        timeout=timeout_s,
        httpx_client=client,
    )


def seconds(timeout_s: float) -> int:
    """A request's timeout for the SDK's `timeout_in_seconds`, typed int but handed to
    httpx as it is: a fraction of a second stays one."""
    return cast(int, timeout_s)


def _retry_after(headers: dict[str, str] | None) -> float | None:
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    return parse_retry_after(lowered.get("retry-after"))


def _rate_limit(headers: dict[str, str] | None) -> float | None:
    """`X-RateLimit-Limit` (Langfuse sends it on a 429 only), or None when absent or not
    a positive number."""
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    try:
        limit = float(lowered.get("x-ratelimit-limit", "").strip())
    except ValueError:
        return None
    return limit if math.isfinite(limit) and limit > 0 else None


def _message(body: Any) -> str:
    """The server's message from an error body (`{"message", "error"}`, or plain text)."""
    if isinstance(body, dict):
        body = body.get("message") or ""
    return " ".join(str(body or "").split())[:200]


def _tried(error: httpx.HTTPError) -> str:
    """`http://host/api/public/... ` for an error that knows its request (without the
    URL's credentials and query), else nothing."""
    try:
        url = str(error.request.url)
    except RuntimeError:  # an error raised before a request was built
        return ""
    return f"{without_credentials(url)}: "


def translate(error: Exception, what: str) -> RemoteError:
    """An SDK or transport error as one of observer's RemoteErrors; never echoes secrets."""
    if isinstance(error, RemoteError):
        return error
    if isinstance(error, ApiError):
        status = error.status_code or 0
        if status == 429:
            limit = _rate_limit(error.headers)
            return RateLimited(
                f"{what}: rate limited (429"
                + (f", X-RateLimit-Limit {limit:g})" if limit is not None else ")"),
                _retry_after(error.headers),
                limit=limit,
            )
        if status == 403 and _USAGE_SUSPENDED in _message(error.body).lower():
            return UsageSuspended(
                f"{what}: Langfuse suspended this project: its usage limit is exceeded "
                f"(403 {_message(error.body)!r}); the keys are fine. Upgrade the plan or "
                "wait for the next usage period",
                status,
            )
        if status in (401, 403):
            return AuthRejected(f"{what}: Langfuse rejected the keys ({status})", status)
        if 300 <= status < 400:
            location = {k.lower(): v for k, v in (error.headers or {}).items()}.get("location", "")
            return Misdirected(
                f"{what}: Langfuse answered {status} redirecting to {location or '(nowhere)'}; "
                f"observer does not follow it: {FIX_BASE_URL}",
                status,
                location=location,
            )
        if status >= 500 or status in (408, 409):
            return Unreachable(f"{what}: Langfuse answered {status}", status)
        if 200 <= status < 300:  # a success whose body was not the API's (HTML, cut short)
            excerpt = " ".join(str(error.body or "").split())[:120]
            return Unreachable(f"{what}: Langfuse answered {status} {excerpt!r}", status)
        body = str(error.body)[:200] if error.body is not None else ""
        return Rejected(f"{what}: Langfuse answered {status} {body}".rstrip(), status)
    if isinstance(error, httpx.TimeoutException):
        return Unreachable(f"{what}: {_tried(error)}timed out")
    if isinstance(error, httpx.HTTPError):
        return Unreachable(f"{what}: {_tried(error)}{type(error).__name__}: {error}")
    return Unreachable(f"{what}: unexpected {type(error).__name__}: {error}")


# -- the server's version ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerVersion:
    """What `GET /api/public/health` said the server is, and what observer made of it."""

    version: str | None  # as the server spells it; None when it named none
    cloud: bool  # a Langfuse Cloud host: the newest server, whatever it says
    known: bool  # the version parsed (False: let through, with a warning)

    @property
    def describe(self) -> str:
        """One phrase for `check`: `Langfuse 4.60.0 (self-hosted)`."""
        where = "Cloud" if self.cloud else "self-hosted"
        version = self.version if self.version else "of an unknown version"
        unknown = "" if self.known else ", version not understood"
        return f"Langfuse {version} ({where}{unknown})"


def is_cloud(base_url: str) -> bool:
    """Whether `base_url` is Langfuse Cloud (`cloud.langfuse.com` or a region of it)."""
    host = (urlsplit(base_url).hostname or "").lower().rstrip(".")
    return host == CLOUD_HOST or host.endswith("." + CLOUD_HOST)


def assess_server_version(version: str | None, base_url: str) -> ServerVersion:
    """Pure: the server's version judged; `UnsupportedServer` when it is self-hosted and
    older than MIN_SERVER_VERSION. A pre-release counts as its release (4.59.0-rc.1 is
    4.59.0, as the server itself reads SDK versions)."""
    cloud = is_cloud(base_url)
    text = (version or "").strip()
    try:
        parsed = Version(text)
    except InvalidVersion:
        return ServerVersion(text or None, cloud, known=False)
    if not cloud and Version(parsed.base_version) < Version(MIN_SERVER_VERSION):
        raise UnsupportedServer(
            f"Langfuse at {base_url} is version {text}; observer needs Langfuse Cloud or a "
            f"self-hosted Langfuse v{MIN_SERVER_VERSION} or newer (it posts scores in "
            "batches, which older servers refuse with 400): upgrade the server",
            version=text,
            needed=MIN_SERVER_VERSION,
        )
    return ServerVersion(text, cloud, known=True)


def check_server_version(
    api: LangfuseAPI, base_url: str, timeout_s: float | None = None
) -> ServerVersion:
    """`GET /api/public/health`, judged by `assess_server_version`.

    Raises UnsupportedServer for a server too old, or the RemoteError of an unreachable
    (or 503) health endpoint: whether that stops anything is the caller's decision. An
    answer without a readable version is let through, logged once per call.
    """
    options: RequestOptions = {"max_retries": 0}
    if timeout_s is not None:  # a first contact's try: within what is left of its bound
        options["timeout_in_seconds"] = seconds(timeout_s)
    try:
        health = api.health.health(request_options=options)
        version: str | None = health.version
    except pydantic.ValidationError:  # a 200 without a version string
        version = None
    except Exception as error:
        raise translate(error, "reading Langfuse's version (GET /api/public/health)") from None
    judged = assess_server_version(version, base_url)
    if not judged.known:
        log.warning(
            "server_version_unknown",
            version=version,
            needed=MIN_SERVER_VERSION,
            action="going on: score batches fail with 400 if the server is older",
        )
    return judged
