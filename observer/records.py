"""RagRecord JSON at the edge: validation with errors that name the field."""

from __future__ import annotations

from pydantic import TypeAdapter, ValidationError

from observer.model import RagRecord

_ADAPTER: TypeAdapter[RagRecord] = TypeAdapter(RagRecord)


class RecordError(ValueError):
    """A line or object that is not a valid RagRecord; the message says why."""


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False):
        where = _location(item["loc"])
        message = item["msg"]
        if item["type"] in ("json_invalid",):
            problems.append(f"invalid JSON: {item['ctx'].get('error', message)}")
        elif item["type"] in ("dataclass_type", "dict_type") and not where:
            problems.append("expected a JSON object (one RagRecord per line)")
        else:
            problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)


def parse_record(line: str | bytes) -> RagRecord:
    """Parse one JSON line into a RagRecord, or raise RecordError."""
    try:
        return _ADAPTER.validate_json(line)
    except ValidationError as error:
        raise RecordError(_describe(error)) from None


def record_from_obj(obj: object) -> RagRecord:
    """Validate an already decoded JSON object into a RagRecord."""
    try:
        return _ADAPTER.validate_python(obj)
    except ValidationError as error:
        raise RecordError(_describe(error)) from None
