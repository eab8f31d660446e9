"""observer: trust signals for RAG answers traced in Langfuse.

`__version__` (one source of truth: pyproject's version, as the installed
distribution says it) and `USER_AGENT` (what every request observer makes says it
is: Langfuse, the judge's endpoint, notifiers, the OTLP exporter;
docs/operating.md#versions) are worked out when first asked for: importlib.metadata
would cost every command tens of milliseconds, `observer score` among them, which
never asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    __version__: str
    USER_AGENT: str


def __getattr__(name: str) -> Any:
    if name not in ("__version__", "USER_AGENT"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("observer")
    except PackageNotFoundError:  # a source tree on sys.path, never installed
        found = "0+unknown"
    globals().update(__version__=found, USER_AGENT=f"observer/{found}")
    return globals()[name]
