"""structlog, configured once: one stream, JSON lines in production, readable on a terminal.

The standard-library loggers of the dependencies (httpx, openai, apscheduler,
langfuse) go through the same processors and renderer, so a production log
is JSON lines only. Events are snake_case past tense (`trace_scored`);
question and answer text are dropped from every event unless `log_content`
is on.
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
# Keys that may carry a user's question, the answer or the evidence.
CONTENT_KEYS = frozenset(
    {"question", "answer", "context", "input", "output", "text", "prompt", "completion"}
)
# Dependencies that narrate every request at info: their warnings are what matters.
CHATTY = ("httpx", "httpcore", "openai", "apscheduler", "urllib3", "slack_sdk")


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a record is emitted (tests swap it)."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def drop_per_trace_events(
    _logger: object, method_name: str, event_dict: structlog.types.EventDict
) -> structlog.types.EventDict:
    """A structlog processor for terminals: per-trace info events are dropped."""
    if method_name == "info" and event_dict.get("event") in PER_TRACE_EVENTS:
        raise structlog.DropEvent
    return event_dict


def drop_content(
    _logger: object, _method_name: str, event_dict: structlog.types.EventDict
) -> structlog.types.EventDict:
    """No question, answer or evidence text in a log line (`log.log_content = false`)."""
    for key in CONTENT_KEYS.intersection(event_dict):
        event_dict[key] = "[not logged: log.log_content = false]"
    return event_dict


def configure_logging(
    fmt: Literal["auto", "json", "console"] = "auto",
    level: Literal["debug", "info", "warning", "error"] = "info",
    *,
    log_content: bool = False,
) -> None:
    """Logs go to stderr; stdout stays for command output."""
    json_lines = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer()
    )
    terminal_filter: list[structlog.types.Processor] = (
        [drop_per_trace_events] if not json_lines and level != "debug" else []
    )
    content: list[structlog.types.Processor] = [] if log_content else [drop_content]
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        *content,
    ]
    structlog.configure(
        processors=[*terminal_filter, *shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # The standard library's loggers: same processors, same renderer, same stream.
    handler = _CurrentStderr()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(_LEVELS[level])
    for name in CHATTY:
        logging.getLogger(name).setLevel(max(_LEVELS[level], logging.WARNING))
    # The SDK logs its own retries and drops; observer reports those itself. apscheduler
    # warns each time a poll is skipped because the last pass still runs: expected, not news.
    logging.getLogger("langfuse").setLevel(logging.ERROR)
    logging.getLogger("apscheduler").setLevel(max(_LEVELS[level], logging.ERROR))
