"""The exit codes of observer's commands, and which one a failure means.

0 done; 2 bad configuration or state file (a base URL Langfuse redirects away from
included); 3 Langfuse unreachable (or scores still undelivered at exit, kept in the outbox
for the next run); 4 Langfuse rejected the keys. A failure is classified once, the same
in every mode (observer.failures); its class gives the code.
"""

from __future__ import annotations

from observer.errors import RemoteError
from observer.failures import FailureKind, classify

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4

EXIT_CODES: dict[FailureKind, int] = {
    "config": EXIT_CONFIG,
    "state": EXIT_CONFIG,
    "unreachable": EXIT_UNREACHABLE,
    "auth": EXIT_AUTH,
}


def exit_for(failure: FailureKind) -> int:
    """The exit code of a failure's class ("crashed" is a bug: the command's own 1)."""
    return EXIT_CODES.get(failure, 1)


def exit_code(error: RemoteError) -> int:
    failure = classify(error)
    return exit_for(failure) if failure is not None else EXIT_OK
