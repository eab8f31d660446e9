"""RagRecord JSON at the edge: validation with errors that name the field.

A file of Langfuse observations (what `observer demo` and `observer discover --file`
read) is not a file of records: `parsed_lines` recognises one by its first line and
raises NotRecords, which says which commands read it, instead of reporting every
line as a record without `trace_id`, `question`, `answer` and `sources`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pydantic import TypeAdapter, ValidationError

from observer.model import RagRecord

_ADAPTER: TypeAdapter[RagRecord] = TypeAdapter(RagRecord)


class RecordError(ValueError):
    """A line or object that is not a valid RagRecord; the message says why.

    `column` is the 1-based column of a JSON syntax error within the line, when
    the parser gave one.
    """

    def __init__(self, message: str, column: int | None = None) -> None:
        super().__init__(message)
        self.column = column


class NotRecords(ValueError):
    """The input holds Langfuse observations, not RagRecords; the message says which
    commands read observations (exit 2)."""


# The keys of a Langfuse observation (API v2) that a RagRecord never has.
_OBSERVATION_KEYS = frozenset({"traceId", "type", "startTime"})

# The JSON parser reports positions as "at line L column C" of the text it was given.
_POSITION = re.compile(r"\s*at line \d+ column (\d+)$")


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(error: ValidationError) -> RecordError:
    problems = []
    column: int | None = None
    for item in error.errors(include_url=False):
        where = _location(item["loc"])
        message = item["msg"]
        if item["type"] in ("json_invalid",):
            detail = str(item["ctx"].get("error", message))
            position = _POSITION.search(detail)
            if position is not None:
                column = int(position.group(1))
                detail = detail[: position.start()]
            problems.append(f"invalid JSON: {detail}")
        elif item["type"] in ("dataclass_type", "dict_type") and not where:
            problems.append("expected a JSON object (one RagRecord per line)")
        else:
            problems.append(f"{where}: {message}" if where else message)
    return RecordError("; ".join(problems), column)


def parse_record(line: str | bytes) -> RagRecord:
    """Parse one JSON line into a RagRecord, or raise RecordError."""
    try:
        return _ADAPTER.validate_json(line)
    except ValidationError as error:
        raise _describe(error) from None


def record_from_obj(obj: object) -> RagRecord:
    """Validate an already decoded JSON object into a RagRecord."""
    try:
        return _ADAPTER.validate_python(obj)
    except ValidationError as error:
        raise _describe(error) from None


def observation_line(line: str | bytes) -> dict[str, Any] | None:
    """The Langfuse observation a JSON line holds, or None: an observation itself
    (`traceId`, `type`, `startTime`), or the first of a list of them, of an API page's
    `data` or of a trace's `observations`."""
    try:
        obj: Any = json.loads(line)
    except ValueError:
        return None
    if isinstance(obj, dict):
        for key in ("data", "observations"):
            if isinstance(obj.get(key), list):
                obj = obj[key]
                break
    if isinstance(obj, list):
        obj = obj[0] if obj else None
    if isinstance(obj, dict) and obj.keys() >= _OBSERVATION_KEYS:
        return obj
    return None


def _not_records(number: int, observation: dict[str, Any], name: str | None) -> NotRecords:
    path = name if name and not name.startswith("<") and name != "-" else "FILE"
    where = f"{name}: " if name else ""
    return NotRecords(
        f"{where}line {number} is a Langfuse observation (traceId, type, startTime), "
        "not a RagRecord (trace_id, question, answer, sources).\n"
        "  What observer makes of a file of observations:\n"
        f"    observer discover --file {path}\n"
        f"    observer explain {observation['traceId']} --file {path}"
    )


def parsed_lines(
    lines: Iterable[bytes], bad_line: Callable[[int, RecordError], None]
) -> Iterator[tuple[int, RagRecord]]:
    """Each record of JSON lines with its line number; blank lines are passed over, a
    line that is not a record goes to `bad_line` with its number and is skipped.

    A first line that is a Langfuse observation raises NotRecords, naming the file
    when `lines` is one (it has a `name`); a later one is a bad line saying so."""
    first = True
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = parse_record(line)
        except RecordError as error:
            observation = observation_line(line)
            if observation is None:
                bad_line(number, error)
            elif first:
                raise _not_records(number, observation, getattr(lines, "name", None)) from None
            else:
                bad_line(number, RecordError("a Langfuse observation, not a RagRecord"))
            first = False
            continue
        first = False
        yield number, record
