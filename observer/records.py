"""RagRecord JSON at the edge: validation with errors that name the field."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

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


def parsed_lines(
    lines: Iterable[bytes], bad_line: Callable[[int, RecordError], None]
) -> Iterator[tuple[int, RagRecord]]:
    """Each record of JSON lines with its line number; blank lines are passed over, a
    line that is not a record goes to `bad_line` with its number and is skipped."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = parse_record(line)
        except RecordError as error:
            bad_line(number, error)
            continue
        yield number, record
