"""`observer score`'s work: RagRecord JSON lines in, signals out, a bad line skipped.

Kept apart from the composition root (`observer.app`) so the command loads only
the record parser, the signals and the output encoder."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from observer.config.sources import SIGNAL_SECTIONS, config_path, names_a_section
from observer.model import RagRecord, Signals
from observer.records import RecordError, parsed_lines
from observer.signals import SignalParams, compute
from observer.signals.output import signals_json
from observer.signals.summary import Summary


def signal_params_for(given: str | Path | None) -> SignalParams:
    """The parameters `observer score` runs with: its three sections of the config file
    and the environment (observer.config.signals), or, when neither a file nor a
    variable sets anything, the defaults, without building a settings model."""
    if config_path(given) is None and not names_a_section(os.environ, SIGNAL_SECTIONS):
        return SignalParams()
    from observer.config.signals import load_signal_params

    return load_signal_params(given)


def scored_lines(
    lines: Iterable[bytes],
    params: SignalParams,
    bad_line: Callable[[int, RecordError], None],
) -> Iterator[tuple[int, RagRecord, Signals]]:
    """Each record of JSON lines with its number and signals. A line that is not a
    record, or one whose signals could not be computed, goes to `bad_line` and is skipped:
    a strange record never stops the stream (`observer score` and `observer judge`)."""
    for number, record in parsed_lines(lines, bad_line):
        try:
            signals = compute(record, params)
        except Exception as error:
            bad_line(
                number,
                RecordError(f"internal error while scoring: {type(error).__name__}: {error}"),
            )
            continue
        yield number, record, signals


def score_lines(
    lines: Iterable[bytes],
    params: SignalParams,
    emit: Callable[[dict[str, Any]], None] | None,
    report_error: Callable[[int, RecordError], None],
    summary: Summary,
) -> None:
    """Score RagRecord JSON lines; a bad line is reported and skipped."""

    def bad_line(number: int, error: RecordError) -> None:
        summary.bad_lines += 1
        report_error(number, error)

    for _number, _record, signals in scored_lines(lines, params, bad_line):
        summary.add(signals)
        if emit is not None:
            emit(signals_json(signals))
