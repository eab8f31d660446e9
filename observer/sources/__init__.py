"""Where observations come from: the Langfuse poller, or a replay file.

What a source is: `observer.sources.source`."""

from observer.sources.source import (
    ObservationSource,
    Stopped,
)

__all__ = ["ObservationSource", "Stopped"]
