"""One pass of the daemon: observations in a time window -> scores in the outbox.

The pass is `observer.pipeline.passes`; what happens to one trace, `observer.pipeline.traces`.
"""

from observer.pipeline.passes import (
    CLOCK_SKEW,
    FUTURE_READ,
    Marks,
    PassResult,
    Pipeline,
    Publication,
    Publisher,
    PublishKind,
    next_watermark,
)
from observer.pipeline.traces import Lookup

__all__ = [
    "CLOCK_SKEW",
    "FUTURE_READ",
    "Lookup",
    "Marks",
    "PassResult",
    "Pipeline",
    "Publication",
    "PublishKind",
    "Publisher",
    "next_watermark",
]
