"""observer: trust signals for RAG answers traced in Langfuse."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    # One source of truth: pyproject's version, as the installed distribution says it.
    __version__ = version("observer")
except PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

# Every request observer makes says who it is (Langfuse, the judge's endpoint, notifiers,
# the OTLP exporter): docs/operating.md#versions.
USER_AGENT = f"observer/{__version__}"
