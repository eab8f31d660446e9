"""Where scores go: Langfuse, a JSONL file; one bounded dispatcher in front.

What a sink is: `observer.sinks.sink`."""

from observer.sinks.sink import (
    ScoreSink,
    SendResult,
)

__all__ = ["ScoreSink", "SendResult"]
