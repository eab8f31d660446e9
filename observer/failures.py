"""One error policy: what stopped a pass, classified the same way in every mode.

A 401 or 403 is "auth" in every mode (solo, `run --once`, backfill, a fleet's
reader); a 5xx, a timeout, a connection refused, a 429 or the fleet's Redis away
"unreachable"; a redirect observer does not follow (or a server too old) "config";
a state file that cannot be written, or was deleted or replaced, "state"; anything
else "crashed" (a bug: logged with its traceback). A stop (SIGTERM, a lost lease) is
no failure. These are the `kind` values of `observer_passes_failed_total`, and
observer.app.exits maps them to exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

import redis
import structlog

from observer.errors import AuthRejected, ConfigError, Misdirected, RemoteError, UnsupportedServer
from observer.sources import Stopped
from observer.state import StateError

if TYPE_CHECKING:
    from observer.pipeline import PassResult

log = structlog.get_logger("observer.app")

FailureKind = Literal["unreachable", "auth", "config", "state", "crashed"]


def classify(error: BaseException) -> FailureKind | None:
    """What stopped a pass, the same in every mode; None for a stop (no failure)."""
    if isinstance(error, Stopped):  # a lost lease is one too
        return None
    if isinstance(error, StateError):
        return "state"
    if isinstance(error, ConfigError | Misdirected | UnsupportedServer):
        return "config"
    if isinstance(error, AuthRejected):
        return "auth"
    if isinstance(error, RemoteError | redis.RedisError):
        return "unreachable"
    return "crashed"


@dataclass(frozen=True)
class PassOutcome:
    """One pass: what it read, scored and queued (`result`, None when it never began),
    and what stopped it: `failure` (its class) and `error`, or a stop."""

    moment: datetime
    result: PassResult | None
    failure: FailureKind | None = None
    error: BaseException | None = None

    @property
    def completed(self) -> bool:
        return self.error is None

    @property
    def stopped(self) -> bool:
        return self.error is not None and self.failure is None


def said(outcome: PassOutcome, **context: object) -> None:
    """The outcome in the log, once: `poll_failed` with its class (`poll_crashed` with
    the traceback for a bug); a stop says `pass_ended`. A completed pass said
    `poll_completed` already."""
    error = outcome.error
    if error is None:
        return
    if outcome.failure is None:
        log.info("pass_ended", reason=type(error).__name__, **context)
    elif outcome.failure == "crashed":
        log.error("poll_crashed", exc_info=error, **context)
    elif outcome.failure == "unreachable":
        log.warning("poll_failed", kind="unreachable", error=str(error), **context)
    else:
        log.error("poll_failed", kind=outcome.failure, error=str(error), **context)
