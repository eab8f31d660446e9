"""JavaScript value semantics and OTLP/JSON values, as Langfuse's server reads them.

The server is TypeScript: JSON goes through ``JSON.parse`` / ``JSON.stringify`` and
attribute values through ``convertValueToPlainJavascript``
(``packages/shared/src/server/otel/OtelIngestionProcessor.ts``). These are the Python
equivalents the converter (``observer.otlp.spans``) needs for byte-identical results:
integral numbers without ``.0``, big integers kept as text, NaN and Infinity refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

_MAX_SAFE_INT = 2**53 - 1

OBSERVATION_TYPES = {
    "SPAN",
    "GENERATION",
    "EVENT",
    "EMBEDDING",
    "AGENT",
    "TOOL",
    "CHAIN",
    "RETRIEVER",
    "GUARDRAIL",
    "EVALUATOR",
}

LEVEL_ALIASES = {
    "DEBUG": "DEBUG",
    "TRACE": "DEBUG",
    "VERBOSE": "DEBUG",
    "DEFAULT": "DEFAULT",
    "INFO": "DEFAULT",
    "LOG": "DEFAULT",
    "NOTICE": "DEFAULT",
    "OK": "DEFAULT",
    "SUCCESS": "DEFAULT",
    "WARNING": "WARNING",
    "WARN": "WARNING",
    "ERROR": "ERROR",
    "FATAL": "ERROR",
    "CRITICAL": "ERROR",
}


# ---- JavaScript value semantics ------------------------------------------------------------


def truthy(value: Any) -> bool:
    """JavaScript truthiness (``""``, 0, false, null are falsy; ``[]`` and ``{}`` are not)."""
    if value is None or value is False:
        return False
    if isinstance(value, str):
        return value != ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    return True


def js_number(value: float) -> int | float:
    """A JS number as ``JSON.stringify`` would print it (``1.0`` is ``1``)."""
    if math.isfinite(value) and value.is_integer() and abs(value) <= _MAX_SAFE_INT:
        return int(value)
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return js_number(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def js_stringify(value: Any) -> str:
    """``JSON.stringify``: compact, non-ASCII as is, integral numbers without ``.0``."""
    return json.dumps(_jsonable(value), separators=(",", ":"), ensure_ascii=False)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


def _parse_int(text: str) -> int | str:
    number = int(text)
    return number if abs(number) <= _MAX_SAFE_INT else text  # parsePreservingPrecision


def _parse_float(text: str) -> int | float | str:
    number = float(text)
    if not math.isfinite(number):
        return text
    return js_number(number)


# What a JSON text starts with after JSON's whitespace (an object, array, string, number,
# true, false or null): any other text JSON.parse refuses, known without trying to parse
# it (most attribute values are plain words, and a parser's error is costly to build).
_JSON_START = frozenset('{["-0123456789tfn')
_JSON_WHITESPACE = " \t\n\r"


def _may_be_json(text: str) -> bool:
    return text.lstrip(_JSON_WHITESPACE)[:1] in _JSON_START


def js_parse(text: str) -> Any:
    """``JSON.parse`` (strict: no NaN/Infinity), big integers kept as their text."""
    if not _may_be_json(text):
        raise ValueError("not JSON")
    return json.loads(
        text, parse_constant=_reject_constant, parse_int=_parse_int, parse_float=_parse_float
    )


def parse_json_prioritised(text: str) -> Any:
    """``parseJsonPrioritised``: the decoded JSON, or the text when it does not parse."""
    if not _may_be_json(text):
        return text
    try:
        return js_parse(text)
    except ValueError:
        return text


def parse_if_string(value: Any) -> Any:
    if isinstance(value, str):
        return parse_json_prioritised(value)
    return value


def json_payload(payload: Any) -> Any:
    """``parseJsonPayload``: an object as is, a JSON string decoded, else None."""
    if payload is not None and isinstance(payload, dict | list):
        return payload
    if isinstance(payload, str) and _may_be_json(payload):
        try:
            return js_parse(payload)
        except ValueError:
            return None
    return None


# ---- OTLP/JSON values -----------------------------------------------------------------------


def _int_value(raw: Any) -> int | float | None:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        try:
            return js_number(float(raw)) if "." in raw or "e" in raw.lower() else int(raw)
        except ValueError:
            return None
    return None


def plain_value(value: Mapping[str, Any]) -> Any:
    """``convertValueToPlainJavascript`` of one OTLP/JSON AnyValue."""
    if "stringValue" in value:
        return value["stringValue"]
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, str):
            try:
                number = float(raw)
            except ValueError:
                return raw
            return js_number(number) if math.isfinite(number) else raw
        return js_number(float(raw)) if isinstance(raw, int | float) else raw
    if "boolValue" in value:
        return value["boolValue"]
    array = value.get("arrayValue")
    if isinstance(array, Mapping) and "values" in array:
        return [plain_value(v) for v in array["values"]]
    if "intValue" in value:
        parsed = _int_value(value["intValue"])
        if parsed is not None:
            return parsed
    return js_stringify(value)


def attributes_of(pairs: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs or ():
        out[pair["key"]] = plain_value(pair.get("value") or {})
    return out


def _iso_from_nanos(raw: Any) -> str | None:
    if raw is None or raw == "":
        return None
    try:
        nanos = int(raw)
    except (TypeError, ValueError):
        return None
    millis = nanos // 1_000_000
    moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis % 1000:03d}Z"


def span_times(span: Mapping[str, Any]) -> tuple[str, str]:
    start = _iso_from_nanos(span.get("startTimeUnixNano"))
    end = _iso_from_nanos(span.get("endTimeUnixNano"))
    fallback = "1970-01-01T00:00:00.000Z"  # the server uses its clock; never met here
    return start or end or fallback, end or start or fallback


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
