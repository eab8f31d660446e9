"""OTLP spans -> observations as the Langfuse Observations API v2 returns them.

The OTLP receiver's converter (docs/daemon.md#the-event-path): a trace received here
gives the same observations, so the same record and score ids, as the same trace read
back from Langfuse by the poller. Pure, no network, stdlib only (the tests also turn
the captured traces of ``tests/instrumentations`` into their v2 rows with it). The input is
an OTLP/JSON ``ExportTraceServiceRequest`` body (``{"resourceSpans": [...]}``,
them merged; the output is a list of plain dicts with the API's camelCase keys, as the v2
route puts them on the wire for ``fields=core,basic,time,io,metadata,model,prompt,
trace_context`` (what observer requests, ``observer/sources/langfuse.py``).

It follows the path Langfuse SDK 5 traffic takes (it sends ``x-langfuse-ingestion-version:
4``, so the worker writes events directly: ``worker/src/queues/otelIngestionQueue.ts``
``checkHeaderBasedDirectWrite`` / ``resolveOtelWritePath`` -> ``processToEvent``). Every
rule here is one of the Langfuse server's, read in github:langfuse/langfuse at 62751446149b
(paths relative to the repository root; ``OIP`` is
``packages/shared/src/server/otel/OtelIngestionProcessor.ts``):

- Attribute values (``OIP`` ``convertValueToPlainJavascript``, ``convertOtelIntValue``):
  string, double (numeric strings coerced, non-finite kept as text), bool, array
  (recursively), int (decimal string -> number); anything else (``kvlistValue``,
  ``bytesValue``, an empty ``arrayValue``) is the JSON text of the AnyValue object itself.
- Ids (``OIP`` ``parseId``): hex strings pass through. Times (``OIP``
  ``convertNanoTimestampToISO``, ``resolveSpanTimestamps``): nanoseconds truncated to a
  millisecond ISO string; a missing edge takes the other one.
- One event per span (``OIP`` ``processToEvent``): ``name`` from ``extractName``
  (``gen_ai.tool.name``, ``genkit:name``, ``logfire.msg``, ``ai.toolCall.name``,
  ``ai.telemetry.functionId:ai.operationId``, else the span name); ``environment`` from
  ``extractEnvironment`` (``langfuse.environment``, ``deployment.environment.name``,
  ``deployment.environment``: span attributes, then resource attributes; default
  ``default``); ``version`` (``langfuse.version`` or resource ``service.version``);
  ``release``; ``level`` (``parseObservationLevel`` of ``langfuse.observation.level``, else
  ERROR for status code 2, else DEFAULT); ``statusMessage``; ``userId`` / ``sessionId``
  (``extractUserId``, ``extractSessionId``); ``tags`` (``extractTags``); ``traceName``
  (``langfuse.trace.name``); ``isAppRoot`` (``extractIsAppRoot``,
  ``langfuse.internal.is_app_root``); ``completionStartTime``
  (``extractCompletionStartTime``).
- Type (``packages/shared/src/server/otel/ObservationTypeMapper.ts``
  ``ObservationTypeMapperRegistry``), first mapper that maps, by priority: Python SDK <= 3.3
  override, ``langfuse.observation.type``, OpenInference ``openinference.span.kind``, GenAI
  ``gen_ai.operation.name``, Genkit ``genkit:metadata:subtype``, Vercel AI SDK operations
  (generation-like with model info, then tool calls), GenAI tool attributes
  (``gen_ai.tool.name`` / ``gen_ai.tool.call.id``: pydantic-ai tools), Flue, LiveKit span
  names, model-based fallback (``langfuse.observation.model.name``,
  ``gen_ai.request.model``, ``gen_ai.response.model``, ``llm.model_name``, ``model``),
  else SPAN.
- Input and output (``OIP`` ``extractInputAndOutput``, observation domain), first source
  that has one, in the server's order: ``langfuse.observation.input/output``; Genkit; the
  Vercel AI SDK; Flue; the GenAI ``gen_ai.client.inference.operation.details`` event; the
  GenAI message events (``gen_ai.{system,user,assistant,tool}.message``,
  ``gen_ai.choice``); the legacy Semantic Kernel events; Vertex ADK; Logfire ``prompt`` /
  ``all_messages_events``; LiveKit; Logfire ``events``; MLflow; TraceLoop entity;
  ``input.value`` / ``output.value`` (OpenInference); ``input`` / ``output``; pydantic-ai's
  ``pydantic_ai.all_messages`` / ``final_result`` (scope ``pydantic-ai``, system
  instructions prepended: ``prependSystemInstructions``); ``tool_arguments`` /
  ``tool_response``; ``gen_ai.prompt.*`` / ``gen_ai.completion.*`` and
  ``llm.input_messages.*`` / ``llm.output_messages.*`` rebuilt into nested lists
  (``convertKeyPathToNestedObject``); ``gen_ai.input.messages`` / ``gen_ai.output.messages``
  and ``gen_ai.tool.call.arguments`` / ``.result``
  (``extractOpenTelemetryGenAiInputAndOutput``). The keys these come from are removed from
  the attributes kept in metadata, and every kept non-string value is JSON text.
- Metadata (``OIP`` ``processToEvent``, ``extractMetadata``, ``parseMetadataAttribute``,
  ``extractPrefixedMetadataAttributes``): ``{attributes (the filtered span attributes, only
  when the scope is not ``langfuse-sdk*``), resourceAttributes, scope: {name, version,
  attributes}, ...observation metadata, ...trace metadata}``; the metadata of a domain is the
  JSON object of ``langfuse.<domain>.metadata`` (or ``langfuse.metadata``) merged with every
  ``langfuse.<domain>.metadata.<key>``, ``langfuse.metadata.<key>`` and
  ``ai.telemetry.metadata.<key>`` attribute, the value as sent (SDK 5 JSON-encodes it).
- Tool definitions (``packages/shared/src/server/ingestion/extractToolsBackend.ts``
  ``normalizeToolsForObservation``, ``normalizeToolMetadataForObservation``,
  ``collectAndRemoveToolDefinitionsFromMetadata``, ``appendToolsToInput``): tool definitions
  found in ``metadata.tools`` or in the kept attributes (``ai.prompt.tools``,
  ``gen_ai.tool.definitions``, ``model_request_parameters.function_tools``,
  ``llm.tools.<i>.tool.json_schema``) are moved out of the metadata into the input (a list
  becomes ``{"messages": [...], "tools": [...]}``, an object gains ``tools``, a string
  becomes ``{"prompt": ..., "tools": [...]}``).
- The stored row (``worker/src/services/IngestionService/index.ts`` ``createEventRecord``,
  ``stringify``; ``packages/shared/src/server/otel/utils.ts`` ``flattenJsonToPathArrays``):
  input and output are text (an object is its JSON); metadata is flattened into dotted
  paths, nested objects recursively, every leaf a string (non-strings as JSON text, arrays
  included).
- The v2 read (``packages/shared/src/server/repositories/events.ts``
  ``getObservationsV2FromEventsTableForPublicApi``, ``enrichObservationsWithModelData``;
  ``packages/shared/src/server/repositories/observations_converters.ts``
  ``convertObservationPartial``, ``convertEventsObservation``;
  ``packages/shared/src/server/utils/rendering.ts`` ``applyInputOutputRendering``;
  ``packages/shared/src/server/utils/metadata_conversion.ts``
  ``parseMetadataCHRecordToDomain``; ``packages/shared/src/utils/json.ts``
  ``parseJsonPrioritised``; ``packages/shared/src/eventsTable.ts``
  ``eventsTableIsRootObservationSqlForAlias``, ``eventsTableTraceNameSqlForAlias``;
  ``packages/shared/src/server/queries/clickhouse-sql/event-query-builder.ts``
  ``EVENTS_FIELDS``; ``web/src/pages/api/public/v2/observations/index.ts``): ``model`` is the
  provided model name (``extractModelName``), ``promptName`` / ``promptVersion`` a
  generation's (``canLinkPrompt``); input and
  output come back as the raw stored text (the v2 API never JSON-parses them; an empty one
  is null); every flattened metadata value comes back JSON-decoded when it parses (so the
  SDK's ``"\\"faq\\""`` reads ``"faq"`` and ``"0.82"`` reads ``0.82``), else as text; for a
  repeated path the first one written wins (``metadataArraysToRecord``, "matching the
  ClickHouse ``mapFromArrays(arrayReverse(...))`` convention"); keys keep their written order;
  ``isRootObservation`` is ``parent_span_id = '' OR is_app_root``; ``traceName`` is the
  trace name, else the root's own name; an empty ``parentObservationId`` is null; ``latency``
  and ``timeToFirstToken`` are seconds; ``modelId`` and the prices are null without the
  ``model`` field group. Rows are listed ``startTime`` descending (the server breaks ties by
  ``xxHash32(trace_id)``; here by trace id, then id).

Not modelled: media upload (``processOtelEventMedia``), usage and cost enrichment, prompt
linking (none is in the field groups observer reads), field overflow of very large values.
``createdAt`` / ``updatedAt`` are ingestion times on the service; here they are the span's
end time, so a conversion is deterministic.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from observer.otlp.inout import extract_io, filtered_attributes
from observer.otlp.types import observation_type
from observer.otlp.values import (
    LEVEL_ALIASES,
    attributes_of,
    js_number,
    js_parse,
    js_stringify,
    parse_if_string,
    parse_iso,
    parse_json_prioritised,
    span_times,
    truthy,
)

# ---- metadata -------------------------------------------------------------------------------


def _domain_metadata(attributes: Mapping[str, Any], domain: str) -> dict[str, Any]:
    """``extractMetadata`` for the ``observation`` or ``trace`` domain."""
    prefix = f"langfuse.{domain}.metadata"
    primary = attributes.get(prefix)
    top_value = primary if truthy(primary) else attributes.get("langfuse.metadata")
    top: dict[str, Any] = {}
    if isinstance(top_value, str):
        try:
            parsed = js_parse(top_value)
            if isinstance(parsed, dict):
                top = parsed
            elif isinstance(parsed, list):
                top = {str(i): v for i, v in enumerate(parsed)}  # an array is an object in JS
        except ValueError:
            top = {}
    elif isinstance(top_value, dict):
        top = dict(top_value)
    excluded = {
        "ai.telemetry.metadata.userId",
        "ai.telemetry.metadata.sessionId",
        "ai.telemetry.metadata.tags",
        "ai.telemetry.metadata.langfusePrompt",
    }
    prefixed: dict[str, Any] = {}
    for key, value in attributes.items():
        for each in (prefix, "langfuse.metadata", "ai.telemetry.metadata"):
            if not key.startswith(f"{each}.") or key in excluded:
                continue
            metadata_key = key[len(each) + 1 :]
            if metadata_key:
                prefixed[metadata_key] = value
    return {**top, **prefixed}


def _tool_definition_name(tool: Any) -> str | None:
    if isinstance(tool, str):
        try:
            tool = js_parse(tool)
        except ValueError:
            return None
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    data: Any = function if function is not None else tool  # `t.function ?? t`
    name = data.get("name") if isinstance(data, dict) else None
    return name if isinstance(name, str) and truthy(name) else None


def _tool_array(
    tools: Any, require_every_item: bool, allow_provider_without_name: bool
) -> list[Any] | None:
    parsed = parse_if_string(tools)
    if not isinstance(parsed, list):
        return None
    items = [parse_if_string(t) for t in parsed]
    if not items:
        return []

    def tool_like(tool: Any) -> bool:
        if not isinstance(tool, dict):
            return False
        if _tool_definition_name(tool):
            return True
        return allow_provider_without_name and isinstance(tool.get("type"), str)

    liked = [t for t in items if tool_like(t)]
    if require_every_item and len(liked) != len(items):
        return None
    return liked or None


def _dedupe_tools(tools: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for tool in tools:
        name = _tool_definition_name(tool)
        if name is not None:
            if name in seen:
                continue
            seen.add(name)
        out.append(tool)
    return out


def _normalize_tools(value_in: Any, metadata: dict[str, Any]) -> tuple[Any, dict[str, Any]]:  # noqa: C901 - a port of Langfuse's, branch for branch
    """``normalizeToolMetadataForObservation``: tool definitions move into the input."""
    tools: list[Any] = []
    cleaned = dict(metadata)
    metadata_tools = _tool_array(metadata.get("tools"), True, False)
    if metadata_tools:
        tools += metadata_tools
        del cleaned["tools"]
    attributes = metadata.get("attributes")
    if isinstance(attributes, dict):
        kept = dict(attributes)
        for key, provider in (("ai.prompt.tools", True), ("gen_ai.tool.definitions", False)):
            found = _tool_array(attributes.get(key), True, provider)
            if found is not None:
                tools += found
                del kept[key]
        parameters = parse_if_string(attributes.get("model_request_parameters"))
        if isinstance(parameters, dict):
            moved = _tool_array(parameters.get("function_tools"), True, False)
            if moved is not None:
                tools += moved
            rest = {
                k: v
                for k, v in parameters.items()
                if not (moved is not None and k == "function_tools")
            }
            if rest:
                kept["model_request_parameters"] = (
                    js_stringify(rest)
                    if isinstance(attributes.get("model_request_parameters"), str)
                    else rest
                )
            else:
                kept.pop("model_request_parameters", None)
        indexed = sorted(
            (
                (int(m.group(1)), key)
                for key in attributes
                if (m := re.fullmatch(r"llm\.tools\.(\d+)\.tool\.json_schema", key))
            ),
        )
        for _, key in indexed:
            tool = parse_if_string(attributes[key])
            if isinstance(tool, dict) and _tool_definition_name(tool):
                tools.append(tool)
                del kept[key]
        if kept:
            cleaned["attributes"] = kept
        else:
            cleaned.pop("attributes", None)
    tools = _dedupe_tools(tools)
    if not tools:
        return value_in, metadata

    def merge(value: Any) -> tuple[Any, bool]:
        if isinstance(value, list):
            return {"messages": value, "tools": tools}, True
        if isinstance(value, dict):
            if value.get("tools") is not None:
                existing = _tool_array(value["tools"], False, True)
                if not existing:
                    return value_in, False
                return {**value, "tools": _dedupe_tools(existing + tools)}, True
            return {**value, "tools": tools}, True
        if value is None:
            return {"tools": tools}, True
        if isinstance(value, str):
            return {"prompt": value, "tools": tools}, True
        return value_in, False

    if isinstance(value_in, str):
        try:
            merged, mapped = merge(js_parse(value_in))
            if not mapped:
                merged = value_in
        except ValueError:
            merged, mapped = {"prompt": value_in, "tools": tools}, True
    else:
        merged, mapped = merge(value_in)
    if not mapped:
        return value_in, metadata
    return merged, cleaned


def _flatten(obj: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """``flattenJsonToPathArrays``: dotted paths, string leaves (others as JSON text)."""
    out: list[tuple[str, str]] = []
    for key, value in obj.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.extend(_flatten(value, path))
        elif value is None:
            out.append((path, ""))  # createEventRecord: `v ?? ""`
        elif isinstance(value, str):
            out.append((path, value))
        else:
            out.append((path, js_stringify(value)))
    return out


def _read_metadata(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """The v2 read: the first write of a path wins, each value JSON-decoded when it parses."""
    stored: dict[str, str] = {}
    for name, value in pairs:
        stored.setdefault(name, value)  # metadataArraysToRecord: the first occurrence wins
    return {name: parse_json_prioritised(value) for name, value in stored.items()}


@dataclass(frozen=True, slots=True)
class Origin:
    """What every span of one resource and instrumentation scope shares, converted once
    for them all rather than once a span: the resource's attributes, the scope's, and the
    metadata paths both give (`resourceAttributes.*`, `scope.*`), as the v2 read returns
    them."""

    resource_attributes: dict[str, Any]
    scope: Mapping[str, Any]
    scope_name: str
    scope_metadata: dict[str, Any]
    read: dict[str, Any]


def origin(resource_attributes: dict[str, Any], scope: Mapping[str, Any]) -> Origin:
    scope_object = {k: v for k, v in scope.items() if k != "attributes" and _proto_present(v)}
    scope_metadata = {**scope_object, "attributes": attributes_of(scope.get("attributes"))}
    shared = {"resourceAttributes": resource_attributes, "scope": scope_metadata}
    read = _read_metadata(_flatten(shared))
    return Origin(resource_attributes, scope, str(scope.get("name") or ""), scope_metadata, read)


_SHARED_KEYS = frozenset({"attributes", "resourceAttributes", "scope"})


def _span_metadata(
    attributes: Mapping[str, Any], where: Origin, value_in: Any
) -> tuple[Any, dict[str, Any]]:
    """(the input, tool definitions moved in; the metadata as the v2 read returns it):
    ``{attributes, resourceAttributes, scope, ...observation metadata, ...trace
    metadata}`` stored flat and read back, the origin's part taken as read once."""
    own: dict[str, Any] = (
        {} if where.scope_name.startswith("langfuse-sdk")
        else {"attributes": filtered_attributes(attributes)}
    )  # fmt: skip
    domains = {
        **_domain_metadata(attributes, "observation"),
        **_domain_metadata(attributes, "trace"),
    }
    if _SHARED_KEYS.intersection(domains):  # a metadata key in place of a shared one
        metadata = {
            **own,
            "resourceAttributes": where.resource_attributes,
            "scope": where.scope_metadata,
            **domains,
        }
        value_in, metadata = _normalize_tools(value_in, metadata)
        return value_in, _read_metadata(_flatten(metadata))
    value_in, rest = _normalize_tools(value_in, {**own, **domains})
    head = {"attributes": rest.pop("attributes")} if "attributes" in rest else {}
    read = _read_metadata(_flatten(head))
    for path, value in where.read.items():  # after the attributes, before the rest
        if path not in read:
            read[path] = copy.deepcopy(value) if isinstance(value, dict | list) else value
    for path, value in _read_metadata(_flatten(rest)).items():
        read.setdefault(path, value)
    return value_in, read


def _stringify_io(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else js_stringify(value)
    return text or None  # applyInputOutputRendering: an empty one is null


# ---- fields ---------------------------------------------------------------------------------


def _name(span_name: str, attributes: Mapping[str, Any]) -> str:
    """``extractName``."""
    tool_name = attributes.get("gen_ai.tool.name")
    if truthy(tool_name):
        return tool_name if isinstance(tool_name, str) else js_stringify(tool_name)
    if "genkit:name" in attributes:
        return str(attributes["genkit:name"])
    if truthy(attributes.get("logfire.msg")):
        message = attributes["logfire.msg"]
        return message if isinstance(message, str) else js_stringify(message)
    if "ai.toolCall.name" in attributes:
        return str(attributes["ai.toolCall.name"])
    if "ai.operationId" in attributes:
        function_id = attributes.get("ai.telemetry.functionId")
        prefix = f"{function_id}:" if truthy(function_id) else ""
        return prefix + str(attributes["ai.operationId"])
    return span_name


def _environment(attributes: Mapping[str, Any], resource: Mapping[str, Any]) -> str:
    """``extractEnvironment`` (the OpenRouter judge case is not met here)."""
    for key in ("langfuse.environment", "deployment.environment.name", "deployment.environment"):
        if truthy(attributes.get(key)):
            return str(attributes[key])
        if truthy(resource.get(key)):
            return str(resource[key])
    return "default"


def _first_id(attributes: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        if truthy(attributes.get(key)):
            value = attributes[key]
            return value if isinstance(value, str) else js_stringify(value)
    return None


def _tags(attributes: Mapping[str, Any]) -> list[str]:
    """``extractTags``."""
    value = None
    for key in (
        "langfuse.trace.tags",
        "langfuse.tags",
        "langfuse.observation.metadata.langfuse_tags",
        "langfuse.trace.metadata.langfuse_tags",
        "ai.telemetry.metadata.tags",
        "tag.tags",
    ):
        if truthy(attributes.get(key)):
            value = attributes[key]
            break
    if value is None:
        return []
    if isinstance(value, list):
        return [v if isinstance(v, str) else js_stringify(v) for v in value]
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            parsed = js_parse(value)
            if isinstance(parsed, list):
                return [v if isinstance(v, str) else js_stringify(v) for v in parsed]
        except ValueError:
            pass
    if isinstance(value, str) and "," in value:
        return [t.strip() for t in value.split(",")]
    if isinstance(value, str):
        return [value]
    return []


def _completion_start(attributes: Mapping[str, Any], start: str) -> str | None:
    value = attributes.get("langfuse.observation.completion_start_time")
    for candidate in (value, parse_if_string(value) if isinstance(value, str) else None):
        if isinstance(candidate, str):
            try:
                parse_iso(candidate)
                return candidate
            except ValueError:
                pass
    chunk = attributes.get("ai.response.msToFirstChunk", attributes.get("ai.stream.msToFirstChunk"))
    if truthy(chunk):
        try:
            moment = parse_iso(start).timestamp() * 1000 + math.ceil(float(chunk))
            millis = int(moment)
            when = datetime.fromtimestamp(millis / 1000, tz=UTC)
            return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis % 1000:03d}Z"
        except (TypeError, ValueError):
            return None
    return None


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return js_number((parse_iso(end) - parse_iso(start)).total_seconds())


_MODEL_KEYS = (
    "langfuse.observation.model.name",
    "gen_ai.response.model",
    "ai.model.id",
    "gen_ai.request.model",
    "llm.response.model",
    "llm.model_name",
    "model",
)


def _model_name(attributes: Mapping[str, Any]) -> str | None:
    """``extractModelName`` (none on the Vercel AI SDK's agent spans: ``isAiSdkAgentOperation``),
    read back as the v2 ``model`` field (``provided_model_name``)."""
    if attributes.get("gen_ai.operation.name") in ("invoke_agent", "agent_step"):
        return None
    keys: tuple[str, ...] = _MODEL_KEYS
    if attributes.get("genkit:metadata:subtype") == "model":
        keys = (*keys, "genkit:name")
    for key in keys:
        value = attributes.get(key)
        if truthy(value):
            return value if isinstance(value, str) else js_stringify(value)
    return None


def _prompt(attributes: Mapping[str, Any], kind: str, part: str) -> Any:
    """``promptName`` / ``promptVersion`` of ``processToEvent``: a GENERATION's only
    (``canLinkPrompt``), from the SDK's attribute, ``langfuse.prompt.<part>``, or the Vercel
    AI SDK's ``ai.telemetry.metadata.langfusePrompt`` JSON."""
    if kind != "GENERATION":
        return None
    for key in (f"langfuse.observation.prompt.{part}", f"langfuse.prompt.{part}"):
        if attributes.get(key) is not None:
            return attributes[key]
    carried = attributes.get("ai.telemetry.metadata.langfusePrompt")
    if truthy(carried) and isinstance(carried, str):
        try:
            parsed = js_parse(carried)
        except ValueError:
            return None
        if isinstance(parsed, dict):
            return parsed.get(part)
    return None


def _prompt_version(value: Any) -> int | None:
    """The stored ``prompt_version`` is a number column: an integral value, else none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def span_observation(
    span: Mapping[str, Any], where: Origin, project_id: str | None
) -> dict[str, Any]:
    """One OTLP/JSON span of `where`'s resource and scope as a v2 observation."""
    resource_attributes, scope = where.resource_attributes, where.scope
    attributes = attributes_of(span.get("attributes"))
    trace_id = str(span.get("traceId") or "")
    span_id = str(span.get("spanId") or "")
    parent = span.get("parentSpanId") or None
    start, end = span_times(span)
    value_in, value_out = extract_io(span.get("events") or [], attributes, where.scope_name)
    value_in, metadata = _span_metadata(attributes, where, value_in)

    is_app_root = attributes.get("langfuse.internal.is_app_root") in (True, "true")
    status = span.get("status") or {}
    level = None
    if isinstance(attributes.get("langfuse.observation.level"), str):
        level = LEVEL_ALIASES.get(attributes["langfuse.observation.level"].strip().upper())
    if level is None:
        level = "ERROR" if status.get("code") in (2, "STATUS_CODE_ERROR") else "DEFAULT"
    status_message = attributes.get("langfuse.observation.status_message")
    if status_message is None:
        status_message = status.get("message") or None
    version = attributes.get("langfuse.version")
    if version is None:
        version = resource_attributes.get("service.version")
    release = attributes.get("langfuse.release")
    if release is None:
        release = resource_attributes.get("langfuse.release")
    name = _name(str(span.get("name") or ""), attributes)
    kind = observation_type(attributes, resource_attributes, scope, str(span.get("name") or ""))
    is_root = not parent or is_app_root
    trace_name = attributes.get("langfuse.trace.name")
    if not truthy(trace_name):
        trace_name = name if is_root and name else None
    completion_start = _completion_start(attributes, start)
    return {
        "id": span_id,
        "traceId": trace_id,
        "startTime": start,
        "endTime": end,
        "projectId": project_id,
        "parentObservationId": parent,
        "type": kind,
        "name": name,
        "level": level,
        "statusMessage": status_message,
        "version": version,
        "environment": _environment(attributes, resource_attributes),
        "bookmarked": False,
        "public": attributes.get("langfuse.trace.public", attributes.get("langfuse.public"))
        in (True, "true"),
        "userId": _first_id(
            attributes,
            (
                "langfuse.user.id",
                "user.id",
                "langfuse.observation.metadata.langfuse_user_id",
                "langfuse.trace.metadata.langfuse_user_id",
                "ai.telemetry.metadata.userId",
            ),
        ),
        "sessionId": _first_id(
            attributes,
            (
                "langfuse.session.id",
                "session.id",
                "gen_ai.conversation.id",
                "langfuse.observation.metadata.langfuse_session_id",
                "langfuse.trace.metadata.langfuse_session_id",
                "ai.telemetry.metadata.sessionId",
            ),
        ),
        "isRootObservation": is_root,
        "completionStartTime": completion_start,
        "createdAt": end,
        "updatedAt": end,
        "input": _stringify_io(value_in),
        "output": _stringify_io(value_out),
        "metadata": metadata,
        "tags": _tags(attributes),
        "release": release,
        "traceName": trace_name,
        "latency": _seconds_between(start, end),
        "timeToFirstToken": _seconds_between(start, completion_start),
        "model": _model_name(attributes),
        "promptName": _prompt(attributes, kind, "name"),
        "promptVersion": _prompt_version(_prompt(attributes, kind, "version")),
        "modelId": None,
        "inputPrice": None,
        "outputPrice": None,
        "totalPrice": None,
    }


def _proto_present(value: Any) -> bool:
    """protobufjs ``toObject`` without ``defaults``: default-valued fields are absent."""
    return value not in (None, "", 0, [], {})


def convert(otlp: Mapping[str, Any], project_id: str | None) -> list[dict[str, Any]]:
    """Every span of an OTLP/JSON export body as a v2 observation, in the API's order."""
    observations: list[dict[str, Any]] = []
    for resource_span in otlp.get("resourceSpans") or []:
        resource_attributes = attributes_of((resource_span.get("resource") or {}).get("attributes"))
        for scope_span in resource_span.get("scopeSpans") or []:
            where = origin(resource_attributes, scope_span.get("scope") or {})
            for span in scope_span.get("spans") or []:
                observations.append(span_observation(span, where, project_id))
    observations.sort(key=lambda o: (o["startTime"], o["traceId"], o["id"]), reverse=True)
    return observations
