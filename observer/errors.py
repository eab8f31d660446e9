"""Errors of talking to the outside, translated at the edge.

    ObserverError
     +-- RemoteError              talking to Langfuse (or another server) failed
     |    +-- Unreachable         connection refused, timeout, 5xx: try again later
     |    +-- RateLimited         429: try again after `retry_after` seconds; `limit`,
     |    |                       the server's X-RateLimit-Limit (requests a minute)
     |    +-- AuthRejected        401/403: the keys are wrong; retrying will not help
     |    |    +-- UsageSuspended 403 "... Usage threshold exceeded": the project's usage
     |    |                       limit, not the keys; retrying soon will not help either
     |    +-- Rejected            other 4xx: the request itself is wrong
     |    +-- Misdirected         a redirect observer does not follow (a write, or a read to
     |    |                       another origin): the base URL is wrong; `location`
     |    +-- TooLarge            the answer is past a size bound (observer.http_bounds)
     +-- UnsupportedServer        the Langfuse server is older than observer needs (exit 2)

`UsageSuspended` is an `AuthRejected` so that every caller stops and waits as it
does for rejected keys; its message says it is the usage limit, not the keys.
`ConfigError` (here, so that reading a file needs no settings model; observer.config
re-exports it) and `StateError` (observer.state) are the errors of the local files.
"""

from __future__ import annotations


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key and the problem."""


class ObserverError(Exception):
    """Base of observer's own errors."""


class RemoteError(ObserverError):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Unreachable(RemoteError):
    def tried(self, seconds: float, tries: int | None = None) -> Unreachable:
        """This error, its message saying for how long (and how often) it was tried."""
        if tries is None:
            said = f"tried for {seconds:.1f} s"
        else:
            said = f"tried {'once' if tries <= 1 else f'{tries} times'} over {seconds:.1f} s"
        return type(self)(f"{self} ({said})", self.status)


class RateLimited(RemoteError):
    def __init__(
        self,
        message: str,
        retry_after_s: float | None,
        status: int = 429,
        limit: float | None = None,
    ) -> None:
        super().__init__(message, status)
        self.retry_after_s = retry_after_s
        self.limit = limit  # X-RateLimit-Limit, when the answer carried it


class AuthRejected(RemoteError):
    pass


class UsageSuspended(AuthRejected):
    """Langfuse Cloud suspended the project's ingestion: its plan's usage threshold is
    exceeded. The keys are fine; an upgrade, or the next usage period, lifts it."""


class Rejected(RemoteError):
    pass


class Misdirected(RemoteError):
    """A 3xx observer will not follow: a configuration error naming where it pointed."""

    def __init__(self, message: str, status: int | None = None, location: str = "") -> None:
        super().__init__(message, status)
        self.location = location


class TooLarge(RemoteError):
    """The answer is larger than observer reads (its size, or its decompressed size)."""


class UnsupportedServer(ObserverError):
    """The Langfuse server is older than observer needs: a configuration problem (exit 2).

    `version` is what the server said it is, `needed` the oldest version that works."""

    def __init__(self, message: str, version: str, needed: str) -> None:
        super().__init__(message)
        self.version = version
        self.needed = needed
