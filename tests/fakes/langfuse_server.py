"""A local fake of the parts of the Langfuse public API that observer uses.

Stdlib only: a ``ThreadingHTTPServer`` on ``127.0.0.1`` (port chosen by the OS on the
first ``start()``, reused on every later ``start()``) served from a daemon thread.

Routes:

- ``GET /api/public/health`` (no auth, no rate limit) -> ``{"status": "OK", "version": ...}``
- ``GET /api/public/projects`` (auth, no rate limit) -> ``{"data": [{"id", "name",
  "organization": {"id", "name"}, "metadata": {}}]}``, the keys' project
  (web/src/pages/api/public/projects/index.ts: "Do not apply rate limits"; servers before
  the organization was added send no ``organization``: ``project_organization = False``)
- ``GET /api/public/v2/observations`` -> ``{"data": [...], "meta": {"cursor": str}}``, ``meta``
  empty at the end
- ``POST /api/public/scores`` (JSON array, as SDK 5 sends it) -> 202, or 207 when told to
  reject some scores; before server 4.59 one object -> 200 ``{"id"}``
- ``DELETE /api/public/scores/{scoreId}`` -> 202 ``{"message": "Score deletion queued
  successfully"}``
- ``GET /api/public/v3/scores`` -> ``{"data": [ScoreV3...], "meta": {"limit", "cursor"}}``, the
  cursor absent on the final page (below, "Reading scores")
- ``GET|POST /api/public/score-configs``, ``GET|PATCH /api/public/score-configs/{id}``
- the unstable dashboards API: ``GET|POST /api/public/unstable/dashboards``,
  ``GET .../dashboards/{id}``, ``POST .../dashboards/{id}/placements``,
  ``GET|POST /api/public/unstable/dashboard-widgets``, ``GET .../dashboard-widgets/{id}``
- anything else -> 404

Every route under ``/api/public`` except health wants HTTP Basic auth with
``public_key:secret_key``; a wrong or missing header gets the real API's 401 bodies.
GET lists of score configs, dashboards and widgets page with ``page`` (from 1) and
``limit`` (default 50, at most 100) and answer ``{"data": [...], "meta": {"page", "limit",
"totalItems", "totalPages"}}``. Invalid bodies are 400 with a message: the stable API's
``{"message": "Invalid request data", "error": [issues]}``, the unstable API's envelope
``{"message", "code", "details"}`` (which it also uses for 401, 404, 405 and 409).
``dashboards_api = False`` makes the dashboards API answer like a server without it
(404 ``Route not found``, before auth).

The service as it is (docs/daemon.md, "How it reads Langfuse as Langfuse really is"). A
fake kinder than the service hides exactly the failures users meet, so each of these is
an attribute (and a ``Behaviour`` field), with the ``KIND`` and ``SERVICE_LIKE`` presets
switching them together; ``DEFAULT_BEHAVIOUR`` is what ``FakeLangfuse()`` does. Server
paths are in github:langfuse/langfuse (read at 62751446149b, v4.16.0+30).

- Order and cursor. Observations are listed ``start_time DESC, xxHash32(trace_id) DESC,
  span_id DESC`` and the cursor is the keyset of the last row, base64 JSON
  ``{lastStartTimeTo, lastTraceId, lastId}``; without more rows ``meta`` is ``{}``
  (packages/shared/src/server/repositories/events.ts ``orderByForObservationsQuery``,
  ``applyObservationsCursorFilter``; web/src/pages/api/public/v2/observations/index.ts;
  web/src/features/public-api/types/observations.ts ``encodeCursor``). Always on.
- Continuation pages (``empty_page_share``, ``cut_page_share``, seeded): a page may hold
  fewer observations than ``limit``, none too, while ``meta.cursor`` is present; only an
  absent cursor ends a listing (changelog 2026-11-03, "Continue observations queries that
  would otherwise time out", langfuse.com/changelog/2026-11-03-observations-api-continuation).
  The cursor stays a valid keyset: a cut page's is its last row, an empty page's lies just
  above the next row (or below every row, once none is left).
- Clock (``clock``, default the real UTC now): every answer's ``Date`` header (RFC 7231,
  as Node sends one) and everything below that is timed.
- Ingestion delay (``ingestion_delay_s`` + seeded ``ingestion_jitter_s``, or
  ``add_observations(..., delay_s=)``): observations show in listings only that long after
  they were added, on ``clock``. Data from ``langfuse-python`` < 4.7.0, ``langfuse-js`` <
  5.4.0 and OTel exporters without ``x-langfuse-ingestion-version: 4`` can take up to 15
  minutes, ``INGESTION_DELAY_BOUND_S`` (Observations API docs,
  langfuse.com/docs/api-and-data-platform/features/observations-api;
  langfuse.com/faq/all/how-long-until-traces-appear; worker/src/queues/otelIngestionQueue.ts
  ``checkHeaderBasedDirectWrite``). SDK 5 data lands within seconds.
- Several roots (``compute_roots``; ``add_observations(..., app_roots=)``):
  ``isRootObservation`` is ``parent_span_id = '' OR is_app_root``
  (packages/shared/src/eventsTable.ts ``eventsTableIsRootObservationSqlForAlias``; the SDK's
  mark is the span attribute ``langfuse.internal.is_app_root``,
  packages/shared/src/server/otel/attributes.ts), so a trace may have several: a second
  turn, an app root under a remote parent. Without ``compute_roots`` a value the caller
  wrote is kept.
- Client times: start times and score timestamps are stored as given, in 2099 or 1999.
- Server version (``server_version``, default 4.60.0): ``GET /api/public/health`` returns
  it (pages/api/public/health.ts); batch score posts need 4.59+: before that the route's
  body is ``PostScoresBodyV1``, one object (pages/api/public/scores/index.ts), and an array
  is zod's 400 ``invalid_type``.
- Rate limits (``rate_limits``: ``HOBBY``, ``CORE``, ``PRO``; None is self-hosted): one
  "public-api" bucket per organisation for every authenticated route here (reads, score
  posts, configs, dashboards), 30 / 100 / 1,000 a minute (langfuse.com/faq/all/api-limits);
  ``DELETE /api/public/scores/{id}`` counts in its own "score-delete" bucket, 50 / 200 /
  1,000 a day (web/src/features/public-api/server/RateLimitService.ts). A fixed window from
  its first request (rate-limiter-flexible), refused once no point is left after the request
  (``remainingPoints < 1``). The 429, and only it, carries ``Retry-After`` (integer
  seconds), ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset`` (a JS ``Date.toString()``),
  body ``{"message": "Rate limit exceeded", "code": "rate_limited", "details": {...}}``
  (``createHttpHeaderFromRateLimit``; unstable-public-api-error-contract.ts). After auth.
- Body size (``max_body_bytes``, 1 MiB on the service): Next.js parses an API route's body
  before the route runs, with a default ``sizeLimit`` of "1mb", and answers a larger one 413
  with the plain text ``Body exceeded 1mb limit`` (next.js
  packages/next/src/server/api-utils/node/parse-body.ts, api-utils/index.ts ``sendError``).
- Usage suspended (``usage_suspended``): score posts answer 403 ``{"message": "Ingestion
  suspended: Usage threshold exceeded. Please upgrade your plan.", "error":
  "ForbiddenError"}`` after auth, rate limit and body validation; reads and deletes go on
  (pages/api/public/scores/index.ts; the ingestion and OTel routes do the same).
- Score deletion: ``DELETE /api/public/scores/{scoreId}`` removes every stored score with
  that id, whatever its name and day, and answers 202 even for an unknown id
  (pages/api/public/scores/[scoreId].ts, ``deleteScores`` in
  packages/shared/src/server/repositories/scores.ts; the OpenAPI spec says 204, the route
  sends 202 and a message). The server queues it; the fake deletes at once.
- Score identity: a score is stored under (id, name, UTC day of its timestamp), the scores
  table's ``ORDER BY (project_id, toDate(timestamp), name, id)`` of a ReplacingMergeTree
  (packages/shared/clickhouse/migrations/.../0003_scores.up.sql): the same key replaces,
  the same id on another day is a second score. ``live_scores()``, ``scores_by_trace()``
  and ``score_key()`` show what a dashboard would count.

- Reading scores: ``GET /api/public/v3/scores`` as the v4.16 OpenAPI spec documents it
  (``scoresV3_getManyV3``; langfuse-openapi-v4.16.yml, schemas ``GetScoresV3Response``,
  ``ScoreV3``, ``ScoreSubjectV3``). Core fields always (id, projectId, name, value, dataType,
  source, timestamp, environment, createdAt, updatedAt); ``fields`` adds the groups
  ``details`` (comment, configId, metadata), ``subject`` (kind trace / observation / session /
  experiment, id, and traceId for an observation) and ``annotation`` (authorUserId,
  queueId); an unknown group is a 400. ``value`` is typed by ``dataType``: NUMERIC a number,
  BOOLEAN a boolean, CATEGORICAL, TEXT and CORRECTION a string. Filters are comma lists, OR
  within and AND across (id, name, source and dataType case-insensitive, environment,
  configId, queueId, authorUserId, traceId, sessionId, observationId, experimentId, value,
  valueMin, valueMax), with the spec's 400s: observationId without traceId; traceId,
  sessionId and experimentId together; value without one dataType of NUMERIC, BOOLEAN or
  CATEGORICAL; valueMin / valueMax without dataType NUMERIC alone. ``fromTimestamp`` is
  inclusive, ``toTimestamp`` exclusive. ``limit`` defaults to 50, at most 100 (more: 400).
  The cursor is base64url and absent on the final page. The spec says nothing of the order
  or of what the cursor holds: the fake lists newest timestamp first (then id, descending)
  and its cursor is the last row's keyset, base64url JSON ``{lastTimestamp, lastId}``. It
  counts in the "public-api" bucket like every read. Scores posted through
  ``POST /api/public/scores`` list with source ``API``; people's scores (annotation queues,
  the UI: source ``ANNOTATION``, with queueId and authorUserId) are added with
  ``add_annotation_score``.

- Compression (``gzip``, on in ``SERVICE_LIKE``): a JSON answer is gzip-encoded when the
  request accepts it, as ``next start`` does by default (next.config.js ``compress: true``,
  gzip; Langfuse's web container runs ``next start``).

Fault injection: ``fail_next`` (any status, optional ``Retry-After``), ``reject_next_scores``
(207 partial acceptance), ``latency_s`` (sleep before each answer) and ``stop()`` /
``start()`` (a real outage: the port is closed and open keep-alive connections are cut).

What stands between observer and Langfuse, and what a hostile path can do (issue 43):

- ``redirect(status, to)``: answer with ``status`` and ``Location: to + path?query``, as an
  ingress does in front of an ``http://`` address (ingress-nginx's ``ssl-redirect`` answers
  308, Traefik's ``redirectScheme`` 301 or 308; a load balancer 302), with an HTML body;
  ``count`` answers, or every one while ``count`` is None.
- ``skew_dates(seconds, count)``: the next answers' ``Date`` header off by ``seconds`` (a
  replica with a wrong clock behind the load balancer, a cache replaying old headers).
- ``fault_next(kind)``: one answer of a broken or hostile path: ``html`` (200 with a
  proxy's login page), ``huge_length`` (a ``Content-Length`` of 10 GB, then bytes until the
  client leaves), ``endless`` (no length, bytes until the client leaves), ``gzip_bomb``
  (``Content-Encoding: gzip`` whose body inflates to ``bomb_bytes``), ``trickle`` (a byte
  every 50 ms). Each stops at ``FAULT_CAP_BYTES`` or ``FAULT_CAP_S`` so a client without
  bounds fails the test instead of the machine; ``fault_log`` says how each ended.
"""

from __future__ import annotations

import base64
import binascii
import copy
import dataclasses
import email.utils
import functools
import gzip
import json
import math
import random
import re
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from .loopback import LoopbackHandler, LoopbackService

__all__ = [
    "CORE",
    "DEFAULT_BEHAVIOUR",
    "DEFAULT_FIELD_GROUPS",
    "FIELD_GROUPS",
    "HOBBY",
    "INGESTION_DELAY_BOUND_S",
    "KIND",
    "PRO",
    "SCORES_V3_MAX_LIMIT",
    "SERVICE_LIKE",
    "Behaviour",
    "FakeLangfuse",
    "RateLimits",
    "RequestRecord",
    "xxhash32",
]

HEALTH_PATH: Final = "/api/public/health"
PROJECTS_PATH: Final = "/api/public/projects"
OBSERVATIONS_PATH: Final = "/api/public/v2/observations"
SCORES_PATH: Final = "/api/public/scores"
SCORES_V3_PATH: Final = "/api/public/v3/scores"
SCORE_CONFIGS_PATH: Final = "/api/public/score-configs"
DASHBOARDS_PATH: Final = "/api/public/unstable/dashboards"
DASHBOARD_WIDGETS_PATH: Final = "/api/public/unstable/dashboard-widgets"
CURRENT_SERVER_VERSION: Final = "4.60.0"
BATCH_SCORES_SINCE: Final = (4, 59, 0)  # array bodies to POST /api/public/scores
MAX_BODY_BYTES: Final = 1024 * 1024  # Next.js API routes' default bodyParser sizeLimit "1mb"
INGESTION_DELAY_BOUND_S: Final = 15 * 60.0  # older SDKs and OTel without ingestion version 4
USAGE_SUSPENDED_MESSAGE: Final = (
    "Ingestion suspended: Usage threshold exceeded. Please upgrade your plan."
)

# Hostile paths stop here, whatever the client does (a client without bounds fails, the
# machine does not).
FAULT_CAP_BYTES: Final = 64 * 1024 * 1024
FAULT_CAP_S: Final = 5.0
FAULT_KINDS: Final = ("html", "huge_length", "endless", "gzip_bomb", "trickle")
PROXY_LOGIN_PAGE: Final = (
    b"<!DOCTYPE html><html><head><title>Sign in</title></head>"
    b"<body><form action='/oauth2/start'>Sign in to continue</form></body></html>"
)

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 1000
METADATA_TRUNCATE_CHARS: Final = 200
DEFAULT_PROJECT_ID: Final = "fake-project"
DEFAULT_ENVIRONMENT: Final = "default"

# Field groups of GET /api/public/v2/observations, in response key order, as documented
# in the SDK's docstring of ``observations.get_many`` (langfuse 5.0.4).
FIELD_GROUPS: Final[dict[str, tuple[str, ...]]] = {
    "core": (
        "id",
        "traceId",
        "startTime",
        "endTime",
        "projectId",
        "parentObservationId",
        "type",
    ),
    "basic": (
        "name",
        "level",
        "statusMessage",
        "version",
        "environment",
        "bookmarked",
        "public",
        "userId",
        "sessionId",
        "isRootObservation",
    ),
    "time": ("completionStartTime", "createdAt", "updatedAt"),
    "io": ("input", "output"),
    "metadata": ("metadata",),
    "model": ("model", "internalModelId", "modelParameters"),
    "usage": ("usageDetails", "costDetails", "totalCost", "usagePricingTierName"),
    "prompt": ("promptId", "promptName", "promptVersion"),
    "metrics": ("latency", "timeToFirstToken"),
    "trace_context": ("tags", "release", "traceName"),
}
DEFAULT_FIELD_GROUPS: Final = ("core", "basic")

# Real 401 bodies (Langfuse ApiAuthService).
_NO_AUTH_HEADER: Final = "No authorization header"
_INVALID_AUTH_HEADER: Final = (
    "Invalid authorization header. Confirm that you've configured the correct host."
)
_INVALID_CREDENTIALS: Final = (
    "Invalid credentials. Confirm that you've configured the correct host."
)

_SCORE_DATA_TYPES: Final = frozenset({"NUMERIC", "BOOLEAN", "CATEGORICAL", "TEXT", "CORRECTION"})
_ENVIRONMENT_RE: Final = re.compile(r"^(?!langfuse)[a-z0-9_-]{1,40}$")

# Scalar query parameters that are plain equality filters on the observation key of the
# same name.
_EQUALITY_PARAMS: Final = ("type", "traceId", "name", "userId", "sessionId", "level", "version")
_KNOWN_OBSERVATION_PARAMS: Final = frozenset(
    {
        "fields",
        "expandMetadata",
        "limit",
        "cursor",
        "parseIoAsJson",
        "parentObservationId",
        "isRootObservation",
        "environment",
        "fromStartTime",
        "toStartTime",
        "filter",
        *_EQUALITY_PARAMS,
    }
)

# Columns the fake understands in the structured ``filter`` parameter.
_FILTER_STRING_COLUMNS: Final = frozenset(
    {
        "id",
        "type",
        "name",
        "traceId",
        "environment",
        "level",
        "statusMessage",
        "version",
        "userId",
        "sessionId",
        "traceName",
        "parentObservationId",
    }
)
_FILTER_BOOLEAN_COLUMNS: Final = frozenset({"isRootObservation", "bookmarked", "public"})
_FILTER_ARRAY_COLUMNS: Final = {"tags": "tags", "traceTags": "tags"}
_FILTER_DATETIME_COLUMNS: Final = frozenset({"startTime", "endTime"})

JsonDict = dict[str, Any]
_Predicate = Callable[["_StoredObservation"], bool]


@dataclass(frozen=True)
class RequestRecord:
    """One request the fake received. ``status`` 0: cut off by stop(), never answered."""

    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    time: float
    headers: dict[str, str]


# The listing's order and keyset: (start_time, xxHash32(trace_id), span_id), all DESC.
_SortKey = tuple[int, int, str]


@dataclass(frozen=True)
class _StoredObservation:
    data: JsonDict
    start_us: int
    end_us: int | None

    @property
    def trace_id(self) -> str:
        trace_id = self.data.get("traceId")
        return trace_id if isinstance(trace_id, str) else ""

    @property
    def sort_key(self) -> _SortKey:
        return (self.start_us, xxhash32(self.trace_id), str(self.data["id"]))


@dataclass
class _FailRule:
    status: int
    remaining: int
    retry_after: float | None
    path_prefix: str
    method: str | None = None


@dataclass
class _Redirect:
    status: int
    to: str
    remaining: int | None  # None: every answer
    path_prefix: str
    method: str | None


@dataclass
class _Fault:
    kind: str
    remaining: int
    path_prefix: str


@dataclass(frozen=True)
class _Response:
    status: int
    body: Any
    headers: tuple[tuple[str, str], ...] = ()
    raw: bytes | None = None  # a plain body without a Content-Type (Next.js's own errors)
    fault: str | None = None  # a hostile path's answer (FAULT_KINDS), written by _write_fault


class _HttpError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        headers: tuple[tuple[str, str], ...] = (),
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body: JsonDict = {"message": message, **extra}
        self.headers = headers


@dataclass(frozen=True)
class RateLimits:
    """One organisation's Cloud rate limits (RateLimitService.ts, ``getPlanBasedRateLimitConfig``).

    ``general_per_minute`` is the "public-api" resource every authenticated route of the fake
    shares (observations, score posts, score configs, dashboards); ``score_deletes_per_day``
    is the separate "score-delete" resource of ``DELETE /api/public/scores/{id}``.
    """

    general_per_minute: int
    score_deletes_per_day: int


# Per the docs (langfuse.com/faq/all/api-limits). The server source currently grants Core the
# Pro general limit ("TEMPORARY: Expanded selected core plan rate limits to pro limits").
HOBBY: Final = RateLimits(general_per_minute=30, score_deletes_per_day=50)
CORE: Final = RateLimits(general_per_minute=100, score_deletes_per_day=200)
PRO: Final = RateLimits(general_per_minute=1000, score_deletes_per_day=1000)


@dataclass(frozen=True)
class Behaviour:
    """How many of the real service's inconvenient habits a FakeLangfuse shows.

    ``KIND`` turns them all off (full pages, no ingestion delay, roots as the caller wrote
    them, no body limit, no rate limit); ``SERVICE_LIKE`` turns on what every Cloud project
    meets (continuation pages, empty ones among them; a few seconds of ingestion delay;
    ``isRootObservation`` computed the server's way; the 1 MiB body limit; gzip answers).
    Rate limits stay
    off in both (self-hosted has none): pass ``rate_limits=HOBBY`` (or CORE, PRO) for Cloud.
    Every field is also a plain attribute of the fake, switchable at any time.
    """

    empty_page_share: float = 0.0
    cut_page_share: float = 0.0
    ingestion_delay_s: float = 0.0
    ingestion_jitter_s: float = 0.0
    compute_roots: bool = False
    max_body_bytes: int | None = None
    rate_limits: RateLimits | None = None
    server_version: str = CURRENT_SERVER_VERSION
    gzip: bool = False


KIND: Final = Behaviour()
SERVICE_LIKE: Final = Behaviour(
    empty_page_share=0.15,
    cut_page_share=0.35,
    ingestion_jitter_s=10.0,
    compute_roots=True,
    max_body_bytes=MAX_BODY_BYTES,
    gzip=True,
)
# What ``FakeLangfuse()`` does: the service as it is. ``FakeLangfuse.kind()`` for a test
# about something else that wants full pages and data visible at once.
DEFAULT_BEHAVIOUR: Final = SERVICE_LIKE


def _json_bytes(body: Any) -> bytes:
    """JSON as Node writes it: UTF-8, a lone surrogate escaped (``"\\ud800"``, as the
    well-formed ``JSON.stringify`` of ES2019 does), never raw."""
    try:
        return json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body).encode("ascii")


@functools.cache
def _gzip_bomb(inflated: int) -> bytes:
    """A gzip member of zeros that inflates to ``inflated`` bytes (about 1,000 to 1)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1024 * 1024)
    parts = [packer.compress(block) for _ in range(inflated // len(block))]
    parts.append(packer.flush())
    return b"".join(parts)


def _bad_request(message: str, **extra: Any) -> _HttpError:
    return _HttpError(400, message, **extra)


def _parse_time(value: str) -> datetime:
    """ISO 8601 -> aware datetime (naive input is taken as UTC)."""
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _to_us(value: datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _format_retry_after(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


_XXH32_PRIMES: Final = (2654435761, 2246822519, 3266489917, 668265263, 374761393)
_U32: Final = 0xFFFFFFFF


def _rotl32(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _U32


@functools.lru_cache(maxsize=65536)
def xxhash32(text: str, seed: int = 0) -> int:
    """ClickHouse's ``xxHash32(s)`` of a string (XXH32 of its UTF-8 bytes, seed 0)."""
    p1, p2, p3, p4, p5 = _XXH32_PRIMES
    data = text.encode("utf-8", "surrogatepass")  # a lone surrogate in an id hashes too
    size, i = len(data), 0
    if size >= 16:
        lanes = [(seed + p1 + p2) & _U32, (seed + p2) & _U32, seed & _U32, (seed - p1) & _U32]
        while i + 16 <= size:
            for lane in range(4):
                word = int.from_bytes(data[i : i + 4], "little")
                lanes[lane] = (_rotl32((lanes[lane] + word * p2) & _U32, 13) * p1) & _U32
                i += 4
        acc = (
            _rotl32(lanes[0], 1)
            + _rotl32(lanes[1], 7)
            + _rotl32(lanes[2], 12)
            + _rotl32(lanes[3], 18)
        ) & _U32
    else:
        acc = (seed + p5) & _U32
    acc = (acc + size) & _U32
    while i + 4 <= size:
        word = int.from_bytes(data[i : i + 4], "little")
        acc = (_rotl32((acc + word * p3) & _U32, 17) * p4) & _U32
        i += 4
    while i < size:
        acc = (_rotl32((acc + data[i] * p5) & _U32, 11) * p1) & _U32
        i += 1
    acc ^= acc >> 15
    acc = (acc * p2) & _U32
    acc ^= acc >> 13
    acc = (acc * p3) & _U32
    acc ^= acc >> 16
    return acc


@dataclass(frozen=True)
class _Cursor:
    """The server's cursor: the last position a page reached, in the listing's order."""

    start_us: int
    trace_id: str
    span_id: str

    @property
    def key(self) -> _SortKey:
        return (self.start_us, xxhash32(self.trace_id), self.span_id)

    @classmethod
    def at(cls, observation: _StoredObservation) -> _Cursor:
        return cls(observation.start_us, observation.trace_id, str(observation.data["id"]))

    @classmethod
    def just_above(cls, observation: _StoredObservation) -> _Cursor:
        """A position no observation holds, directly above ``observation``: it comes next.

        ``id + "\\x00"`` is the smallest string after ``id``, so nothing lies between.
        """
        return cls(observation.start_us, observation.trace_id, f"{observation.data['id']}\x00")

    def encode(self) -> str:
        """``encodeCursor`` of web/src/features/public-api/types/observations.ts: base64 JSON.

        The server writes ``lastStartTimeTo`` with millisecond precision, which is lossless
        there because ingestion floors start times to milliseconds; the fake stores what it
        is given, so it keeps microseconds.
        """
        moment = _EPOCH + timedelta(microseconds=self.start_us)
        payload = {
            "lastStartTimeTo": moment.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "lastTraceId": self.trace_id,
            "lastId": self.span_id,
        }
        return base64.b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode()

    @classmethod
    def decode(cls, cursor: str) -> _Cursor:
        try:
            padded = cursor + "=" * (-len(cursor) % 4)
            raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"))
            payload = json.loads(raw)
        except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
            raise _HttpError(400, "Invalid cursor format", error="InvalidRequestError") from exc
        keys = ("lastStartTimeTo", "lastTraceId", "lastId")
        if not isinstance(payload, dict) or not all(isinstance(payload.get(k), str) for k in keys):
            raise _bad_request("Invalid request data", error=[_issue("cursor", "Invalid cursor")])
        try:
            moment = _parse_time(payload["lastStartTimeTo"])
        except ValueError as exc:
            raise _bad_request(
                "Invalid request data", error=[_issue("cursor.lastStartTimeTo", "Invalid date")]
            ) from exc
        return cls(_to_us(moment), payload["lastTraceId"], payload["lastId"])


# A cursor below every observation: a continuation page past the last match.
_BOTTOM: Final = _Cursor(_to_us(datetime(1970, 1, 1, tzinfo=UTC)), "", "")


def _truncate_metadata(metadata: Any, expand: frozenset[str]) -> Any:
    if not isinstance(metadata, dict):
        return metadata
    out: JsonDict = {}
    for key, value in metadata.items():
        if key in expand:
            out[key] = value
        elif isinstance(value, str):
            out[key] = value[:METADATA_TRUNCATE_CHARS]
        else:
            text = json.dumps(value, ensure_ascii=False)
            out[key] = (
                text[:METADATA_TRUNCATE_CHARS] if len(text) > METADATA_TRUNCATE_CHARS else value
            )
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# --------------------------------------------------------------------------------------
# Structured ``filter`` parameter (a subset; anything else is a loud 400)
# --------------------------------------------------------------------------------------


def _compile_filter(raw: str) -> list[_Predicate]:
    try:
        conditions = json.loads(raw)
    except ValueError as exc:
        raise _bad_request("Invalid filter: not valid JSON") from exc
    if not isinstance(conditions, list):
        raise _bad_request("Invalid filter: expected a JSON array of conditions")
    return [_compile_condition(condition) for condition in conditions]


def _string_op(operator: Any, expected: str) -> Callable[[str], bool] | None:
    ops: dict[str, Callable[[str], bool]] = {
        "=": lambda actual: actual == expected,
        "contains": lambda actual: expected in actual,
        "does not contain": lambda actual: expected not in actual,
        "starts with": lambda actual: actual.startswith(expected),
        "ends with": lambda actual: actual.endswith(expected),
    }
    return ops.get(operator) if isinstance(operator, str) else None


def _compile_condition(condition: Any) -> _Predicate:  # noqa: C901 - a dispatch over the server's filter types
    if not isinstance(condition, dict):
        raise _bad_request("Invalid filter: each condition must be an object")
    ftype = condition.get("type")
    column = condition.get("column")
    operator = condition.get("operator")
    value = condition.get("value")
    unsupported = _bad_request(f"Fake Langfuse does not support filter condition {condition!r}")

    if ftype == "null" and isinstance(column, str) and operator in ("is null", "is not null"):
        want_null = operator == "is null"

        def is_null(obs: _StoredObservation) -> bool:
            return bool((obs.data.get(column) is None) == want_null)

        return is_null

    if ftype == "string" and column in _FILTER_STRING_COLUMNS and isinstance(value, str):
        str_op = _string_op(operator, value)
        if str_op is None:
            raise unsupported

        def string_match(obs: _StoredObservation) -> bool:
            actual = obs.data.get(column)
            return isinstance(actual, str) and str_op(actual)

        return string_match

    if (
        ftype in ("stringOptions", "categoryOptions")
        and column in _FILTER_STRING_COLUMNS
        and operator in ("any of", "none of")
        and isinstance(value, list)
    ):
        options = frozenset(str(v) for v in value)
        want_in = operator == "any of"

        def options_match(obs: _StoredObservation) -> bool:
            return bool((obs.data.get(column) in options) == want_in)

        return options_match

    if (
        ftype == "arrayOptions"
        and column in _FILTER_ARRAY_COLUMNS
        and operator in ("any of", "none of", "all of")
        and isinstance(value, list)
    ):
        wanted = frozenset(str(v) for v in value)
        key = _FILTER_ARRAY_COLUMNS[column]

        def array_match(obs: _StoredObservation) -> bool:
            raw_tags = obs.data.get(key)
            tags = frozenset(raw_tags) if isinstance(raw_tags, list) else frozenset()
            if operator == "any of":
                return bool(tags & wanted)
            if operator == "none of":
                return not tags & wanted
            return wanted <= tags

        return array_match

    if (
        ftype == "datetime"
        and column in _FILTER_DATETIME_COLUMNS
        and operator in (">", "<", ">=", "<=")
        and isinstance(value, str)
    ):
        try:
            bound = _to_us(_parse_time(value))
        except ValueError as exc:
            raise _bad_request(f"Invalid filter datetime {value!r}") from exc

        def datetime_match(obs: _StoredObservation) -> bool:
            actual = obs.start_us if column == "startTime" else obs.end_us
            if actual is None:
                return False
            if operator == ">":
                return actual > bound
            if operator == "<":
                return actual < bound
            if operator == ">=":
                return actual >= bound
            return actual <= bound

        return datetime_match

    if (
        ftype == "boolean"
        and column in _FILTER_BOOLEAN_COLUMNS
        and operator in ("=", "<>")
        and isinstance(value, bool)
    ):
        want_equal = operator == "="

        def boolean_match(obs: _StoredObservation) -> bool:
            return bool((obs.data.get(column) is value) == want_equal)

        return boolean_match

    if (
        ftype == "stringObject"
        and column == "metadata"
        and isinstance(condition.get("key"), str)
        and isinstance(value, str)
    ):
        meta_key: str = condition["key"]
        meta_op = _string_op(operator, value)
        if meta_op is None:
            raise unsupported

        def metadata_match(obs: _StoredObservation) -> bool:
            metadata = obs.data.get("metadata")
            actual = metadata.get(meta_key) if isinstance(metadata, dict) else None
            return isinstance(actual, str) and meta_op(actual)

        return metadata_match

    raise unsupported


# --------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------


class _Handler(LoopbackHandler):
    server_version = "FakeLangfuse"

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The ``Date`` header of every answer (RFC 7231), read from the fake's own clock."""
        if timestamp is None:
            service = self.server.service
            assert isinstance(service, FakeLangfuse)
            timestamp = service.clock().timestamp() + getattr(self, "date_offset_s", 0.0)
        return email.utils.formatdate(timestamp, usegmt=True)


@dataclass
class _Window:
    """One rate-limit window of rate-limiter-flexible: fixed, from its first request."""

    ends: datetime
    consumed: int = 0


DelaySpec = float | Callable[[dict[str, Any]], float]


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", version.split("-", 1)[0])
    return tuple(int(p) for p in parts[:3])


def _js_date_string(moment: datetime) -> str:
    """``new Date(...).toString()`` on a server whose time zone is UTC."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%a %b %d %Y %H:%M:%S GMT+0000 (Coordinated Universal Time)")


def _iso_ms(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _size_label(limit: int) -> str:
    """A byte count as Next.js's ``sizeLimit`` string: 1048576 -> "1mb"."""
    for unit, size in (("mb", 1024 * 1024), ("kb", 1024)):
        if limit % size == 0:
            return f"{limit // size}{unit}"
    return f"{limit}b"


_GENERAL_BUCKET: Final = "public-api"
_SCORE_DELETE_BUCKET: Final = "score-delete"


# --------------------------------------------------------------------------------------
# The fake
# --------------------------------------------------------------------------------------


class FakeLangfuse(LoopbackService):
    """In-process fake Langfuse server. Use as a context manager or start()/stop().

    ``FakeLangfuse()`` behaves as ``DEFAULT_BEHAVIOUR``; ``FakeLangfuse.kind()`` and
    ``FakeLangfuse.service_like(seed=...)`` pick a preset, ``FakeLangfuse(behaviour, seed=...)``
    any ``Behaviour``. The seed makes the page cuts and the ingestion jitter repeatable.
    """

    service_name = "FakeLangfuse"
    thread_prefix = "fake-langfuse"
    handler_class = _Handler
    join_handlers_on_stop = True  # cut requests are recorded (status 0) before stop() returns

    public_key: str
    secret_key: str
    latency_s: float
    post_latency_s: float
    dashboards_api: bool  # False: an older server, no dashboards API (404 Route not found)
    clock: Callable[[], datetime]
    """Langfuse's own clock: the ``Date`` header, ingestion delays, rate-limit windows."""
    empty_page_share: float
    """Share of observation pages that come back empty, with a continuation cursor."""
    cut_page_share: float
    """Share of observation pages cut short of ``limit``, with a continuation cursor."""
    ingestion_delay_s: float
    """Seconds (on ``clock``) before an added observation shows in listings..."""
    ingestion_jitter_s: float
    """...plus a seeded uniform draw from [0, jitter]."""
    compute_roots: bool
    """``isRootObservation`` as the server computes it, whatever the caller wrote."""
    max_body_bytes: int | None
    """Request bodies over this many bytes get Next.js's 413; None: no limit."""
    rate_limits: RateLimits | None
    """The organisation's Cloud rate limits; None: self-hosted, no limits."""
    server_version: str
    """``GET /api/public/health``'s version; before 4.59 an array score body is a 400."""
    usage_suspended: bool
    """Score posts answer 403 "Ingestion suspended: Usage threshold exceeded"."""
    gzip: bool
    """JSON answers gzip-encoded when the request accepts it (Next.js ``compress``)."""
    bomb_bytes: int
    """What a ``gzip_bomb`` answer inflates to."""

    def __init__(
        self,
        behaviour: Behaviour | None = None,
        *,
        seed: int = 0,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__()
        self.public_key = "pk-lf-test"
        self.secret_key = "sk-lf-test"
        self.latency_s = 0.0
        self.post_latency_s = 0.0  # on top of latency_s, for POSTs only (slow score pushes)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.behaviour = behaviour or DEFAULT_BEHAVIOUR
        self.empty_page_share = self.behaviour.empty_page_share
        self.cut_page_share = self.behaviour.cut_page_share
        self.ingestion_delay_s = self.behaviour.ingestion_delay_s
        self.ingestion_jitter_s = self.behaviour.ingestion_jitter_s
        self.compute_roots = self.behaviour.compute_roots
        self.max_body_bytes = self.behaviour.max_body_bytes
        self.rate_limits = self.behaviour.rate_limits
        self.server_version = self.behaviour.server_version
        self.usage_suspended = False
        # The keys' project, as GET /api/public/projects tells it.
        self.project_id = DEFAULT_PROJECT_ID
        self.project_name = "fake project"
        self.project_organization = True  # False: an older server's answer, without it
        self.gzip = self.behaviour.gzip
        self.bomb_bytes = 1024 * 1024 * 1024
        self._redirects: list[_Redirect] = []
        self._date_skews: list[float] = []
        self._faults: list[_Fault] = []
        self.fault_log: list[str] = []  # per fault answered: "<kind>: <how it ended>"
        self._page_rng = random.Random(f"{seed}:pages")
        self._delay_rng = random.Random(f"{seed}:ingestion")
        self._lock = threading.RLock()
        # Every version of each observation id, oldest first, with when it becomes visible.
        self._observations: dict[str, list[tuple[datetime, _StoredObservation]]] = {}
        self._scores: dict[tuple[str, str, str], JsonDict] = {}
        # What the server keeps beside each stored score's body (same key): source, its
        # effective timestamp, createdAt / updatedAt, and an annotation's queue and author.
        self._score_extras: dict[tuple[str, str, str], JsonDict] = {}
        self._score_posts: list[list[JsonDict]] = []
        self._score_deletes: list[str] = []
        self._windows: dict[str, _Window] = {}
        self._requests: list[RequestRecord] = []
        self._fail_rules: list[_FailRule] = []
        self._reject_next: int = 0
        self._in_flight = 0
        # Told each request as it is answered, before the answer leaves: a test acts at a
        # moment of the client's work (a signal in the middle of a pass).
        self.on_request: Callable[[RequestRecord], None] | None = None
        self.dashboards_api = True
        self._score_configs: dict[str, JsonDict] = {}
        self._widgets: dict[str, JsonDict] = {}
        self._dashboards: dict[str, JsonDict] = {}
        self._touched: dict[str, int] = {}  # dashboard id -> update sequence (newest first)
        self._sequence = 0

    @classmethod
    def kind(cls, *, seed: int = 0, **changes: Any) -> FakeLangfuse:
        """A fake with every inconvenient behaviour off (``KIND``), ``changes`` applied."""
        return cls(dataclasses.replace(KIND, **changes), seed=seed)

    @classmethod
    def service_like(cls, *, seed: int = 0, **changes: Any) -> FakeLangfuse:
        """A fake that pages, delays and computes roots like the service (``SERVICE_LIKE``)."""
        return cls(dataclasses.replace(SERVICE_LIKE, **changes), seed=seed)

    # ---- data ------------------------------------------------------------------------

    def add_observations(
        self,
        observations: Iterable[dict[str, Any]],
        *,
        delay_s: DelaySpec | None = None,
        app_roots: Iterable[str] = (),
    ) -> None:
        """Store camelCase observation dicts as the API returns them; same id replaces.

        Required: ``id`` (str), ``startTime`` (ISO 8601 str), ``type`` (str). Filled in
        when absent: ``projectId`` ("fake-project"), ``environment`` ("default") and
        ``isRootObservation``: true without a ``parentObservationId`` or for an SDK-marked
        app root (an id in ``app_roots``, or ``isRootObservation: true`` written on an
        observation that has a parent). With ``compute_roots`` that rule wins over what the
        caller wrote, as on the server. Times are stored as given, however far in the future
        or the past the client's clock put them.

        Each observation shows in listings ``delay_s`` seconds (on ``clock``) after this
        call; ``delay_s`` may be a function of the observation. Without it the fake's
        ``ingestion_delay_s`` plus a seeded draw of up to ``ingestion_jitter_s`` applies,
        counted from when the observation was sent (its end, else its start) if that is
        earlier than now: data a test adds with times long past was ingested long ago.
        An explicit ``delay_s`` counts from now whatever the times say (a client clock
        hours behind does not make its data land sooner). Until a replacement shows, the
        version before it is still listed.
        """
        marked = frozenset(app_roots)
        prepared: list[_StoredObservation] = []
        for observation in observations:
            if not isinstance(observation, dict):
                raise TypeError(f"observation must be a dict, got {type(observation)!r}")
            data = copy.deepcopy(observation)
            obs_id = data.get("id")
            start = data.get("startTime")
            if not isinstance(obs_id, str) or not obs_id:
                raise ValueError(f"observation needs a str 'id': {observation!r}")
            if not isinstance(start, str):
                raise ValueError(f"observation {obs_id} needs an ISO str 'startTime'")
            if not isinstance(data.get("type"), str):
                raise ValueError(f"observation {obs_id} needs a str 'type'")
            end = data.get("endTime")
            if end is not None and not isinstance(end, str):
                raise ValueError(f"observation {obs_id}: 'endTime' must be an ISO str or None")
            data.setdefault("projectId", DEFAULT_PROJECT_ID)
            data.setdefault("environment", DEFAULT_ENVIRONMENT)
            if data.get("parentObservationId") == "":
                data["parentObservationId"] = None  # the server's '' goes out as null
            has_parent = data.get("parentObservationId") is not None
            written = data.get("isRootObservation")
            app_root = obs_id in marked or (written is True and has_parent)
            if self.compute_roots or not isinstance(written, bool) or obs_id in marked:
                # eventsTable.ts: parent_span_id = '' OR is_app_root
                data["isRootObservation"] = not has_parent or app_root
            prepared.append(
                _StoredObservation(
                    data=data,
                    start_us=_to_us(_parse_time(start)),
                    end_us=_to_us(_parse_time(end)) if isinstance(end, str) else None,
                )
            )
        now = self.clock()
        with self._lock:
            for stored in prepared:
                # The default delay runs from when the observation was sent (its end, else
                # its start) or from now, whichever is earlier: data a test adds with times
                # long past was ingested long ago, a trace happening now lands late.
                sent = now
                if delay_s is None:
                    sent_us = stored.end_us if stored.end_us is not None else stored.start_us
                    sent = min(now, _EPOCH + timedelta(microseconds=sent_us))
                visible_at = sent + timedelta(seconds=self._delay_of(stored.data, delay_s))
                versions = self._observations.setdefault(str(stored.data["id"]), [])
                versions.append((visible_at, stored))

    def _delay_of(self, data: JsonDict, delay_s: DelaySpec | None) -> float:
        if callable(delay_s):
            return float(delay_s(copy.deepcopy(data)))
        if delay_s is not None:
            return float(delay_s)
        jitter = self._delay_rng.uniform(0.0, self.ingestion_jitter_s)
        return self.ingestion_delay_s + (jitter if self.ingestion_jitter_s > 0 else 0.0)

    def _visible(self, now: datetime) -> list[_StoredObservation]:
        """The listed version of every observation at ``now``: the newest that has landed."""
        out: list[_StoredObservation] = []
        with self._lock:
            for versions in self._observations.values():
                landed = [stored for visible_at, stored in versions if visible_at <= now]
                if landed:
                    out.append(landed[-1])
        return out

    def visible_observations(self) -> list[dict[str, Any]]:
        """What a listing would show now (on ``clock``), newest first, unprojected."""
        visible = sorted(self._visible(self.clock()), key=lambda o: o.sort_key, reverse=True)
        return [copy.deepcopy(o.data) for o in visible]

    def listed(
        self,
        *,
        trace_id: str | None = None,
        fields: str | None = None,
        expand_metadata: Iterable[str] = (),
    ) -> list[dict[str, Any]]:
        """Every landed observation (of one trace, or all) as a listing with ``fields`` and
        ``expandMetadata`` would show it, in the listing's order, without page cuts."""
        groups = self._parse_fields(fields)
        expand = frozenset(expand_metadata)
        visible = [
            o for o in self._visible(self.clock()) if trace_id is None or o.trace_id == trace_id
        ]
        visible.sort(key=lambda o: o.sort_key, reverse=True)
        return [self._project(o.data, groups, expand) for o in visible]

    def pending_observations(self) -> int:
        """Added observation versions that have not landed yet (on ``clock``)."""
        now = self.clock()
        with self._lock:
            return sum(
                1
                for versions in self._observations.values()
                for visible_at, _ in versions
                if visible_at > now
            )

    def clear_observations(self) -> None:
        with self._lock:
            self._observations.clear()

    @property
    def scores(self) -> list[dict[str, Any]]:
        """Stored scores after upsert, each as its JSON body was received."""
        with self._lock:
            return copy.deepcopy(list(self._scores.values()))

    @property
    def score_posts(self) -> list[list[dict[str, Any]]]:
        """Every POST /api/public/scores body answered 202 or 207, in order."""
        with self._lock:
            return copy.deepcopy(self._score_posts)

    def duplicates(self) -> list[tuple[str, str]]:
        """(traceId, name) of every score subject stored more than once.

        A subject is (traceId, observationId, sessionId, name): two scores with the same
        name on different observations of one trace are not duplicates. Under the real
        upsert key (id, name, UTC date of timestamp) a duplicate appears when the same
        subject is scored with a new id, or with the same id on another day.
        """
        with self._lock:
            counts = Counter(
                (
                    str(score.get("traceId") or ""),
                    str(score.get("observationId") or ""),
                    str(score.get("sessionId") or ""),
                    str(score["name"]),
                )
                for score in self._scores.values()
            )
        return sorted({(trace, name) for (trace, _, _, name), n in counts.items() if n > 1})

    def live_scores(self, trace_id: str | None = None) -> list[dict[str, Any]]:
        """The scores a dashboard would count now: every stored (id, name, day) key once,
        after upserts and deletes, each as its last body was received; of one trace, or all.
        """
        with self._lock:
            scores = [
                s for s in self._scores.values() if trace_id is None or s.get("traceId") == trace_id
            ]
            return copy.deepcopy(scores)

    def scored_traces(self) -> int:
        """How many traces have a live score: cheap (no copy), for polling benches."""
        with self._lock:
            return len({s.get("traceId") for s in self._scores.values()})

    def scores_by_trace(self) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """Live scores by traceId, then by name: more than one under a name is a double."""
        out: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for score in self.live_scores():
            by_name = out.setdefault(str(score.get("traceId") or ""), {})
            by_name.setdefault(str(score["name"]), []).append(score)
        return out

    @staticmethod
    def score_key(score: dict[str, Any]) -> tuple[str, str, str]:
        """Langfuse's identity of a stored score: (id, name, UTC day of its timestamp)."""
        raw_ts = score.get("timestamp")
        if not isinstance(raw_ts, str) or not score.get("id"):
            raise ValueError("a stored score has an id and a timestamp")
        return _score_key(score, _parse_time(raw_ts))

    def add_annotation_score(
        self,
        *,
        trace_id: str,
        value: float | bool,
        name: str = "faithful",
        data_type: str = "BOOLEAN",
        observation_id: str | None = None,
        timestamp: datetime | str | None = None,
        queue_id: str | None = "queue-1",
        author_user_id: str | None = "user-1",
        environment: str = DEFAULT_ENVIRONMENT,
        comment: str | None = None,
        score_id: str | None = None,
    ) -> dict[str, Any]:
        """A person's score as the UI or an annotation queue writes it: source ``ANNOTATION``,
        with its queue and author (BOOLEAN stored as 1 / 0, as the server keeps it). Validated
        like a posted score; same (id, name, day) replaces. Returns the stored body."""
        when = timestamp if timestamp is not None else self.clock()
        body: JsonDict = {
            "id": score_id or str(uuid.uuid4()),
            "traceId": trace_id,
            "observationId": observation_id,
            "name": name,
            "value": float(value) if isinstance(value, bool) else value,
            "dataType": data_type,
            "timestamp": when if isinstance(when, str) else _iso_ms(when),
            "environment": environment,
            "comment": comment,
        }
        message = _score_error(body)
        if message is not None:
            raise ValueError(f"invalid annotation score {body!r}: {message}")
        with self._lock:
            self._store_score(
                body,
                self.clock(),
                source="ANNOTATION",
                queue_id=queue_id,
                author_user_id=author_user_id,
            )
        return copy.deepcopy(body)

    @property
    def score_deletes(self) -> list[str]:
        """Score ids of every ``DELETE /api/public/scores/{id}`` answered 202, in order."""
        with self._lock:
            return list(self._score_deletes)

    # ---- score configs and dashboards -------------------------------------------------

    @property
    def score_configs(self) -> list[dict[str, Any]]:
        """Stored score configs as the API returns them, oldest first."""
        with self._lock:
            return copy.deepcopy(list(self._score_configs.values()))

    def add_score_config(self, body: dict[str, Any], *, archived: bool = False) -> dict[str, Any]:
        """Store a config as POST /api/public/score-configs would (validated); returns it."""
        issues = _score_config_issues(body)
        if issues:
            raise ValueError(f"invalid score config {body!r}: {issues}")
        config = _new_score_config(body)
        config["isArchived"] = archived
        with self._lock:
            self._score_configs[config["id"]] = config
        return copy.deepcopy(config)

    @property
    def dashboard_widgets(self) -> list[dict[str, Any]]:
        """Stored dashboard widgets as the API returns them, oldest first."""
        with self._lock:
            return copy.deepcopy(list(self._widgets.values()))

    @property
    def dashboards(self) -> list[dict[str, Any]]:
        """Stored dashboards (with their placements) as the API returns them, oldest first."""
        with self._lock:
            return copy.deepcopy(list(self._dashboards.values()))

    # ---- requests and faults ---------------------------------------------------------

    @property
    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._requests)

    def observation_requests(self) -> int:
        """How many GET /api/public/v2/observations were answered 200."""
        with self._lock:
            return sum(
                1
                for r in self._requests
                if r.method == "GET" and r.path == OBSERVATIONS_PATH and r.status == 200
            )

    @property
    def in_flight(self) -> int:
        """Requests received (headers and body read) but not answered yet."""
        with self._lock:
            return self._in_flight

    def reset_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def fail_next(
        self,
        status: int,
        count: int = 1,
        retry_after: float | None = None,
        path_prefix: str = "",
        method: str | None = None,
    ) -> None:
        """Answer the next ``count`` requests whose path starts with ``path_prefix`` (and whose
        method is ``method``, when given) with ``status`` (and a ``Retry-After`` header when
        given), before auth."""
        if count < 1:
            raise ValueError("count must be >= 1")
        with self._lock:
            self._fail_rules.append(_FailRule(status, count, retry_after, path_prefix, method))

    def clear_failures(self) -> None:
        """Forget every pending ``fail_next`` rule: the outage is over."""
        with self._lock:
            self._fail_rules.clear()

    def redirect(
        self,
        status: int,
        to: str,
        *,
        count: int | None = None,
        path_prefix: str = "",
        method: str | None = None,
    ) -> None:
        """Answer ``status`` with ``Location: to + path?query`` (an ingress in front), for the
        next ``count`` requests matching ``path_prefix`` and ``method``, or all of them."""
        if not 300 <= status < 400:
            raise ValueError("a redirect is a 3xx")
        with self._lock:
            self._redirects.append(_Redirect(status, to.rstrip("/"), count, path_prefix, method))

    def skew_dates(self, seconds: float, count: int = 1) -> None:
        """The next ``count`` answers carry a ``Date`` header ``seconds`` off ``clock``."""
        with self._lock:
            self._date_skews.extend([seconds] * count)

    def fault_next(self, kind: str, count: int = 1, path_prefix: str = OBSERVATIONS_PATH) -> None:
        """The next ``count`` requests under ``path_prefix`` get a hostile answer (FAULT_KINDS)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"kind must be one of {FAULT_KINDS}")
        if kind == "gzip_bomb":
            _gzip_bomb(self.bomb_bytes)  # built now, not while the client's deadline runs
        with self._lock:
            self._faults.append(_Fault(kind, count, path_prefix))

    def reject_next_scores(self, count: int) -> None:
        """The next score POST gets 207; its last ``count`` scores are rejected."""
        if count < 0:
            raise ValueError("count must be >= 0")
        with self._lock:
            self._reject_next = count

    # ---- request handling ------------------------------------------------------------

    def _handle(self, handler: LoopbackHandler) -> None:
        with self._lock:
            self._in_flight += 1
        try:
            response = self._answer(handler)
        finally:
            with self._lock:
                self._in_flight -= 1
        if response is None:  # cut off by stop(): no answer, just a dead line
            handler.close_connection = True
            return
        with self._lock:
            handler.date_offset_s = self._date_skews.pop(0) if self._date_skews else 0.0
        if response.fault is not None:
            self._write_fault(handler, response.fault)
            return
        encoded: tuple[tuple[str, str], ...] = ()
        if response.raw is not None:
            payload = response.raw
        else:
            payload = _json_bytes(response.body)
            if self.gzip and "gzip" in (handler.headers.get("Accept-Encoding") or ""):
                payload, encoded = gzip.compress(payload, 6), (("Content-Encoding", "gzip"),)
        try:
            if 300 <= response.status < 400:  # an ingress's redirect page
                handler.send_response(response.status)
                handler.send_header("Content-Type", "text/html")
            elif response.raw is not None:  # Next.js's sendError: the message is the reason too
                handler.send_response(response.status, payload.decode("utf-8", "replace"))
            else:
                handler.send_response(response.status)
                handler.send_header("Content-Type", "application/json; charset=utf-8")
            for name, value in encoded:
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(payload)))
            for name, value in response.headers:
                handler.send_header(name, value)
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(payload)
        except OSError:
            handler.close_connection = True

    def _write_fault(self, handler: LoopbackHandler, kind: str) -> None:
        """A hostile path's answer, written until the client leaves or a cap is reached."""
        handler.close_connection = True
        chunk = b'{"data": [' + b'{"id": "x", "traceId": "t"},' * 2000
        began = time.monotonic()
        sent = 0
        try:
            if kind == "html":
                handler.send_response(200)
                handler.send_header("Content-Type", "text/html; charset=utf-8")
                handler.send_header("Content-Length", str(len(PROXY_LOGIN_PAGE)))
                handler.end_headers()
                handler.wfile.write(PROXY_LOGIN_PAGE)
                self.fault_log.append("html: sent")
                return
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json; charset=utf-8")
            if kind == "huge_length":
                handler.send_header("Content-Length", str(10 * 1024**3))
            if kind == "gzip_bomb":
                chunk = _gzip_bomb(self.bomb_bytes)
                handler.send_header("Content-Encoding", "gzip")
                handler.send_header("Content-Length", str(len(chunk)))
            handler.send_header("Connection", "close")
            handler.end_headers()
            if kind == "gzip_bomb":
                handler.wfile.write(chunk)
                self.fault_log.append(f"gzip_bomb: sent {len(chunk):,} bytes")
                return
            piece = b" " if kind == "trickle" else chunk
            while sent < FAULT_CAP_BYTES and time.monotonic() - began < FAULT_CAP_S:
                if handler.server.stopped.is_set():
                    break
                handler.wfile.write(piece)
                handler.wfile.flush()
                sent += len(piece)
                if kind == "trickle":
                    handler.server.stopped.wait(0.05)
        except OSError:
            self.fault_log.append(f"{kind}: the client left after {sent:,} bytes")
            return
        self.fault_log.append(f"{kind}: the cap was reached ({sent:,} bytes)")

    def _take_redirect(self, method: str, path: str, query: str) -> _Response | None:
        with self._lock:
            for rule in self._redirects:
                if path.startswith(rule.path_prefix) and rule.method in (None, method):
                    if rule.remaining is not None:
                        rule.remaining -= 1
                    break
            else:
                return None
            self._redirects = [r for r in self._redirects if r.remaining != 0]
        location = rule.to + path + (f"?{query}" if query else "")
        page = f"<html><body><h1>{rule.status}</h1><a href='{location}'>moved</a></body></html>"
        return _Response(rule.status, None, (("Location", location),), raw=page.encode())

    def _take_fault(self, path: str) -> _Response | None:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and path.startswith(fault.path_prefix):
                    fault.remaining -= 1
                    break
            else:
                return None
            self._faults = [f for f in self._faults if f.remaining > 0]
        return _Response(200, None, fault=fault.kind)

    def _answer(self, handler: LoopbackHandler) -> _Response | None:
        """Read, delay, route and record one request; None when stop() cut it off."""
        split = urlsplit(handler.path)
        path = split.path
        query = parse_qs(split.query, keep_blank_values=True)
        try:
            length = int(handler.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        body = handler.rfile.read(length) if length > 0 else b""
        delay = self.latency_s + (self.post_latency_s if handler.command == "POST" else 0.0)
        if delay > 0:
            handler.server.stopped.wait(delay)
        if handler.server.stopped.is_set():
            self._record(handler, path, query, 0)
            return None
        try:
            if length < 0:
                raise _bad_request("Invalid Content-Length")
            # In front of Langfuse: an ingress's redirect, a hostile or broken path.
            response = (
                self._take_redirect(handler.command, path, split.query)
                or self._take_fault(path)
                or self._respond(handler.command, path, query, body, handler)
            )
        except _HttpError as exc:
            response = _Response(exc.status, exc.body, exc.headers)
        except Exception as exc:  # a bug in the fake must not hang the client
            response = _Response(500, {"message": f"fake Langfuse crashed: {exc!r}"})
        self._record(handler, path, query, response.status)
        return response

    def _record(
        self, handler: LoopbackHandler, path: str, query: dict[str, list[str]], status: int
    ) -> None:
        record = RequestRecord(
            method=handler.command,
            path=path,
            query=query,
            status=status,
            time=time.time(),
            headers={k.lower(): v for k, v in handler.headers.items()},
        )
        with self._lock:
            self._requests.append(record)
        if self.on_request is not None:
            self.on_request(record)

    def _take_failure(self, method: str, path: str) -> _Response | None:
        with self._lock:
            for rule in self._fail_rules:
                if (
                    rule.remaining > 0
                    and path.startswith(rule.path_prefix)
                    and rule.method in (None, method)
                ):
                    rule.remaining -= 1
                    break
            else:
                return None
            self._fail_rules = [r for r in self._fail_rules if r.remaining > 0]
        try:
            phrase = HTTPStatus(rule.status).phrase
        except ValueError:
            phrase = "Injected failure"
        headers: tuple[tuple[str, str], ...] = ()
        if rule.retry_after is not None:
            headers = (("Retry-After", _format_retry_after(rule.retry_after)),)
        return _Response(rule.status, {"message": phrase}, headers)

    def _respond(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: bytes,
        handler: LoopbackHandler,
    ) -> _Response:
        failure = self._take_failure(method, path)
        if failure is not None:
            return failure
        if self.max_body_bytes is not None and len(body) > self.max_body_bytes:
            # Next.js parses the body before any route code runs (api-utils/node/parse-body.ts)
            # and answers with sendError: plain text, no JSON, before auth.
            message = f"Body exceeded {_size_label(self.max_body_bytes)} limit"
            return _Response(413, None, raw=message.encode())
        routes = {
            HEALTH_PATH: "GET",
            PROJECTS_PATH: "GET",
            OBSERVATIONS_PATH: "GET",
            SCORES_PATH: "POST",
            SCORES_V3_PATH: "GET",
        }
        if path not in routes:
            return self._respond_resource(method, path, query, body, handler)
        if method not in (routes[path], "HEAD" if routes[path] == "GET" else ""):
            raise _HttpError(405, f"Method {method} not allowed", error="MethodNotAllowedError")
        if path == HEALTH_PATH:  # no auth, no rate limit (pages/api/public/health.ts)
            return _Response(200, {"status": "OK", "version": self.server_version})
        self._check_auth(handler.headers.get("Authorization"))
        if path == PROJECTS_PATH:  # no rate limit: SDKs' auth_check calls it in production
            return _Response(200, self._keys_project())
        self._consume(_GENERAL_BUCKET)
        if path == OBSERVATIONS_PATH:
            return _Response(200, self._list_observations(query))
        if path == SCORES_V3_PATH:
            return _Response(200, self._list_scores_v3(query))
        return self._create_scores(body)

    def _keys_project(self) -> JsonDict:
        project: JsonDict = {"id": self.project_id, "name": self.project_name, "metadata": {}}
        if self.project_organization:
            project["organization"] = {"id": "fake-org", "name": "fake organisation"}
        return {"data": [project]}

    def _consume(self, bucket: str) -> None:
        """One request against the organisation's bucket; a 429 when it is used up.

        As RateLimitService.ts with rate-limiter-flexible: a fixed window from its first
        request; every request counts, refused ones too; a request is refused once no point
        is left after it (``remainingPoints < 1``), so a window lets ``points - 1`` through.
        Only the 429 carries ``Retry-After`` and ``X-RateLimit-*``.
        """
        limits = self.rate_limits
        if limits is None:
            return
        if bucket == _GENERAL_BUCKET:
            points, duration = limits.general_per_minute, timedelta(minutes=1)
        else:
            points, duration = limits.score_deletes_per_day, timedelta(days=1)
        now = self.clock()
        with self._lock:
            window = self._windows.get(bucket)
            if window is None or now >= window.ends:
                window = self._windows[bucket] = _Window(ends=now + duration)
            window.consumed += 1
            remaining = max(points - window.consumed, 0)
            before_next = max(window.ends - now, timedelta(0))
        if remaining >= 1:
            return
        retry_after = math.ceil(before_next.total_seconds())
        reset = now + before_next
        raise _HttpError(
            429,
            "Rate limit exceeded",
            code="rate_limited",
            details={
                "retryAfterSeconds": retry_after,
                "limit": points,
                "remaining": remaining,
                "resetAt": _iso_ms(reset),
            },
            headers=(
                ("Retry-After", str(retry_after)),
                ("X-RateLimit-Limit", str(points)),
                ("X-RateLimit-Remaining", str(remaining)),
                ("X-RateLimit-Reset", _js_date_string(reset)),
            ),
        )

    def _check_auth(self, header: str | None) -> None:
        if not header:
            raise _HttpError(401, _NO_AUTH_HEADER)
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or not encoded.strip():
            raise _HttpError(401, _INVALID_AUTH_HEADER)
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise _HttpError(401, _INVALID_AUTH_HEADER) from exc
        username, sep, password = decoded.partition(":")
        if not sep or username != self.public_key or password != self.secret_key:
            raise _HttpError(401, _INVALID_CREDENTIALS)

    # ---- GET /api/public/v2/observations --------------------------------------------

    def _list_observations(self, query: dict[str, list[str]]) -> JsonDict:
        def single(name: str) -> str | None:
            values = query.get(name)
            if not values:
                return None
            if len(values) > 1:
                raise _bad_request(f"Query parameter {name!r} given more than once")
            return values[0]

        unknown = sorted(set(query) - _KNOWN_OBSERVATION_PARAMS)
        if unknown:
            raise _bad_request(f"Unknown query parameters: {', '.join(unknown)}")

        groups = self._parse_fields(single("fields"))
        expand = frozenset(
            k.strip() for k in (single("expandMetadata") or "").split(",") if k.strip()
        )
        limit = _parse_limit(single("limit"), DEFAULT_LIMIT, MAX_LIMIT)
        raw_cursor = single("cursor")
        after = _Cursor.decode(raw_cursor) if raw_cursor else None
        if (single("parseIoAsJson") or "").lower() == "true":
            raise _bad_request("parseIoAsJson is deprecated and no longer supported")

        raw_filter = single("filter")
        predicates = (
            _compile_filter(raw_filter) if raw_filter else self._query_predicates(query, single)
        )

        candidates = self._visible(self.clock())
        matches = [obs for obs in candidates if all(p(obs) for p in predicates)]
        if after is not None:
            bound = after.key  # (start, xxHash32(trace), id) < the cursor's, as events.ts
            matches = [obs for obs in matches if obs.sort_key < bound]
        matches.sort(key=lambda obs: obs.sort_key, reverse=True)
        page, cursor = self._page(matches, limit, after)
        # Without more results the server sends ``meta: {}``: the cursor is absent, not null.
        return {
            "data": [self._project(obs.data, groups, expand) for obs in page],
            "meta": {"cursor": cursor.encode()} if cursor is not None else {},
        }

    def _page(
        self, matches: list[_StoredObservation], limit: int, after: _Cursor | None
    ) -> tuple[list[_StoredObservation], _Cursor | None]:
        """One page of the ordered matches, and where the next one starts (None: the end).

        A full page holds ``limit`` observations, with a cursor while more remain. A
        continuation page (changelog 2026-11-03) is empty, or cut short at a seeded length,
        and always has a cursor: an empty page's cursor lies just above the next match, or
        below every observation when none is left (the next page is then the true end).
        """
        with self._lock:
            draw = self._page_rng.random()
            cut_at = self._page_rng.random()
        if draw < self.empty_page_share:
            if matches:
                return [], _Cursor.just_above(matches[0])
            if after != _BOTTOM:
                return [], _BOTTOM
            return [], None
        available = min(limit, len(matches))
        if draw < self.empty_page_share + self.cut_page_share and available >= 2:
            page = matches[: 1 + int(cut_at * (available - 1))]
            return page, _Cursor.at(page[-1])
        page = matches[:limit]
        return page, _Cursor.at(page[-1]) if len(matches) > limit else None

    @staticmethod
    def _parse_fields(raw: str | None) -> list[str]:
        requested = [g.strip() for g in (raw or "").split(",") if g.strip()]
        if not requested:
            requested = list(DEFAULT_FIELD_GROUPS)
        unknown = [g for g in requested if g not in FIELD_GROUPS]
        if unknown:
            raise _bad_request(
                f"Invalid field group(s): {', '.join(unknown)}",
                validGroups=list(FIELD_GROUPS),
            )
        wanted = {"core", *requested}
        return [g for g in FIELD_GROUPS if g in wanted]

    @staticmethod
    def _query_predicates(
        query: dict[str, list[str]], single: Callable[[str], str | None]
    ) -> list[_Predicate]:
        predicates: list[_Predicate] = []

        def equals(key: str, expected: Any) -> _Predicate:
            return lambda obs: obs.data.get(key) == expected

        for name in _EQUALITY_PARAMS:
            value = single(name)
            if value is not None:
                predicates.append(equals(name, value))

        parent = single("parentObservationId")
        if parent is not None:
            predicates.append(equals("parentObservationId", parent or None))

        is_root = single("isRootObservation")
        if is_root is not None:
            if is_root not in ("true", "false"):
                raise _bad_request(f"isRootObservation must be true or false, got {is_root!r}")
            predicates.append(equals("isRootObservation", is_root == "true"))

        environments = frozenset(query.get("environment", []))
        if environments:
            predicates.append(lambda obs: obs.data.get("environment") in environments)

        for name, inclusive_lower in (("fromStartTime", True), ("toStartTime", False)):
            raw = single(name)
            if raw is None:
                continue
            try:
                bound = _to_us(_parse_time(raw))
            except ValueError as exc:
                raise _bad_request(f"{name} is not an ISO 8601 datetime: {raw!r}") from exc
            predicates.append(_start_bound(bound, inclusive_lower=inclusive_lower))
        return predicates

    @staticmethod
    def _project(data: JsonDict, groups: list[str], expand: frozenset[str]) -> JsonDict:
        out: JsonDict = {}
        for group in groups:
            for key in FIELD_GROUPS[group]:
                value = copy.deepcopy(data.get(key))
                out[key] = _truncate_metadata(value, expand) if key == "metadata" else value
        return out

    # ---- POST /api/public/scores ----------------------------------------------------

    def _create_scores(self, body: bytes) -> _Response:
        try:
            payload = json.loads(body)
        except ValueError as exc:
            raise _bad_request("Invalid request data: body is not JSON") from exc
        if _version_tuple(self.server_version) < BATCH_SCORES_SINCE:
            return self._create_one_score(payload)
        if not isinstance(payload, list):
            raise _bad_request("Invalid request data: body must be a JSON array of scores")
        errors = [
            {"index": i, "message": message}
            for i, score in enumerate(payload)
            if (message := _score_error(score)) is not None
        ]
        if errors:
            raise _bad_request("Invalid request data", error=errors)
        self._check_ingestion()

        scores: list[JsonDict] = payload
        received_at = self.clock()
        with self._lock:
            rejected = min(self._reject_next, len(scores))
            self._reject_next = 0
            accepted = scores[: len(scores) - rejected]
            for score in accepted:
                self._store_score(score, received_at, source="API")
            self._score_posts.append(copy.deepcopy(scores))
        if rejected == 0:
            return _Response(202, {"message": "Accepted"})
        rejected_scores = scores[len(scores) - rejected :]
        return _Response(
            207,
            {
                "accepted": len(accepted),
                "rejected": rejected,
                "errors": [
                    {"message": f"Score {s.get('id') or '(no id)'} rejected by the fake"}
                    for s in rejected_scores
                ],
            },
        )

    def _create_one_score(self, payload: Any) -> _Response:
        """A server before 4.59: the body is ``PostScoresBodyV1``, one object (zod), so an
        array is ``invalid_type``; one valid score is stored and answered ``{"id"}``."""
        if not isinstance(payload, dict):
            received = "array" if isinstance(payload, list) else type(payload).__name__
            raise _bad_request(
                "Invalid request data",
                error=[
                    {
                        "code": "invalid_type",
                        "expected": "object",
                        "received": received,
                        "path": [],
                        "message": f"Expected object, received {received}",
                    }
                ],
            )
        message = _score_error(payload)
        if message is not None:
            raise _bad_request("Invalid request data", error=[_issue("", message)])
        self._check_ingestion()
        score = {**copy.deepcopy(payload), "id": payload.get("id") or str(uuid.uuid4())}
        with self._lock:
            self._store_score(score, self.clock(), source="API")
            self._score_posts.append([copy.deepcopy(score)])
        return _Response(200, {"id": score["id"]})

    def _store_score(
        self,
        score: JsonDict,
        received_at: datetime,
        *,
        source: str,
        queue_id: str | None = None,
        author_user_id: str | None = None,
    ) -> None:
        """Upsert one score under its key, with what the server keeps beside it (locked)."""
        key = _score_key(score, received_at)
        raw_ts = score.get("timestamp")
        when = _parse_time(raw_ts) if isinstance(raw_ts, str) else received_at
        before = self._score_extras.get(key)
        self._scores[key] = copy.deepcopy(score)
        self._score_extras[key] = {
            "source": source,
            "timestamp": when,
            "createdAt": before["createdAt"] if before else received_at,
            "updatedAt": received_at,
            "queueId": queue_id,
            "authorUserId": author_user_id,
        }

    # ---- GET /api/public/v3/scores --------------------------------------------------

    def _list_scores_v3(self, query: dict[str, list[str]]) -> JsonDict:
        """One page of stored scores (module docstring, "Reading scores")."""
        asked = _compile_scores_v3(query)
        with self._lock:
            rows = [
                _ScoreRow(key, copy.deepcopy(body), dict(self._score_extras[key]))
                for key, body in self._scores.items()
            ]
        matches = [
            row
            for row in rows
            if asked.match(row) and (asked.after is None or row.sort_key < asked.after)
        ]
        matches.sort(key=lambda r: r.sort_key, reverse=True)
        page = matches[: asked.limit]
        meta: JsonDict = {"limit": asked.limit}
        if len(matches) > asked.limit:  # absent on the final page
            meta["cursor"] = _encode_scores_cursor(page[-1].sort_key)
        return {"data": [row.as_v3(asked.groups) for row in page], "meta": meta}

    def _check_ingestion(self) -> None:
        """pages/api/public/scores/index.ts: a project over its usage threshold gets a 403
        (ForbiddenError, after auth, rate limit and body validation)."""
        if self.usage_suspended:
            raise _HttpError(403, USAGE_SUSPENDED_MESSAGE, error="ForbiddenError")

    def _delete_score(
        self, score_id: str | None, _query: dict[str, list[str]], _body: Any
    ) -> _Response:
        """pages/api/public/scores/[scoreId].ts: queues the deletion of every stored score
        with that id (any name, any day) and answers 202, whether or not one exists."""
        with self._lock:
            for key in [k for k in self._scores if k[0] == score_id]:
                del self._scores[key]
                self._score_extras.pop(key, None)
            self._score_deletes.append(str(score_id))
        return _Response(202, {"message": "Score deletion queued successfully"})

    # ---- score configs and the unstable dashboards API ---------------------------------

    def _respond_resource(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: bytes,
        handler: LoopbackHandler,
    ) -> _Response:
        found = next(
            ((m, actions) for p, actions in _RESOURCE_ROUTES if (m := p.match(path)) is not None),
            None,
        )
        if found is None:
            raise _HttpError(404, "Route not found", error="NotFoundError")
        match, actions = found
        unstable = path.startswith(_UNSTABLE_PREFIX)
        if unstable and not self.dashboards_api:  # a server without it: no such route at all
            raise _HttpError(404, "Route not found", error="NotFoundError")
        try:
            action = actions.get("GET" if method == "HEAD" else method)
            if action is None:
                raise _HttpError(405, f"Method {method} not allowed", error="MethodNotAllowedError")
            self._check_auth(handler.headers.get("Authorization"))
            self._consume(_SCORE_DELETE_BUCKET if action == "_delete_score" else _GENERAL_BUCKET)
            payload = _json_body(body) if method in ("POST", "PATCH") else None
            route: Callable[[str | None, dict[str, list[str]], Any], _Response] = getattr(
                self, action
            )
            return route(match.groupdict().get("id"), query, payload)
        except _HttpError as exc:
            if unstable and "code" not in exc.body:
                exc.body = {
                    "message": exc.body["message"],
                    "code": _UNSTABLE_CODES.get(exc.status, "invalid_request"),
                }
            raise

    # score configs (stable API: 400 is {"message": "Invalid request data", "error": [...]})

    def _list_score_configs(
        self, _id: str | None, query: dict[str, list[str]], _body: Any
    ) -> _Response:
        with self._lock:
            newest_first = list(reversed(self._score_configs.values()))
        return _Response(200, _page_of(newest_first, query, unstable=False))

    def _create_score_config(
        self, _id: str | None, _query: dict[str, list[str]], body: Any
    ) -> _Response:
        issues = _score_config_issues(body)
        if issues:
            raise _bad_request("Invalid request data", error=issues)
        config = _new_score_config(body)
        with self._lock:
            self._score_configs[config["id"]] = config
        return _Response(200, copy.deepcopy(config))

    def _get_score_config(
        self, config_id: str | None, _query: dict[str, list[str]], _body: Any
    ) -> _Response:
        with self._lock:
            config = self._score_configs.get(str(config_id))
            if config is None:
                raise _HttpError(404, "Score config not found", error="LangfuseNotFoundError")
            return _Response(200, copy.deepcopy(config))

    def _update_score_config(
        self, config_id: str | None, _query: dict[str, list[str]], body: Any
    ) -> _Response:
        with self._lock:
            config = self._score_configs.get(str(config_id))
            if config is None:
                raise _HttpError(404, "Score config not found", error="LangfuseNotFoundError")
            issues = _score_config_update_issues(body, config)
            if issues:
                raise _bad_request("Invalid request data", error=issues)
            # Unknown keys (dataType among them) are stripped, as zod does: no type change.
            for key in _SCORE_CONFIG_UPDATE_KEYS:
                if key in body:
                    config[key] = copy.deepcopy(body[key])
            config["updatedAt"] = _now_iso()
            return _Response(200, copy.deepcopy(config))

    # dashboard widgets (unstable API: errors are {"message", "code", "details"})

    def _list_widgets(self, _id: str | None, query: dict[str, list[str]], _body: Any) -> _Response:
        with self._lock:
            newest_first = list(reversed(self._widgets.values()))
        return _Response(200, _page_of(newest_first, query, unstable=True))

    def _create_widget(self, _id: str | None, _query: dict[str, list[str]], body: Any) -> _Response:
        widget = _new_widget(body)
        with self._lock:
            self._widgets[widget["id"]] = widget
        return _Response(200, copy.deepcopy(widget))

    def _get_widget(
        self, widget_id: str | None, _query: dict[str, list[str]], _body: Any
    ) -> _Response:
        with self._lock:
            widget = self._widgets.get(str(widget_id))
            if widget is None:
                raise _unstable_error(
                    404, "resource_not_found", f"Dashboard widget {widget_id} not found"
                )
            return _Response(200, copy.deepcopy(widget))

    # dashboards

    def _list_dashboards(
        self, _id: str | None, query: dict[str, list[str]], _body: Any
    ) -> _Response:
        with self._lock:
            order = sorted(self._dashboards, key=lambda d: self._touched[d], reverse=True)
            newest_first = [self._dashboards[d] for d in order]
        return _Response(200, _page_of(newest_first, query, unstable=True))

    def _create_dashboard(
        self, _id: str | None, _query: dict[str, list[str]], body: Any
    ) -> _Response:
        if not isinstance(body, dict):
            raise _invalid_body("body", "Expected object")
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            raise _invalid_body("name", "Dashboard name is required")
        description = body.get("description")
        if description is not None and not isinstance(description, str):
            raise _invalid_body("description", "Expected string")
        filters = body.get("filters")
        if filters is None:
            filters = []
        _check_filters(filters, None, "filters")
        definition = body.get("definition")
        raw_placements: Any = [] if definition is None else None
        if isinstance(definition, dict):
            raw_placements = definition.get("widgets")
        if not isinstance(raw_placements, list):
            raise _invalid_body("definition.widgets", "Expected array")
        with self._lock:
            placements: list[JsonDict] = []
            for index, raw in enumerate(raw_placements):
                field = f"definition.widgets[{index}]"
                placement = self._placement(raw, placements, field, require_position=True)
                placements.append(placement)
            now = _now_iso()
            dashboard: JsonDict = {
                "id": str(uuid.uuid4()),
                "createdAt": now,
                "updatedAt": now,
                "name": name,
                "description": description or "",
                "definition": {"widgets": placements},
                "filters": copy.deepcopy(filters),
            }
            self._dashboards[dashboard["id"]] = dashboard
            self._touch(dashboard["id"])
            return _Response(200, copy.deepcopy(dashboard))

    def _get_dashboard(
        self, dashboard_id: str | None, _query: dict[str, list[str]], _body: Any
    ) -> _Response:
        with self._lock:
            return _Response(200, copy.deepcopy(self._dashboard(dashboard_id)))

    def _add_placement(
        self, dashboard_id: str | None, _query: dict[str, list[str]], body: Any
    ) -> _Response:
        with self._lock:
            dashboard = self._dashboard(dashboard_id)
            placements: list[JsonDict] = dashboard["definition"]["widgets"]
            placement = self._placement(body, placements, "body", require_position=False)
            placements.append(placement)
            dashboard["updatedAt"] = _now_iso()
            self._touch(dashboard["id"])
            return _Response(200, copy.deepcopy(placement))

    def _dashboard(self, dashboard_id: str | None) -> JsonDict:
        dashboard = self._dashboards.get(str(dashboard_id))
        if dashboard is None:
            raise _unstable_error(404, "resource_not_found", f"Dashboard {dashboard_id} not found")
        return dashboard

    def _touch(self, dashboard_id: str) -> None:
        self._sequence += 1
        self._touched[dashboard_id] = self._sequence

    def _placement(
        self, raw: Any, existing: list[JsonDict], field: str, *, require_position: bool
    ) -> JsonDict:
        """One placement, validated, with the server's defaults (id, appended 6x6 tile)."""
        if not isinstance(raw, dict):
            raise _invalid_body(field, "Expected object")
        kind = raw.get("type")
        if kind not in ("widget", "preset"):
            raise _invalid_body(f"{field}.type", "Expected 'widget' | 'preset'")
        ref_key = "widgetId" if kind == "widget" else "presetId"
        ref = raw.get(ref_key)
        if not isinstance(ref, str) or not ref:
            raise _invalid_body(f"{field}.{ref_key}", "Required")
        if kind == "widget" and ref not in self._widgets:
            raise _unstable_error(404, "resource_not_found", f"Dashboard widget {ref} not found")
        placement_id = raw.get("id")
        if placement_id is None and not require_position:
            placement_id = str(uuid.uuid4())
        if not isinstance(placement_id, str) or not placement_id:
            raise _invalid_body(f"{field}.id", "Required")
        if any(p["id"] == placement_id for p in existing):
            raise _unstable_error(
                409, "conflict", f"A placement with id {placement_id} already exists"
            )
        bottom = max((p["y"] + p["height"] for p in existing), default=0)
        defaults = {"x": 0, "y": bottom, "width": 6, "height": 6}
        position: dict[str, int] = {}
        for key, default in defaults.items():
            value = raw.get(key)
            if value is None and not require_position:
                value = default
            minimum = 1 if key in ("width", "height") else 0
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise _invalid_body(f"{field}.{key}", f"Expected an integer >= {minimum}")
            position[key] = value
        if position["x"] + position["width"] > _GRID_COLUMNS:
            raise _unstable_error(
                400,
                "invalid_request",
                f"{field}: x + width must not exceed the {_GRID_COLUMNS}-column grid",
                field=f"{field}.width",
            )
        return {"type": kind, "id": placement_id, ref_key: ref, **position}


def _start_bound(bound_us: int, *, inclusive_lower: bool) -> _Predicate:
    """fromStartTime is inclusive (>=), toStartTime exclusive (<)."""

    def within(obs: _StoredObservation) -> bool:
        return obs.start_us >= bound_us if inclusive_lower else obs.start_us < bound_us

    return within


def _score_key(score: JsonDict, received_at: datetime) -> tuple[str, str, str]:
    """Real upsert identity: (id, name, UTC date of timestamp); no id -> always new."""
    score_id = score.get("id") or f"generated-{uuid.uuid4()}"
    raw_ts = score.get("timestamp")
    when = _parse_time(raw_ts) if isinstance(raw_ts, str) else received_at
    return (str(score_id), str(score["name"]), when.astimezone(UTC).date().isoformat())


# --------------------------------------------------------------------------------------
# GET /api/public/v3/scores
# --------------------------------------------------------------------------------------

_SCORES_V3_PARAMS: Final = frozenset(
    {
        "limit",
        "cursor",
        "fields",
        "id",
        "name",
        "source",
        "dataType",
        "environment",
        "configId",
        "queueId",
        "authorUserId",
        "value",
        "valueMin",
        "valueMax",
        "traceId",
        "sessionId",
        "observationId",
        "experimentId",
        "fromTimestamp",
        "toTimestamp",
    }
)
_SCORE_V3_GROUPS: Final = ("details", "subject", "annotation")
SCORES_V3_DEFAULT_LIMIT: Final = 50
SCORES_V3_MAX_LIMIT: Final = 100
_ScoreSortKey = tuple[int, str]


@dataclass(frozen=True)
class _ScoreRow:
    key: tuple[str, str, str]
    body: JsonDict
    extras: JsonDict

    @property
    def data_type(self) -> str:
        written = self.body.get("dataType")
        if isinstance(written, str):
            return written
        return "CATEGORICAL" if isinstance(self.body.get("value"), str) else "NUMERIC"

    @property
    def timestamp_us(self) -> int:
        moment: datetime = self.extras["timestamp"]
        return _to_us(moment)

    @property
    def sort_key(self) -> _ScoreSortKey:
        return (self.timestamp_us, self.key[0])

    def filter_fields(self) -> dict[str, Any]:
        body = self.body
        return {
            "id": self.key[0],
            "name": body.get("name"),
            "source": self.extras["source"],
            "dataType": self.data_type,
            "environment": body.get("environment") or DEFAULT_ENVIRONMENT,
            "configId": body.get("configId"),
            "queueId": self.extras.get("queueId"),
            "authorUserId": self.extras.get("authorUserId"),
            "traceId": body.get("traceId"),
            "sessionId": body.get("sessionId"),
            "observationId": body.get("observationId"),
            "experimentId": body.get("datasetRunId"),
        }

    def typed_value(self) -> Any:
        value: Any = self.body.get("value")
        if self.data_type == "NUMERIC":
            return float(value) if _is_number(value) else value
        if self.data_type == "BOOLEAN":
            return bool(value)
        return str(value)

    def subject(self) -> JsonDict | None:
        body = self.body
        if body.get("observationId"):
            return {
                "kind": "observation",
                "id": body["observationId"],
                "traceId": body.get("traceId"),
            }
        if body.get("traceId"):
            return {"kind": "trace", "id": body["traceId"]}
        if body.get("sessionId"):
            return {"kind": "session", "id": body["sessionId"]}
        if body.get("datasetRunId"):
            return {"kind": "experiment", "id": body["datasetRunId"]}
        return None

    def as_v3(self, groups: Iterable[str]) -> JsonDict:
        """The score as ``ScoreV3``: core fields, then the groups asked for."""
        extras = self.extras
        out: JsonDict = {
            "id": self.key[0],
            "projectId": DEFAULT_PROJECT_ID,
            "name": self.body.get("name"),
            "value": self.typed_value(),
            "dataType": self.data_type,
            "source": extras["source"],
            "timestamp": _iso_ms(extras["timestamp"]),
            "environment": self.body.get("environment") or DEFAULT_ENVIRONMENT,
            "createdAt": _iso_ms(extras["createdAt"]),
            "updatedAt": _iso_ms(extras["updatedAt"]),
        }
        wanted = set(groups)
        if "details" in wanted:
            out["comment"] = self.body.get("comment")
            out["configId"] = self.body.get("configId")
            out["metadata"] = copy.deepcopy(self.body.get("metadata"))
        if "subject" in wanted:
            out["subject"] = self.subject()
        if "annotation" in wanted:
            out["authorUserId"] = extras.get("authorUserId")
            out["queueId"] = extras.get("queueId")
        return out


@dataclass(frozen=True)
class _ScoresV3Query:
    groups: tuple[str, ...]
    limit: int
    after: _ScoreSortKey | None
    match: Callable[[_ScoreRow], bool]


_LIST_FILTERS: Final = (
    ("id", False),
    ("name", False),
    ("source", True),
    ("dataType", True),
    ("environment", False),
    ("configId", False),
    ("queueId", False),
    ("authorUserId", False),
    ("traceId", False),
    ("sessionId", False),
    ("observationId", False),
    ("experimentId", False),
)


def _check_scores_v3_filters(filters: dict[str, frozenset[str]]) -> None:
    """The spec's 400s for filters that do not go together."""
    if "observationId" in filters and "traceId" not in filters:
        raise _bad_request("observationId requires traceId")
    scoped = [k for k in ("traceId", "sessionId", "experimentId") if k in filters]
    if len(scoped) > 1 or ("sessionId" in filters and "observationId" in filters):
        raise _bad_request(
            "traceId, sessionId and experimentId are mutually exclusive "
            "(and observationId goes with traceId only)"
        )
    types = filters.get("dataType")
    if types is not None and not types <= _SCORE_DATA_TYPES:
        raise _bad_request(f"dataType must be among {sorted(_SCORE_DATA_TYPES)}")


def _compile_scores_v3(query: dict[str, list[str]]) -> _ScoresV3Query:
    """The query of ``GET /api/public/v3/scores`` checked as the spec says, as a predicate."""
    unknown = sorted(set(query) - _SCORES_V3_PARAMS)
    if unknown:
        raise _bad_request(f"Unknown query parameters: {', '.join(unknown)}")

    def single(name: str) -> str | None:
        values = query.get(name)
        if not values:
            return None
        if len(values) > 1:
            raise _bad_request(f"Query parameter {name!r} given more than once")
        return values[0]

    groups = tuple(g.strip() for g in (single("fields") or "").split(",") if g.strip())
    bad = [g for g in groups if g not in _SCORE_V3_GROUPS]
    if bad:
        raise _bad_request(f"Invalid fields: {', '.join(bad)}", validGroups=list(_SCORE_V3_GROUPS))
    raw_cursor = single("cursor")
    filters: dict[str, frozenset[str]] = {}
    for name, upper in _LIST_FILTERS:
        raw = single(name)
        if raw is not None:
            items = (v.strip() for v in raw.split(",") if v.strip())
            filters[name] = frozenset(v.upper() if upper else v for v in items)
    _check_scores_v3_filters(filters)
    types = filters.get("dataType")
    value_match = _value_predicate(single("value"), single("valueMin"), single("valueMax"), types)
    since = single("fromTimestamp")
    until = single("toTimestamp")
    from_us = _to_us(_parse_query_time("fromTimestamp", since)) if since is not None else None
    to_us = _to_us(_parse_query_time("toTimestamp", until)) if until is not None else None

    def match(row: _ScoreRow) -> bool:
        fields = row.filter_fields()
        if any(fields.get(name) not in wanted for name, wanted in filters.items()):
            return False
        moment = row.timestamp_us
        if from_us is not None and moment < from_us:  # fromTimestamp: inclusive
            return False
        if to_us is not None and moment >= to_us:  # toTimestamp: exclusive
            return False
        return value_match(row)

    return _ScoresV3Query(
        groups=groups,
        limit=_parse_limit(single("limit") or None, SCORES_V3_DEFAULT_LIMIT, SCORES_V3_MAX_LIMIT),
        after=_decode_scores_cursor(raw_cursor) if raw_cursor else None,
        match=match,
    )


def _parse_limit(raw: str | None, default: int, maximum: int) -> int:
    """A page size as an endpoint takes it: absent is `default`; 400 outside 1..maximum."""
    if raw is None:
        return default
    try:
        limit = int(raw)
    except ValueError as exc:
        raise _bad_request(f"limit must be an integer, got {raw!r}") from exc
    if limit < 1 or limit > maximum:
        raise _bad_request(f"limit must be between 1 and {maximum}, got {limit}")
    return limit


def _parse_query_time(name: str, raw: str) -> datetime:
    try:
        return _parse_time(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise _bad_request(f"{name} is not an ISO 8601 datetime: {raw!r}") from exc


def _encode_scores_cursor(key: _ScoreSortKey) -> str:
    """base64url (no padding) JSON of the last row's keyset."""
    moment = _EPOCH + timedelta(microseconds=key[0])
    payload = {
        "lastTimestamp": moment.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "lastId": key[1],
    }
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_scores_cursor(cursor: str) -> _ScoreSortKey:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = json.loads(raw)
        moment = _parse_time(str(payload["lastTimestamp"]).replace("Z", "+00:00"))
        last_id = payload["lastId"]
    except (binascii.Error, ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise _HttpError(400, "Invalid cursor format", error="InvalidRequestError") from exc
    if not isinstance(last_id, str):
        raise _HttpError(400, "Invalid cursor format", error="InvalidRequestError")
    return (_to_us(moment), last_id)


def _value_predicate(
    value: str | None,
    value_min: str | None,
    value_max: str | None,
    types: frozenset[str] | None,
) -> Callable[[_ScoreRow], bool]:
    """The ``value`` / ``valueMin`` / ``valueMax`` filters, with the spec's 400s."""
    if value is None and value_min is None and value_max is None:
        return lambda _row: True
    single = next(iter(types)) if types is not None and len(types) == 1 else None
    if value is not None and single not in ("NUMERIC", "BOOLEAN", "CATEGORICAL"):
        raise _bad_request("value requires a single dataType of NUMERIC, BOOLEAN or CATEGORICAL")
    if (value_min is not None or value_max is not None) and single != "NUMERIC":
        raise _bad_request("valueMin and valueMax require dataType NUMERIC")

    def number(raw: str, name: str) -> float:
        try:
            parsed = float(raw)
        except ValueError:
            parsed = math.nan
        if not math.isfinite(parsed):
            raise _bad_request(f"{name} must be a finite number, got {raw!r}")
        return parsed

    exact = _exact_values(value, single, number) if value is not None else None
    low = number(value_min, "valueMin") if value_min is not None else -math.inf
    high = number(value_max, "valueMax") if value_max is not None else math.inf

    def matches(row: _ScoreRow) -> bool:
        typed = row.typed_value()
        if exact is not None and typed not in exact:
            return False
        if value_min is None and value_max is None:
            return True
        return _is_number(typed) and low <= typed <= high

    return matches


def _exact_values(
    value: str, data_type: str | None, number: Callable[[str, str], float]
) -> frozenset[Any]:
    items = [v.strip() for v in value.split(",")]
    if data_type == "BOOLEAN":
        if any(v not in ("true", "false") for v in items):
            raise _bad_request("a BOOLEAN value filter takes true or false")
        return frozenset(v == "true" for v in items)
    if data_type == "NUMERIC":
        return frozenset(number(v, "value") for v in items)
    return frozenset(items)


def _score_error(score: Any) -> str | None:  # noqa: C901 - the server's checks, one branch each
    if not isinstance(score, dict):
        return "score must be an object"
    name = score.get("name")
    if not isinstance(name, str) or not name:
        return "name is required"
    if "value" not in score or score["value"] is None:
        return "value is required"
    value = score["value"]
    for key in ("id", "traceId", "observationId", "sessionId", "datasetRunId", "comment"):
        if score.get(key) is not None and not isinstance(score[key], str):
            return f"{key} must be a string"
    if not any(score.get(k) for k in ("traceId", "sessionId", "datasetRunId")):
        return "one of traceId, sessionId or datasetRunId is required"
    if score.get("observationId") and not score.get("traceId"):
        return "observationId requires traceId"
    data_type = score.get("dataType")
    if data_type is None:
        data_type = "CATEGORICAL" if isinstance(value, str) else "NUMERIC"
    if data_type not in _SCORE_DATA_TYPES:
        return f"dataType must be one of {sorted(_SCORE_DATA_TYPES)}"
    if data_type == "NUMERIC" and not (_is_number(value) and math.isfinite(value)):
        return "NUMERIC score value must be a finite number"
    if data_type == "BOOLEAN" and not (_is_number(value) and value in (0, 1)):
        return "BOOLEAN score value must be 0 or 1"
    if data_type in ("CATEGORICAL", "CORRECTION") and not isinstance(value, str):
        return f"{data_type} score value must be a string"
    if data_type == "TEXT" and not (isinstance(value, str) and 1 <= len(value) <= 500):
        return "TEXT score value must be a string of 1 to 500 characters"
    timestamp = score.get("timestamp")
    if timestamp is not None:
        if not isinstance(timestamp, str):
            return "timestamp must be an ISO 8601 string"
        try:
            _parse_time(timestamp)
        except ValueError:
            return f"timestamp is not ISO 8601: {timestamp!r}"
    environment = score.get("environment")
    if environment is not None and not (
        isinstance(environment, str) and _ENVIRONMENT_RE.match(environment)
    ):
        return "environment must be lowercase [a-z0-9_-], at most 40 chars, not 'langfuse*'"
    metadata = score.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        return "metadata must be an object"
    return None


# --------------------------------------------------------------------------------------
# Score configs and the unstable dashboards API: routes, validation, objects
# --------------------------------------------------------------------------------------

_UNSTABLE_PREFIX: Final = "/api/public/unstable/"
_RESOURCE_ROUTES: Final[tuple[tuple[re.Pattern[str], dict[str, str]], ...]] = tuple(
    (re.compile(pattern), actions)
    for pattern, actions in (
        (f"^{SCORES_PATH}/(?P<id>[^/]+)$", {"DELETE": "_delete_score"}),
        (
            f"^{SCORE_CONFIGS_PATH}$",
            {"GET": "_list_score_configs", "POST": "_create_score_config"},
        ),
        (
            f"^{SCORE_CONFIGS_PATH}/(?P<id>[^/]+)$",
            {"GET": "_get_score_config", "PATCH": "_update_score_config"},
        ),
        (f"^{DASHBOARDS_PATH}$", {"GET": "_list_dashboards", "POST": "_create_dashboard"}),
        (f"^{DASHBOARDS_PATH}/(?P<id>[^/]+)$", {"GET": "_get_dashboard"}),
        (f"^{DASHBOARDS_PATH}/(?P<id>[^/]+)/placements$", {"POST": "_add_placement"}),
        (
            f"^{DASHBOARD_WIDGETS_PATH}$",
            {"GET": "_list_widgets", "POST": "_create_widget"},
        ),
        (f"^{DASHBOARD_WIDGETS_PATH}/(?P<id>[^/]+)$", {"GET": "_get_widget"}),
    )
)
_UNSTABLE_CODES: Final = {
    400: "invalid_request",
    401: "authentication_failed",
    403: "access_denied",
    404: "resource_not_found",
    405: "method_not_allowed",
    409: "conflict",
    429: "rate_limited",
}
_LIST_DEFAULT_LIMIT: Final = 50
_LIST_MAX_LIMIT: Final = 100
_GRID_COLUMNS: Final = 12

_SCORE_CONFIG_TYPES: Final = ("NUMERIC", "CATEGORICAL", "BOOLEAN", "TEXT")
_SCORE_CONFIG_NAME_RE: Final = re.compile(r"[\w .()-]{1,35}")
_SCORE_CONFIG_UPDATE_KEYS: Final = (
    "isArchived",
    "name",
    "minValue",
    "maxValue",
    "categories",
    "description",
)
_CATEGORIES_MESSAGE: Final = (
    "Category must be an array of objects with label value pairs, "
    "where labels and values are unique."
)

_WIDGET_CHART_TYPES: Final = (
    "LINE_TIME_SERIES",
    "AREA_TIME_SERIES",
    "BAR_TIME_SERIES",
    "HORIZONTAL_BAR",
    "VERTICAL_BAR",
    "PIE",
    "NUMBER",
    "HISTOGRAM",
    "PIVOT_TABLE",
)
_WIDGET_AGGREGATIONS: Final = (
    "sum",
    "avg",
    "count",
    "max",
    "min",
    "p50",
    "p75",
    "p90",
    "p95",
    "p99",
    "histogram",
    "uniq",
)
_CHART_OPTIONS: Final = ("row_limit", "show_value_labels", "bins", "defaultSort")
# Dimensions and measures per view, as the spec's metrics API documents them (v2).
_SCORE_DIMENSIONS: Final = (
    "environment",
    "name",
    "source",
    "dataType",
    "configId",
    "timestampMonth",
    "timestampDay",
    "traceName",
    "tags",
    "traceRelease",
    "traceVersion",
    "observationName",
    "observationModelName",
    "observationPromptName",
    "observationPromptVersion",
)
_WIDGET_VIEWS: Final[dict[str, tuple[frozenset[str], frozenset[str]]]] = {
    "observations": (
        frozenset(
            {
                "environment",
                "type",
                "name",
                "level",
                "version",
                "tags",
                "release",
                "traceName",
                "traceRelease",
                "traceVersion",
                "providedModelName",
                "promptName",
                "promptVersion",
                "isRootObservation",
                "startTimeMonth",
            }
        ),
        frozenset(
            {
                "count",
                "latency",
                "streamingLatency",
                "inputTokens",
                "outputTokens",
                "totalTokens",
                "outputTokensPerSecond",
                "tokensPerSecond",
                "inputCost",
                "outputCost",
                "totalCost",
                "timeToFirstToken",
                "countScores",
            }
        ),
    ),
    "scores-numeric": (frozenset({*_SCORE_DIMENSIONS, "value"}), frozenset({"count", "value"})),
    "scores-boolean": (
        frozenset({*_SCORE_DIMENSIONS, "value", "booleanValue"}),
        frozenset({"count", "value"}),
    ),
    "scores-categorical": (frozenset({*_SCORE_DIMENSIONS, "stringValue"}), frozenset({"count"})),
}
# High-cardinality columns: not dimensions, but filters may use them.
_FILTER_ONLY_COLUMNS: Final = frozenset(
    {"id", "traceId", "observationId", "userId", "sessionId", "metadata"}
)
_STRING_OPERATORS: Final = frozenset(
    {"=", "contains", "does not contain", "starts with", "ends with"}
)
_NUMBER_OPERATORS: Final = frozenset({"=", ">", "<", ">=", "<="})
_FILTER_OPERATORS: Final[dict[str, frozenset[str]]] = {
    "string": _STRING_OPERATORS,
    "number": _NUMBER_OPERATORS,
    "datetime": frozenset({">", "<", ">=", "<="}),
    "boolean": frozenset({"=", "<>"}),
    "null": frozenset({"is null", "is not null"}),
    "stringOptions": frozenset({"any of", "none of"}),
    "arrayOptions": frozenset({"any of", "none of", "all of"}),
    "categoryOptions": frozenset({"any of", "none of"}),
    "stringObject": _STRING_OPERATORS,
    "numberObject": _NUMBER_OPERATORS,
    "booleanObject": frozenset({"=", "<>"}),
}


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise _bad_request("Invalid request data: body is not JSON") from exc


def _issue(path: str, message: str) -> JsonDict:
    return {"code": "custom", "message": message, "path": path.split(".") if path else []}


def _unstable_error(status: int, code: str, message: str, **details: Any) -> _HttpError:
    extra: JsonDict = {"code": code}
    if details:
        extra["details"] = details
    return _HttpError(status, message, **extra)


def _invalid_body(field: str, message: str) -> _HttpError:
    return _unstable_error(
        400,
        "invalid_body",
        f"Invalid request body: {field}: {message}",
        issues=[_issue(field, message)],
    )


def _page_of(items: list[JsonDict], query: dict[str, list[str]], *, unstable: bool) -> JsonDict:
    """One page of a GET list: ``page`` from 1, ``limit`` 1..100 (default 50), and ``meta``."""

    def number(name: str, default: int, maximum: int | None) -> int:
        values = query.get(name)
        raw = values[-1] if values else ""
        if raw == "":
            return default
        try:
            value: int | None = int(raw)
        except ValueError:
            value = None
        if value is not None and value >= 1 and (maximum is None or value <= maximum):
            return value
        message = (
            f"{name} must be an integer from 1 to {maximum}, got {raw!r}"
            if maximum is not None
            else f"{name} must be a positive integer, got {raw!r}"
        )
        if unstable:
            raise _unstable_error(
                400, "invalid_query", f"Invalid query: {message}", issues=[_issue(name, message)]
            )
        raise _bad_request("Invalid request data", error=[_issue(name, message)])

    page = number("page", 1, None)
    limit = number("limit", _LIST_DEFAULT_LIMIT, _LIST_MAX_LIMIT)
    total = len(items)
    return {
        "data": copy.deepcopy(items[(page - 1) * limit : page * limit]),
        "meta": {
            "page": page,
            "limit": limit,
            "totalItems": total,
            "totalPages": math.ceil(total / limit),
        },
    }


def _finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _category_issues(categories: Any, path: str = "categories") -> list[JsonDict]:
    if not isinstance(categories, list) or not categories:
        return [_issue(path, _CATEGORIES_MESSAGE)]
    well_formed = all(
        isinstance(c, dict)
        and isinstance(c.get("label"), str)
        and c["label"]
        and _finite(c.get("value"))
        for c in categories
    )
    if not well_formed:
        return [_issue(path, _CATEGORIES_MESSAGE)]
    labels = [c["label"] for c in categories]
    values = [float(c["value"]) for c in categories]
    if len(set(labels)) != len(labels) or len(set(values)) != len(values):
        return [_issue(path, _CATEGORIES_MESSAGE)]
    return []


def _score_config_issues(body: Any) -> list[JsonDict]:
    """POST /api/public/score-configs: the server's rules per data type."""
    if not isinstance(body, dict):
        return [_issue("", "Expected object")]
    issues: list[JsonDict] = []
    name = body.get("name")
    if not isinstance(name, str) or not _SCORE_CONFIG_NAME_RE.fullmatch(name):
        issues.append(
            _issue(
                "name",
                "Name must be 1 to 35 letters, numbers, underscores, spaces, periods, "
                "parentheses or hyphens",
            )
        )
    data_type = body.get("dataType")
    if data_type not in _SCORE_CONFIG_TYPES:
        expected = " | ".join(f"'{t}'" for t in _SCORE_CONFIG_TYPES)
        return [*issues, _issue("dataType", f"Invalid discriminator value. Expected {expected}")]
    description = body.get("description")
    if description is not None and not isinstance(description, str):
        issues.append(_issue("description", "Expected string"))
    bounds: dict[str, Any] = {key: body.get(key) for key in ("minValue", "maxValue")}
    if data_type == "NUMERIC":
        for key, value in bounds.items():
            if value is not None and not _finite(value):
                issues.append(_issue(key, "Expected number"))
        low, high = bounds["minValue"], bounds["maxValue"]
        if _finite(low) and _finite(high) and float(high) <= float(low):
            issues.append(_issue("", "Maximum value must be greater than Minimum value"))
        if body.get("categories") is not None:
            issues.append(_issue("categories", "Categories are only for CATEGORICAL configs"))
    else:
        issues += [
            _issue(key, f"{key} is only for NUMERIC configs")
            for key, value in bounds.items()
            if value is not None
        ]
    if data_type == "CATEGORICAL":
        issues += _category_issues(body.get("categories"))
    elif data_type in ("BOOLEAN", "TEXT") and "categories" in body:
        issues.append(_issue("categories", f"Categories cannot be passed for {data_type} configs"))
    return issues


def _score_config_update_issues(body: Any, config: JsonDict) -> list[JsonDict]:
    """PATCH /api/public/score-configs/{id}: known keys only; the data type never changes."""
    if not isinstance(body, dict) or not any(key in body for key in _SCORE_CONFIG_UPDATE_KEYS):
        return [
            _issue(
                "",
                "Request body cannot be empty. At least one field must be provided for update.",
            )
        ]
    issues: list[JsonDict] = []
    if "isArchived" in body and not isinstance(body["isArchived"], bool):
        issues.append(_issue("isArchived", "Expected boolean"))
    if "name" in body and not (
        isinstance(body["name"], str) and _SCORE_CONFIG_NAME_RE.fullmatch(body["name"])
    ):
        issues.append(_issue("name", "Invalid name"))
    if "description" in body and not isinstance(body["description"], str):
        issues.append(_issue("description", "Expected string"))
    for key in ("minValue", "maxValue"):
        if key in body:
            if config["dataType"] != "NUMERIC":
                issues.append(_issue(key, f"{key} is only for NUMERIC configs"))
            elif not _finite(body[key]):
                issues.append(_issue(key, "Expected number"))
    if "categories" in body:
        if config["dataType"] != "CATEGORICAL":
            issues.append(_issue("categories", "Categories are only for CATEGORICAL configs"))
        else:
            issues += _category_issues(body["categories"])
    low: Any = body.get("minValue", config.get("minValue"))
    high: Any = body.get("maxValue", config.get("maxValue"))
    if not issues and _finite(low) and _finite(high) and float(high) <= float(low):
        issues.append(_issue("", "Maximum value must be greater than Minimum value"))
    return issues


def _new_score_config(body: JsonDict) -> JsonDict:
    data_type = body["dataType"]
    categories: Any = None
    if data_type == "BOOLEAN":  # the server makes these; a client may not send any
        categories = [{"label": "True", "value": 1}, {"label": "False", "value": 0}]
    elif data_type == "CATEGORICAL":
        categories = copy.deepcopy(body["categories"])
    now = _now_iso()
    numeric = data_type == "NUMERIC"
    return {
        "id": str(uuid.uuid4()),
        "name": body["name"],
        "createdAt": now,
        "updatedAt": now,
        "projectId": DEFAULT_PROJECT_ID,
        "dataType": data_type,
        "isArchived": False,
        "minValue": body.get("minValue") if numeric else None,
        "maxValue": body.get("maxValue") if numeric else None,
        "categories": categories,
        "description": body.get("description"),
    }


def _filter_value_ok(ftype: str, value: Any) -> bool:
    if ftype in ("string", "stringObject"):
        return isinstance(value, str)
    if ftype in ("number", "numberObject"):
        return _finite(value)
    if ftype == "datetime":
        if not isinstance(value, str):
            return False
        try:
            _parse_time(value)
        except ValueError:
            return False
        return True
    if ftype in ("boolean", "booleanObject"):
        return isinstance(value, bool)
    if ftype == "null":
        return value in ("", None)
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _check_filters(filters: Any, view: str | None, field: str) -> None:
    """Filters in Langfuse filter-state shape; with a view, columns must belong to it."""
    if not isinstance(filters, list):
        raise _invalid_body(field, "Expected array")
    for index, raw in enumerate(filters):
        where = f"{field}[{index}]"
        if not isinstance(raw, dict):
            raise _invalid_body(where, "Expected object")
        column, operator, ftype = raw.get("column"), raw.get("operator"), raw.get("type")
        if not isinstance(column, str) or not column:
            raise _invalid_body(f"{where}.column", "Required")
        if ftype not in _FILTER_OPERATORS:
            raise _invalid_body(f"{where}.type", f"Invalid filter type {ftype!r}")
        if operator not in _FILTER_OPERATORS[ftype]:
            raise _invalid_body(
                f"{where}.operator", f"Operator {operator!r} is not valid for type {ftype!r}"
            )
        if not _filter_value_ok(ftype, raw.get("value")):
            raise _invalid_body(f"{where}.value", f"Invalid value for type {ftype!r}")
        if (ftype.endswith("Object") or ftype == "categoryOptions") and not (
            isinstance(raw.get("key"), str) and raw["key"]
        ):
            raise _invalid_body(f"{where}.key", f"Filters of type {ftype!r} need a key")
        if view is not None:
            allowed = _WIDGET_VIEWS[view][0] | _FILTER_ONLY_COLUMNS
            if column not in allowed:
                raise _unstable_error(
                    400,
                    "invalid_request",
                    f'Unsupported filter column for view "{view}": {column}',
                    field="filters",
                )


def _new_widget(body: Any) -> JsonDict:  # noqa: C901 - the server's checks, one branch each
    """POST /api/public/unstable/dashboard-widgets: the body checked as the server does."""
    if not isinstance(body, dict):
        raise _invalid_body("body", "Expected object")
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise _invalid_body("name", "Widget name is required")
    description = body.get("description")
    if description is not None and not isinstance(description, str):
        raise _invalid_body("description", "Expected string")
    view = body.get("view")
    if view not in _WIDGET_VIEWS:
        raise _invalid_body("view", f"Expected one of {', '.join(_WIDGET_VIEWS)}")
    chart_type = body.get("chartType")
    if chart_type not in _WIDGET_CHART_TYPES:
        raise _invalid_body("chartType", f"Expected one of {', '.join(_WIDGET_CHART_TYPES)}")
    dimensions, metrics = body.get("dimensions"), body.get("metrics")
    if not isinstance(dimensions, list) or not all(
        isinstance(d, dict) and isinstance(d.get("field"), str) and d["field"] for d in dimensions
    ):
        raise _invalid_body("dimensions", "Expected an array of {field}")
    if (
        not isinstance(metrics, list)
        or not metrics
        or not all(
            isinstance(m, dict) and isinstance(m.get("measure"), str) and m["measure"]
            for m in metrics
        )
    ):
        raise _invalid_body("metrics", "Expected a non-empty array of {measure, agg}")
    _check_filters(body.get("filters"), view, "filters")
    chart_config = body.get("chartConfig")
    if chart_config is None:
        chart_config = {}
    if not isinstance(chart_config, dict):
        raise _invalid_body("chartConfig", "Expected object")
    if chart_config.get("type", chart_type) != chart_type:
        raise _unstable_error(
            400,
            "invalid_request",
            "chartConfig.type must match chartType",
            field="chartConfig.type",
        )
    allowed_dimensions, allowed_measures = _WIDGET_VIEWS[view]
    for index, dimension in enumerate(dimensions):
        if dimension["field"] not in allowed_dimensions:
            raise _unstable_error(
                400,
                "invalid_request",
                f'Dimension "{dimension["field"]}" is not available for view "{view}"',
                field=f"dimensions[{index}].field",
                allowedValues=sorted(allowed_dimensions),
            )
    for index, metric in enumerate(metrics):
        if metric["measure"] not in allowed_measures:
            raise _unstable_error(
                400,
                "invalid_request",
                f'Measure "{metric["measure"]}" is not available for view "{view}"',
                field=f"metrics[{index}].measure",
                allowedValues=sorted(allowed_measures),
            )
        if metric.get("agg") not in _WIDGET_AGGREGATIONS:
            raise _unstable_error(
                400,
                "invalid_request",
                f'Aggregation {metric.get("agg")!r} is not valid for measure "{metric["measure"]}"',
                field=f"metrics[{index}].agg",
                allowedValues=list(_WIDGET_AGGREGATIONS),
            )
    if chart_type != "PIVOT_TABLE" and len(dimensions) > 1:
        raise _unstable_error(
            400,
            "invalid_request",
            "Only pivot table widgets can have multiple dimensions",
            field="dimensions",
        )
    now = _now_iso()
    return {
        "id": str(uuid.uuid4()),
        "createdAt": now,
        "updatedAt": now,
        "name": name,
        "description": description or "",
        "view": view,
        "dimensions": [{"field": d["field"]} for d in dimensions],
        "metrics": [{"measure": m["measure"], "agg": m["agg"]} for m in metrics],
        "filters": copy.deepcopy(body["filters"]),
        "chartType": chart_type,
        "chartConfig": {
            "type": chart_type,
            **{k: chart_config[k] for k in _CHART_OPTIONS if chart_config.get(k) is not None},
        },
    }
