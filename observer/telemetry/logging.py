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
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import structlog

# Info events logged once per trace: a JSON stream keeps them for search, a terminal shows
# one line per pass instead (they come back with level "debug").
PER_TRACE_EVENTS = frozenset({"trace_scored", "trace_rescored", "trace_skipped", "trace_judged"})
# Keys that may carry a user's question, the answer or the evidence.
CONTENT_KEYS = frozenset(
    {"question", "answer", "context", "input", "output", "text", "prompt", "completion"}
)
# Dependencies that narrate every request at info: their warnings are what matters.
CHATTY = ("httpx", "httpcore", "openai", "apscheduler", "urllib3", "slack_sdk")


class _CurrentStderr:
    """A file that writes to whatever `sys.stderr` is at the time, for structlog and the
    standard library's loggers alike: a line goes through a progress bar's console when one
    is drawn (rich puts them above the bar), and to the stream a test swapped in."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


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


@dataclass(frozen=True)
class Repeats:
    """How often an event that can repeat in a storm is logged: the first time, then at
    most once per `interval_s` for each value of `keys`, with `count_key` saying how many
    occurrences the line stands for (itself and the ones left out before it)."""

    interval_s: float
    keys: tuple[str, ...] = ()
    count_key: str = "occurrences"


# Events a failing disk or receiver can raise many times a second; counted in metrics.
REPEAT_LIMITS: Mapping[str, Repeats] = {
    "alert_notification_dropped": Repeats(10.0, ("notifier", "reason"), "dropped"),
    "outbox_unwritable": Repeats(60.0),
    "signal_row_not_shared": Repeats(60.0),
}


@dataclass(eq=False)
class RepeatLimiter:
    """A structlog processor: the one place a log storm is held back (`REPEAT_LIMITS`)."""

    limits: Mapping[str, Repeats] = field(default_factory=lambda: REPEAT_LIMITS)
    clock: Callable[[], float] = time.monotonic
    _seen: dict[tuple[str, ...], tuple[float, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(
        self, _logger: object, _method_name: str, event_dict: structlog.types.EventDict
    ) -> structlog.types.EventDict:
        event = str(event_dict.get("event"))
        limit = self.limits.get(event)
        if limit is None:
            return event_dict
        key = (event, *(str(event_dict.get(k)) for k in limit.keys))
        now = self.clock()
        with self._lock:
            last, left_out = self._seen.get(key, (None, 0))
            if last is not None and now - last < limit.interval_s:
                self._seen[key] = (last, left_out + 1)
                raise structlog.DropEvent
            self._seen[key] = (now, 0)
        event_dict[limit.count_key] = left_out + 1
        return event_dict


def configure_logging(
    fmt: Literal["auto", "json", "console"] = "auto",
    level: Literal["debug", "info", "warning", "error"] = "info",
    *,
    log_content: bool = False,
) -> None:
    """Logs go to stderr; stdout stays for command output."""
    number = logging.getLevelNamesMapping()[level.upper()]
    json_lines = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer()
    )
    terminal_filter: list[structlog.types.Processor] = (
        [drop_per_trace_events] if not json_lines and level != "debug" else []
    )
    content: list[structlog.types.Processor] = [] if log_content else [drop_content]
    shared: list[structlog.types.Processor] = [
        RepeatLimiter(),
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        *content,
    ]
    structlog.configure(
        processors=[*terminal_filter, *shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    # The standard library's loggers: same processors, same renderer, same stream.
    handler = logging.StreamHandler(_CurrentStderr())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(number)
    for name in CHATTY:
        logging.getLogger(name).setLevel(max(number, logging.WARNING))
    # The SDK logs its own retries and drops; observer reports those itself. apscheduler
    # warns each time a poll is skipped because the last pass still runs: expected, not news.
    logging.getLogger("langfuse").setLevel(logging.ERROR)
    logging.getLogger("apscheduler").setLevel(max(number, logging.ERROR))
