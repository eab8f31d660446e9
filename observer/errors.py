"""Errors of talking to the outside, translated at the edge.

    ObserverError
     +-- RemoteError            talking to Langfuse (or another server) failed
          +-- Unreachable       connection refused, timeout, 5xx: try again later
          +-- RateLimited       429: try again after `retry_after` seconds
          +-- AuthRejected      401/403: the keys are wrong; retrying will not help
          +-- Rejected          other 4xx: the request itself is wrong

`ConfigError` (observer.config) and `StateError` (observer.state) are the
errors of the local files.
"""

from __future__ import annotations


class ObserverError(Exception):
    """Base of observer's own errors."""


class RemoteError(ObserverError):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Unreachable(RemoteError):
    pass


class RateLimited(RemoteError):
    def __init__(self, message: str, retry_after_s: float | None, status: int = 429) -> None:
        super().__init__(message, status)
        self.retry_after_s = retry_after_s


class AuthRejected(RemoteError):
    pass


class Rejected(RemoteError):
    pass
