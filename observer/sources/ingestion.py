"""Which traces Langfuse may ingest late, told from their metadata (docs/daemon.md). Pure.

Data from `langfuse-python` < 4.7.0 and `langfuse-js` < 5.4.0 goes through
Langfuse's queued ingestion path and can appear in the Observations API up
to 15 minutes after it was sent (Observations API docs); SDK 5 writes
directly (`x-langfuse-ingestion-version: 4`) and lands within seconds. The
SDK names itself in the flattened metadata keys `scope.name` /
`scope.version`, its language in `resourceAttributes.telemetry.sdk.language`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

# Documented bound of the queued path, and the first SDK versions that write directly.
SLOW_INGESTION_BOUND_S = 900.0
_DIRECT_SINCE = {"python": Version("4.7.0"), "js": Version("5.4.0")}
_LANGUAGES = {"python": "python", "js": "js", "javascript": "js", "nodejs": "js", "node": "js"}


def _key(metadata: Mapping[str, Any], dotted: str) -> Any:
    """A flattened key (`scope.name`), or the nested form older servers returned."""
    if dotted in metadata:
        return metadata[dotted]
    head, _, rest = dotted.partition(".")
    inner = metadata.get(head)
    return _key(inner, rest) if rest and isinstance(inner, Mapping) else None


def slow_ingestion(metadata: Any) -> str | None:
    """`langfuse-python 4.2.0` when the trace came from an SDK on the slow path, else None."""
    if not isinstance(metadata, Mapping):
        return None
    name, version = _key(metadata, "scope.name"), _key(metadata, "scope.version")
    if name != "langfuse-sdk" or not isinstance(version, str):
        return None
    language = _key(metadata, "resourceAttributes.telemetry.sdk.language")
    kind = _LANGUAGES.get(str(language).lower(), "python") if language else "python"
    try:
        slow = Version(version) < _DIRECT_SINCE[kind]
    except InvalidVersion:
        return None
    return f"langfuse-{kind} {version}" if slow else None
