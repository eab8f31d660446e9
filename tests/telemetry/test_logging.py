"""Logs: one line per pass on a terminal, every per-trace event in JSON."""

from __future__ import annotations

import json

import pytest
import structlog

from observer.telemetry.logging import RepeatLimiter, configure_logging


def emit() -> None:
    log = structlog.get_logger("observer.pipeline")
    log.info("trace_scored", trace_id="t1", band="HIGH")
    log.info("poll_completed", scored=1)
    log.warning("trace_deferred", trace_id="t2", reason="outbox_full")


def test_terminal_shows_passes_not_traces(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("console", "info")
    emit()
    err = capsys.readouterr().err
    assert "poll_completed" in err and "trace_deferred" in err
    assert "trace_scored" not in err


def test_terminal_at_debug_shows_traces(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("console", "debug")
    emit()
    assert "trace_scored" in capsys.readouterr().err


def test_json_keeps_every_event(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", "info")
    emit()
    events = [json.loads(line)["event"] for line in capsys.readouterr().err.splitlines()]
    assert events == ["trace_scored", "poll_completed", "trace_deferred"]


def test_dependencies_log_through_the_same_json_stream(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    configure_logging("json", "info")
    logging.getLogger("openai._base_client").warning("Retrying request to /chat/completions")
    logging.getLogger("httpx").info("HTTP Request: GET http://x")  # chatty at info: not shown
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["event"] == "Retrying request to /chat/completions"
    assert event["logger"] == "openai._base_client" and event["level"] == "warning"


def test_question_and_answer_text_stay_out_unless_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = structlog.get_logger("observer.test")
    configure_logging("json", "info")
    log.info("trace_scored", question="what is my balance?", answer="It is 42 EUR [1].")
    configure_logging("json", "info", log_content=True)
    log.info("trace_scored", question="what is my balance?")
    hidden, shown = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    assert "balance" not in json.dumps(hidden) and "42 EUR" not in json.dumps(hidden)
    assert shown["question"] == "what is my balance?"


def test_repeat_limiter_lets_one_line_per_interval_and_key_through_with_its_count() -> None:
    now = [1000.0]
    limiter = RepeatLimiter(clock=lambda: now[0])

    def dropped(notifier: str = "hook", reason: str = "queue_full") -> structlog.types.EventDict:
        line = {"event": "alert_notification_dropped", "notifier": notifier, "reason": reason}
        return limiter(None, "warning", line)

    assert dropped()["dropped"] == 1  # the first line goes through
    for _ in range(3):
        now[0] += 3.0  # within the 10 s of REPEAT_LIMITS
        with pytest.raises(structlog.DropEvent):
            dropped()
    assert dropped(reason="unknown_notifier")["dropped"] == 1  # each key on its own
    assert dropped(notifier="slack")["dropped"] == 1
    now[0] = 1010.0  # the interval since the first line is over
    assert dropped()["dropped"] == 4  # itself and the 3 left out
    now[0] += 9.9
    with pytest.raises(structlog.DropEvent):
        dropped()  # the interval starts again at the line let through
    assert limiter(None, "info", {"event": "poll_completed"}) == {"event": "poll_completed"}
