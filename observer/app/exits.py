"""The exit codes of observer's commands, and which one a remote error means.

0 done; 2 bad configuration or state file (a base URL Langfuse redirects away from
included); 3 Langfuse unreachable (or scores still undelivered at exit, kept in the outbox
for the next run); 4 Langfuse rejected the keys.
"""

from __future__ import annotations

from observer.errors import AuthRejected, Misdirected, RemoteError

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4


def exit_code(error: RemoteError) -> int:
    if isinstance(error, Misdirected):
        return EXIT_CONFIG
    return EXIT_AUTH if isinstance(error, AuthRejected) else EXIT_UNREACHABLE
