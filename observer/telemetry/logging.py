"""structlog, configured once: JSON lines in production, readable on a terminal.

Events are snake_case past tense (`trace_scored`); answer and question text
are never logged.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


# Info events logged once per trace: a JSON stream keeps them for search, a terminal shows
# one line per pass instead (they come back with level "debug").
PER_TRACE_EVENTS = frozenset({"trace_scored", "trace_rescored", "trace_skipped", "trace_judged"})


def drop_per_trace_events(
    _logger: object, method_name: str, event_dict: structlog.types.EventDict
) -> structlog.types.EventDict:
    """A structlog processor for terminals: per-trace info events are dropped."""
    if method_name == "info" and event_dict.get("event") in PER_TRACE_EVENTS:
        raise structlog.DropEvent
    return event_dict


def configure_logging(
    fmt: Literal["auto", "json", "console"] = "auto",
    level: Literal["debug", "info", "warning", "error"] = "info",
) -> None:
    """Logs go to stderr; stdout stays for command output."""
    json_lines = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer()
    )
    terminal_filter: list[structlog.types.Processor] = (
        [drop_per_trace_events] if not json_lines and level != "debug" else []
    )
    structlog.configure(
        processors=[
            *terminal_filter,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # The SDK logs its own retries and drops; observer reports those itself.
    logging.getLogger("langfuse").setLevel(logging.ERROR)
