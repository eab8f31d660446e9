"""`observer init-langfuse`: score configs for every score observer writes, and a dashboard.

The pure part says what should exist:

- `SCORE_CONFIGS`: one score config per score name observer can write (the names
  of `observer.scores` and `observer.judge.outcome`, in that order), with the data
  type and range of docs/scores.md; the categories of `crag_grade` and
  `confidence_band` come from `Grade` and `Band`, numbered worst first (LOW = 0).
- `WIDGETS` and `DASHBOARD_NAME`: the dashboard "observer: answer quality" and its
  widgets, in the schema of Langfuse's unstable dashboards API (v4.16 spec).

`init_langfuse(api)` makes it so, idempotently, and returns a `SetupReport` that
says per object what it found and did: created, existed (unchanged), differs
(an existing object of that name with another type, range or definition: left as
it is, never duplicated), refused (the server's 4xx and its message) or failed
(Langfuse unreachable, rate limited for too long, or the keys rejected: the run
stops there and says what it did not attempt).

- Objects are matched by name: score configs among the project's configs (an
  archived config of another shape does not block a new one; archiving is how
  Langfuse retires a config, which cannot change its data type), the dashboard
  and the widgets among the project's dashboards and widgets. An existing
  dashboard gets the widgets missing from it appended; nothing else is edited.
- Score configs go through the SDK's generated client (`api.score_configs`).
  The dashboards API goes through the SDK client's own HTTP layer (its base URL,
  Basic auth, headers and timeout), not the generated `api.unstable` clients:
  those read most error bodies as `PublicApiError`, whose `code` enum (SDK 5.0.4)
  lacks codes of the v4.16 spec, and a body without that envelope (the 404 of a
  server that has no dashboards API, on create) raises pydantic's ValidationError
  instead of `ApiError`, losing the status and the server's message.
- 403 from the dashboards API is a refusal (a plan or a role without dashboards;
  the keys were just proven on the score configs), 403 from the score configs
  API is a rejection of the keys, as everywhere in observer.
- 429 waits `Retry-After` (at most 60 s, 5 s without the header) and tries
  again, three tries in all; nothing else is retried: running it again is safe.
"""

from __future__ import annotations

import functools
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Literal, TypeVar

import pydantic
from langfuse.api.client import LangfuseAPI
from langfuse.api.commons.types.config_category import ConfigCategory
from langfuse.api.commons.types.score_config import ScoreConfig
from langfuse.api.commons.types.score_config_data_type import ScoreConfigDataType
from langfuse.api.core.api_error import ApiError
from langfuse.api.score_configs.types.score_configs import ScoreConfigs

from observer.errors import AuthRejected, RateLimited, Rejected, RemoteError, UsageSuspended
from observer.judge.outcome import JUDGE_SCORE_NAMES
from observer.langfuse_api import NO_RETRIES, translate
from observer.model import Band, Grade, ScoreDataType
from observer.resolver.scores import RESOLVER_SCORE_NAMES
from observer.scores import SIGNAL_SCORE_NAMES

__all__ = [
    "DASHBOARD_NAME",
    "EXIT_ATTENTION",
    "SCORE_CONFIGS",
    "SCORE_NAMES",
    "WIDGETS",
    "Category",
    "ExistingConfig",
    "Outcome",
    "ScoreConfigSpec",
    "SetupItem",
    "SetupReport",
    "WidgetSpec",
    "config_difference",
    "decide_config",
    "init_langfuse",
    "list_score_configs",
    "placements",
    "widget_difference",
]

# -- what should exist (pure) --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Category:
    label: str
    value: float


def _shape(
    data_type: str,
    min_value: float | None,
    max_value: float | None,
    categories: Sequence[Category],
) -> str:
    """A config's type and range in one phrase: `NUMERIC 0..1`, `CATEGORICAL LOW=0, HIGH=1`."""
    if data_type == "NUMERIC":
        low = "" if min_value is None else f"{min_value:g}"
        high = "" if max_value is None else f"{max_value:g}"
        if low and high:
            return f"NUMERIC {low}..{high}"
        if low:
            return f"NUMERIC >= {low}"
        return f"NUMERIC <= {high}" if high else "NUMERIC"
    if data_type == "CATEGORICAL":
        labels = ", ".join(f"{c.label}={c.value:g}" for c in categories)
        return f"CATEGORICAL {labels}"
    return data_type


@dataclass(frozen=True, slots=True)
class ScoreConfigSpec:
    """One score config as POST /api/public/score-configs wants it."""

    name: str
    data_type: ScoreDataType
    description: str
    min_value: float | None = None
    max_value: float | None = None
    categories: tuple[Category, ...] = ()

    @property
    def shape(self) -> str:
        return _shape(self.data_type, self.min_value, self.max_value, self.categories)

    def body(self) -> dict[str, Any]:
        """The CreateScoreConfigRequest: only the keys its data type allows (BOOLEAN has no
        categories: Langfuse makes True=1 and False=0 itself and refuses any sent)."""
        body: dict[str, Any] = {
            "name": self.name,
            "dataType": self.data_type,
            "description": self.description,
        }
        if self.data_type == "NUMERIC":
            if self.min_value is not None:
                body["minValue"] = self.min_value
            if self.max_value is not None:
                body["maxValue"] = self.max_value
        if self.data_type == "CATEGORICAL":
            body["categories"] = [{"label": c.label, "value": c.value} for c in self.categories]
        return body


def _ratio(name: str, description: str) -> ScoreConfigSpec:
    return ScoreConfigSpec(name, "NUMERIC", description, min_value=0.0, max_value=1.0)


def _flag(name: str, description: str) -> ScoreConfigSpec:
    return ScoreConfigSpec(name, "BOOLEAN", description)


def _ordinal(name: str, worst_first: Sequence[str], description: str) -> ScoreConfigSpec:
    categories = tuple(Category(str(label), float(i)) for i, label in enumerate(worst_first))
    return ScoreConfigSpec(name, "CATEGORICAL", description, categories=categories)


# Category values: worst first, so an average or a threshold on the value reads "higher is better".
GRADE_ORDER: Final = (Grade.LOW, Grade.AMBIGUOUS, Grade.HIGH)
BAND_ORDER: Final = (Band.LOW, Band.MEDIUM, Band.HIGH)

_SPECS: Final[dict[str, ScoreConfigSpec]] = {
    spec.name: spec
    for spec in (
        _ratio("confidence", "observer: citation coverage x rerank top1 of the answer"),
        _ratio(
            "citation_coverage",
            "observer: share of the answer's substantive sentences that cite a source",
        ),
        _ratio("rerank_top1", "observer: best retrieval score of the answer's sources, 0..1"),
        _ordinal("crag_grade", GRADE_ORDER, "observer: retrieval grade (CRAG rules), LOW to HIGH"),
        _flag("ungrounded", "observer: 1 when retrieval is LOW and no substantive sentence cites"),
        _ordinal("confidence_band", BAND_ORDER, "observer: confidence band, LOW to HIGH"),
        ScoreConfigSpec(
            "invalid_citations",
            "NUMERIC",
            "observer: count of distinct ghost references (citations of missing sources)",
            min_value=0.0,
        ),
        _ratio(
            "numeric_grounding",
            "observer: numbers of the answer found in its cited sources / numbers",
        ),
        _ratio(
            "citation_concentration",
            "observer: share of cited sentences resting on the single most-cited document",
        ),
        ScoreConfigSpec(
            "missing_chunks",
            "NUMERIC",
            "observer: cited chunks no longer in the vector store (citation resolver)",
            min_value=0.0,
        ),
        ScoreConfigSpec(
            "stale_citations",
            "NUMERIC",
            "observer: cited chunks whose text changed since the answer (citation resolver)",
            min_value=0.0,
        ),
        _ratio("faithfulness", "observer's judge: claims supported by the context / claims"),
        _ratio(
            "citation_accuracy",
            "observer's judge: cited claims supported by their own citations / cited claims",
        ),
        _flag(
            "critical_unsupported",
            "observer's judge: 1 when a claim with a number, date or amount is unsupported",
        ),
        _flag("abstained", "observer's judge: 1 when the answer makes no factual claim"),
    )
}

# Every score name observer can write; tests hold that each one has a config.
SCORE_NAMES: Final[tuple[str, ...]] = (
    *SIGNAL_SCORE_NAMES,
    *RESOLVER_SCORE_NAMES,
    *JUDGE_SCORE_NAMES,
)
SCORE_CONFIGS: Final[tuple[ScoreConfigSpec, ...]] = tuple(
    _SPECS[name] for name in SCORE_NAMES if name in _SPECS
)

_VIEW_OF: Final[dict[str, str]] = {
    "NUMERIC": "scores-numeric",
    "BOOLEAN": "scores-boolean",  # `avg` of `value` is the true-rate
    "CATEGORICAL": "scores-categorical",
}


@dataclass(frozen=True, slots=True)
class WidgetSpec:
    """One chart over one of observer's scores, as POST .../dashboard-widgets wants it."""

    key: str  # its placement id on observer's dashboard is "observer-<key>"
    name: str
    description: str
    score: str
    measure: str
    agg: str
    chart_type: str
    breakdown: str | None = None  # a dimension: one series per value

    @property
    def view(self) -> str:
        return _VIEW_OF[_SPECS[self.score].data_type]

    @property
    def summary(self) -> str:
        per = f" per {self.breakdown}" if self.breakdown else ""
        return f"{self.agg}({self.measure}) of {self.score}{per}, {self.chart_type}"

    def body(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "view": self.view,
            "dimensions": [{"field": self.breakdown}] if self.breakdown else [],
            "metrics": [{"measure": self.measure, "agg": self.agg}],
            "filters": [
                {
                    "column": "name",
                    "operator": "any of",
                    "type": "stringOptions",
                    "value": [self.score],
                }
            ],
            "chartType": self.chart_type,
        }


def _average(key: str, score: str, title: str, description: str) -> WidgetSpec:
    return WidgetSpec(
        key, f"observer: {title}", description, score, "value", "avg", "LINE_TIME_SERIES"
    )


def _counts(key: str, score: str, title: str, description: str) -> WidgetSpec:
    return WidgetSpec(
        key,
        f"observer: {title}",
        description,
        score,
        "count",
        "count",
        "BAR_TIME_SERIES",
        breakdown="stringValue",
    )


DASHBOARD_NAME: Final = "observer: answer quality"
DASHBOARD_DESCRIPTION: Final = (
    "Answer quality as observer scores it (confidence, citations, retrieval grade, and the "
    "judge's faithfulness). Made by `observer init-langfuse`; see observer's docs/scores.md."
)
# Two tiles a row, in this order.
WIDGETS: Final[tuple[WidgetSpec, ...]] = (
    _average("confidence", "confidence", "confidence (average)", "Average confidence per time."),
    _average(
        "citation-coverage",
        "citation_coverage",
        "citation coverage (average)",
        "Average share of substantive sentences that cite a source.",
    ),
    _average(
        "faithfulness",
        "faithfulness",
        "faithfulness (average)",
        "Average share of claims the context supports (judged answers).",
    ),
    _average(
        "citation-accuracy",
        "citation_accuracy",
        "citation accuracy (average)",
        "Average share of cited claims their own citations support (judged answers).",
    ),
    _average(
        "ungrounded",
        "ungrounded",
        "ungrounded rate",
        "Share of answers with LOW retrieval and no cited substantive sentence.",
    ),
    _average(
        "critical-unsupported",
        "critical_unsupported",
        "critical unsupported rate",
        "Share of judged answers with an unsupported number, date or amount.",
    ),
    _counts("crag-grade", "crag_grade", "CRAG grade", "Answers per retrieval grade."),
    _counts(
        "confidence-band", "confidence_band", "confidence band", "Answers per confidence band."
    ),
)
_TILE: Final = 6  # a 6x6 tile is half the 12-column grid, the UI's default


def placements(widgets: Sequence[tuple[WidgetSpec, str]]) -> list[dict[str, Any]]:
    """The dashboard's grid: (spec, widget id) pairs as two 6x6 tiles a row."""
    return [
        {
            "type": "widget",
            "id": f"observer-{spec.key}",
            "widgetId": widget_id,
            "x": (i % 2) * _TILE,
            "y": (i // 2) * _TILE,
            "width": _TILE,
            "height": _TILE,
        }
        for i, (spec, widget_id) in enumerate(widgets)
    ]


# -- comparing with what exists (pure) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExistingConfig:
    """A score config as Langfuse lists it, reduced to what the comparison needs."""

    id: str
    name: str
    data_type: str
    min_value: float | None = None
    max_value: float | None = None
    categories: tuple[Category, ...] = ()
    archived: bool = False

    @classmethod
    def of(cls, config: ScoreConfig) -> ExistingConfig:
        return cls(
            id=config.id,
            name=config.name,
            data_type=str(config.data_type),
            min_value=config.min_value,
            max_value=config.max_value,
            categories=tuple(Category(c.label, float(c.value)) for c in config.categories or ()),
            archived=config.is_archived,
        )

    @property
    def shape(self) -> str:
        return _shape(self.data_type, self.min_value, self.max_value, self.categories)


def config_difference(spec: ScoreConfigSpec, existing: ExistingConfig) -> str | None:
    """None when the existing config fits observer's scores, else what differs and what to do.

    The description is not compared (it is only text), nor BOOLEAN categories (Langfuse's own).
    """
    was = f"is {existing.shape}, observer writes {spec.shape}"
    if existing.data_type != spec.data_type:
        return (
            f"{was}; a score config cannot change its data type: archive it in Langfuse "
            "(Settings > Scores) and run init-langfuse again"
        )
    same = True
    if spec.data_type == "NUMERIC":
        same = (existing.min_value, existing.max_value) == (spec.min_value, spec.max_value)
    elif spec.data_type == "CATEGORICAL":
        same = set(existing.categories) == set(spec.categories)
    if same:
        return None
    return f"{was}; left as it is: change it in Langfuse, or archive it and run init-langfuse again"


def decide_config(
    spec: ScoreConfigSpec, existing: Sequence[ExistingConfig]
) -> tuple[Outcome, str, str] | None:
    """What to report for `spec` given the configs of its name; None: create it."""
    active = [c for c in existing if not c.archived]
    for config in active:
        if config_difference(spec, config) is None:
            return Outcome.EXISTED, f"{spec.shape}, unchanged", config.id
    if active:
        difference = config_difference(spec, active[0])
        assert difference is not None
        return Outcome.DIFFERS, difference, active[0].id
    for config in existing:  # archived only
        if config_difference(spec, config) is None:
            return Outcome.EXISTED, f"{spec.shape}, archived in Langfuse: left archived", config.id
    return None


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def widget_difference(spec: WidgetSpec, existing: dict[str, Any]) -> list[str]:
    """The fields in which an existing widget of the same name differs from `spec`."""
    want = spec.body()

    def fields(widget: dict[str, Any]) -> dict[str, Any]:
        dimensions = widget.get("dimensions") or []
        metrics = widget.get("metrics") or []
        filters = widget.get("filters") or []
        return {
            "view": widget.get("view"),
            "chartType": widget.get("chartType"),
            "dimensions": [d.get("field") for d in dimensions if isinstance(d, dict)],
            "metrics": [(m.get("measure"), m.get("agg")) for m in metrics if isinstance(m, dict)],
            "filters": sorted(
                _json({k: f.get(k) for k in ("column", "operator", "type", "value", "key")})
                for f in filters
                if isinstance(f, dict)
            ),
        }

    got = fields(existing)
    return [key for key, value in fields(want).items() if got[key] != value]


# -- the report ----------------------------------------------------------------------------------


class Outcome(StrEnum):
    CREATED = "created"
    EXISTED = "existed"
    DIFFERS = "differs"
    REFUSED = "refused"
    FAILED = "failed"


Kind = Literal["score config", "dashboard", "widget"]

# The exit codes of observer.app (0, 3, 4), and 1: done, but something needs a look.
EXIT_OK: Final = 0
EXIT_ATTENTION: Final = 1
EXIT_UNREACHABLE: Final = 3
EXIT_AUTH: Final = 4


@dataclass(frozen=True, slots=True)
class SetupItem:
    kind: Kind
    name: str
    outcome: Outcome
    detail: str
    id: str | None = None  # the object's Langfuse id, when known
    attempted: bool = True  # False: the run stopped before it (outcome FAILED)


@dataclass(frozen=True, slots=True)
class SetupReport:
    """Every object init-langfuse sees to, in order: score configs, widgets, the dashboard."""

    items: tuple[SetupItem, ...]
    error: RemoteError | None = None  # what stopped the run early, if anything

    def item(self, kind: Kind, name: str) -> SetupItem:
        return next(i for i in self.items if i.kind == kind and i.name == name)

    def of(self, outcome: Outcome) -> tuple[SetupItem, ...]:
        return tuple(i for i in self.items if i.outcome is outcome)

    @property
    def created(self) -> tuple[SetupItem, ...]:
        return self.of(Outcome.CREATED)

    @property
    def exit_code(self) -> int:
        """4 keys rejected, 3 unreachable (or rate limited), 1 something refused or differing,
        0 everything created or existing."""
        if isinstance(self.error, AuthRejected):
            return EXIT_AUTH
        if self.error is not None:
            return EXIT_UNREACHABLE
        if self.of(Outcome.REFUSED) or self.of(Outcome.DIFFERS):
            return EXIT_ATTENTION
        return EXIT_OK

    @property
    def summary(self) -> str:
        counts = [f"{len(self.of(o))} {o.value}" for o in Outcome if self.of(o)]
        return ", ".join(counts) or "nothing to do"

    def lines(self) -> list[str]:
        """Plain text, one line per attempted object, then what was not attempted and why.

        Server messages may hold brackets: print without markup (rich: `markup=False`).
        """
        out = [
            f"{i.outcome.value:<8} {i.kind:<12} {i.name}: {i.detail}"
            for i in self.items
            if i.attempted
        ]
        skipped = Counter(i.kind for i in self.items if not i.attempted)
        if skipped:
            kinds = ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in skipped.items())
            out.append(f"{Outcome.FAILED.value:<8} not attempted: {kinds}")
        if self.error is not None:
            out.append(f"stopped: {_stop_reason(self.error)}")
        out.append(self.summary)
        return out


def _stop_reason(error: RemoteError) -> str:
    if isinstance(error, UsageSuspended):
        return f"usage limit: {error}"
    if isinstance(error, AuthRejected):
        return f"keys rejected: {error}"
    if isinstance(error, RateLimited):
        return f"rate limited too long: {error}"
    return f"Langfuse unreachable: {error}"


# -- talking to Langfuse --------------------------------------------------------------------

_SCORE_CONFIGS_LIST: Final = "listing score configs"
_DASHBOARDS: Final = "api/public/unstable/dashboards"
_WIDGETS: Final = "api/public/unstable/dashboard-widgets"
_PAGE_LIMIT: Final = 100  # the API's maximum
_MAX_PAGES: Final = 1000
_RATE_LIMIT_WAIT_S: Final = 5.0
_RATE_LIMIT_MAX_WAIT_S: Final = 60.0
_NO_DASHBOARDS_API: Final = (
    "this Langfuse has no dashboards API (an older server?); the score configs do not need it"
)

T = TypeVar("T")


def _server_message(body: Any) -> str:
    """The server's own words from an error body: message and the first issues, one line."""
    if isinstance(body, dict):
        parts = [str(body.get("message") or "").strip()]
        issues = body.get("error")
        details = body.get("details")
        if not isinstance(issues, list) and isinstance(details, dict):
            issues = details.get("issues")
            if details.get("field"):
                parts.append(f"field {details['field']}")
        if isinstance(issues, list):
            for issue in issues[:3]:
                if isinstance(issue, dict):
                    path = ".".join(str(p) for p in issue.get("path") or ())
                    text = str(issue.get("message") or "")
                    parts.append(f"{path}: {text}" if path else text)
        text = "; ".join(p for p in parts if p)
    elif isinstance(body, str):
        text = "(an HTML page)" if body.lstrip().startswith("<") else body
    else:
        text = "" if body is None else str(body)
    text = " ".join(text.split())
    return text[:300] or "no message"


def _remote(error: Exception, what: str, *, forbidden_refuses: bool = False) -> RemoteError:
    """observer's error for `error`: a 4xx the request itself caused is Rejected, with the
    server's message; the rest as `translate` says (never the keys). A suspended project
    (403 "Usage threshold exceeded") is UsageSuspended on every route."""
    if isinstance(error, ApiError):
        status = error.status_code or 0
        refusal = 400 <= status < 500 and status not in (401, 403, 408, 409, 429)
        forbidden = status == 403 and forbidden_refuses
        if refusal or (forbidden and not isinstance(translate(error, what), UsageSuspended)):
            return Rejected(
                f"{what}: Langfuse answered {status}: {_server_message(error.body)}", status
            )
    if isinstance(error, pydantic.ValidationError):
        return Rejected(f"{what}: an answer the SDK cannot read: {error.error_count()} errors")
    return translate(error, what)


def _items_of(body: Any, what: str) -> tuple[list[dict[str, Any]], int]:
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise Rejected(f"{what}: Langfuse answered without a data list")
    meta = body.get("meta")
    pages = meta.get("totalPages") if isinstance(meta, dict) else None
    data = [d for d in body["data"] if isinstance(d, dict)]
    return data, pages if isinstance(pages, int) else 1


class _Setup:
    """One run: the decisions so far, keyed by (kind, name)."""

    def __init__(self, api: LangfuseAPI, sleep: Callable[[float], None], tries: int) -> None:
        self._api = api
        self._http = api._client_wrapper.httpx_client
        self._sleep = sleep
        self._tries = max(1, tries)
        self._items: dict[tuple[Kind, str], SetupItem] = {}
        self._current: tuple[Kind, str] | None = None
        self._unplaced: set[str] = set()  # widgets still to place on the existing dashboard

    # plumbing

    def _set(
        self, kind: Kind, name: str, outcome: Outcome, detail: str, object_id: str | None = None
    ) -> None:
        self._items[(kind, name)] = SetupItem(kind, name, outcome, detail, object_id)
        self._current = None

    def _retrying(self, call: Callable[[], T]) -> T:
        """`call` (which raises RemoteError), tried again after each 429 up to `tries` times."""
        attempt = 1
        while True:
            try:
                return call()
            except RateLimited as error:
                if attempt >= self._tries:
                    raise
                wait = _RATE_LIMIT_WAIT_S if error.retry_after_s is None else error.retry_after_s
                self._sleep(min(wait, _RATE_LIMIT_MAX_WAIT_S))
                attempt += 1

    def _sdk(self, what: str, call: Callable[[], T]) -> T:
        def once() -> T:
            try:
                return call()
            except Exception as error:
                raise _remote(error, what) from None

        return self._retrying(once)

    def _unstable(
        self,
        method: str,
        path: str,
        what: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        """One request to the unstable dashboards API through the SDK client's HTTP layer."""

        def once() -> Any:
            try:
                response = self._http.request(
                    path, method=method, params=params, json=body, request_options=NO_RETRIES
                )
            except Exception as error:
                raise translate(error, what) from None
            try:
                parsed: Any = response.json()
            except ValueError:
                parsed = response.text[:500]
            if not 200 <= response.status_code < 300:
                api_error = ApiError(
                    status_code=response.status_code, headers=dict(response.headers), body=parsed
                )
                raise _remote(api_error, what, forbidden_refuses=True)
            return parsed

        return self._retrying(once)

    def _unstable_list(self, path: str, what: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for page in range(1, _MAX_PAGES + 1):
            body = self._unstable("GET", path, what, params={"page": page, "limit": _PAGE_LIMIT})
            data, pages = _items_of(body, what)
            items += data
            if not data or page >= pages:
                break
        return items

    # score configs

    def configs(self) -> None:
        try:
            existing = self._existing_configs()
        except Rejected as error:
            for spec in SCORE_CONFIGS:
                self._set("score config", spec.name, Outcome.REFUSED, str(error))
            return
        for spec in SCORE_CONFIGS:
            self._config(spec, [c for c in existing if c.name == spec.name])

    def _existing_configs(self) -> list[ExistingConfig]:
        return list_score_configs(self._api, lambda call: self._sdk(_SCORE_CONFIGS_LIST, call))

    def _config(self, spec: ScoreConfigSpec, existing: list[ExistingConfig]) -> None:
        decided = decide_config(spec, existing)
        if decided is not None:
            outcome, detail, config_id = decided
            self._set("score config", spec.name, outcome, detail, config_id)
            return
        self._current = ("score config", spec.name)
        extra: dict[str, Any] = {}
        if spec.min_value is not None:
            extra["min_value"] = spec.min_value
        if spec.max_value is not None:
            extra["max_value"] = spec.max_value
        if spec.categories:
            extra["categories"] = [
                ConfigCategory(label=c.label, value=c.value) for c in spec.categories
            ]
        try:
            created = self._sdk(
                f"creating score config {spec.name}",
                lambda: self._api.score_configs.create(
                    name=spec.name,
                    data_type=ScoreConfigDataType(spec.data_type),
                    description=spec.description,
                    request_options=NO_RETRIES,
                    **extra,
                ),
            )
        except Rejected as error:
            self._set("score config", spec.name, Outcome.REFUSED, str(error))
            return
        note = " (beside an archived config of another shape)" if existing else ""
        self._set("score config", spec.name, Outcome.CREATED, spec.shape + note, created.id)

    # the dashboard and its widgets

    def dashboard(self) -> None:
        try:
            boards = self._unstable_list(_DASHBOARDS, "listing dashboards")
            widgets = self._unstable_list(_WIDGETS, "listing dashboard widgets")
        except Rejected as error:
            detail = str(error) + (f"; {_NO_DASHBOARDS_API}" if error.status == 404 else "")
            self._set("dashboard", DASHBOARD_NAME, Outcome.REFUSED, detail)
            for spec in WIDGETS:
                self._set("widget", spec.name, Outcome.REFUSED, "the dashboards API refused")
            return
        board = next((b for b in boards if b.get("name") == DASHBOARD_NAME), None)
        placed = _placed_widget_ids(board) if board is not None else set()
        usable: list[tuple[WidgetSpec, str]] = []
        for spec in WIDGETS:
            widget_id = self._widget(spec, widgets, placed)
            if widget_id is not None:
                usable.append((spec, widget_id))
        if board is None:
            self._create_dashboard(usable)
        else:
            self._complete_dashboard(board, usable, placed)

    def _widget(
        self, spec: WidgetSpec, widgets: list[dict[str, Any]], placed: set[str]
    ) -> str | None:
        """The id of the widget to show for `spec` (an existing one or a new one), or None."""
        named = [w for w in widgets if w.get("name") == spec.name and isinstance(w.get("id"), str)]
        existing = next((w for w in named if w["id"] in placed), named[0] if named else None)
        if existing is not None:
            differs = widget_difference(spec, existing)
            if differs:
                detail = f"exists with another {', '.join(differs)}; left as it is"
                self._set("widget", spec.name, Outcome.DIFFERS, detail, existing["id"])
            else:
                self._set("widget", spec.name, Outcome.EXISTED, "unchanged", existing["id"])
            return str(existing["id"])
        self._current = ("widget", spec.name)
        try:
            created = self._unstable(
                "POST", _WIDGETS, f"creating widget {spec.name}", body=spec.body()
            )
        except Rejected as error:
            self._set("widget", spec.name, Outcome.REFUSED, str(error))
            return None
        widget_id = created.get("id") if isinstance(created, dict) else None
        if not isinstance(widget_id, str):
            self._set("widget", spec.name, Outcome.REFUSED, "Langfuse answered without an id")
            return None
        self._set("widget", spec.name, Outcome.CREATED, spec.summary, widget_id)
        return widget_id

    def _create_dashboard(self, usable: list[tuple[WidgetSpec, str]]) -> None:
        self._current = ("dashboard", DASHBOARD_NAME)
        body = {
            "name": DASHBOARD_NAME,
            "description": DASHBOARD_DESCRIPTION,
            "definition": {"widgets": placements(usable)},
            "filters": [],
        }
        try:
            created = self._unstable("POST", _DASHBOARDS, "creating the dashboard", body=body)
        except Rejected as error:
            self._set("dashboard", DASHBOARD_NAME, Outcome.REFUSED, str(error))
            return
        board_id = created.get("id") if isinstance(created, dict) else None
        detail = f"with {len(usable)} of {len(WIDGETS)} widgets"
        self._set("dashboard", DASHBOARD_NAME, Outcome.CREATED, detail, board_id)

    def _complete_dashboard(
        self, board: dict[str, Any], usable: list[tuple[WidgetSpec, str]], placed: set[str]
    ) -> None:
        """An existing dashboard keeps its layout; widgets missing from it are appended."""
        board_id = str(board.get("id"))
        self._set("dashboard", DASHBOARD_NAME, Outcome.EXISTED, "unchanged", board_id)
        self._unplaced = {spec.name for spec, widget_id in usable if widget_id not in placed}
        added = 0
        for spec, widget_id in usable:
            if widget_id in placed:
                continue
            self._unplaced.discard(spec.name)
            before = self._items[("widget", spec.name)]
            self._current = ("widget", spec.name)
            try:
                self._unstable(
                    "POST",
                    f"{_DASHBOARDS}/{board_id}/placements",
                    f"placing widget {spec.name}",
                    body={"type": "widget", "widgetId": widget_id},
                )
            except Rejected as error:
                self._set("widget", spec.name, Outcome.REFUSED, str(error), widget_id)
                continue
            outcome = Outcome.CREATED if before.outcome is Outcome.EXISTED else before.outcome
            detail = f"{before.detail}; placed on the existing dashboard"
            self._set("widget", spec.name, outcome, detail, widget_id)
            added += 1
        detail = f"{added} widgets added to it" if added else "unchanged"
        self._set("dashboard", DASHBOARD_NAME, Outcome.EXISTED, detail, board_id)

    # the report

    def report(self, error: RemoteError | None) -> SetupReport:
        planned: list[tuple[Kind, str]] = [("score config", s.name) for s in SCORE_CONFIGS]
        planned += [*(("widget", w.name) for w in WIDGETS), ("dashboard", DASHBOARD_NAME)]
        items: list[SetupItem] = []
        for kind, name in planned:
            item = self._items.get((kind, name))
            if (kind, name) == self._current and error is not None:
                object_id = item.id if item is not None else None
                item = SetupItem(kind, name, Outcome.FAILED, str(error), object_id)
            elif item is not None and kind == "widget" and name in self._unplaced:
                detail = f"{item.detail}; not placed on the dashboard: the run stopped"
                item = SetupItem(kind, name, item.outcome, detail, item.id)
            if item is None:
                item = SetupItem(kind, name, Outcome.FAILED, "not attempted", attempted=False)
            items.append(item)
        return SetupReport(tuple(items), error)


def _one_page(call: Callable[[], ScoreConfigs]) -> ScoreConfigs:
    try:
        return call()
    except Exception as error:
        raise _remote(error, _SCORE_CONFIGS_LIST) from None


def list_score_configs(
    api: LangfuseAPI,
    fetch: Callable[[Callable[[], ScoreConfigs]], ScoreConfigs] = _one_page,
) -> list[ExistingConfig]:
    """Every score config of the project, archived ones included, page by page
    (`GET /api/public/score-configs`, 100 a page). `fetch(call)` makes one page's request
    (`call()`) and raises a RemoteError: by default once, translated; the caller may wrap
    it in a rate limiter or retries."""
    configs: list[ExistingConfig] = []
    for page in range(1, _MAX_PAGES + 1):
        result = fetch(
            functools.partial(
                api.score_configs.get, page=page, limit=_PAGE_LIMIT, request_options=NO_RETRIES
            )
        )
        configs += [ExistingConfig.of(c) for c in result.data]
        if not result.data or page >= result.meta.total_pages:
            break
    return configs


def _placed_widget_ids(board: dict[str, Any]) -> set[str]:
    definition = board.get("definition")
    tiles = definition.get("widgets") if isinstance(definition, dict) else None
    return {
        str(tile["widgetId"])
        for tile in tiles or ()
        if isinstance(tile, dict) and tile.get("widgetId") is not None
    }


def init_langfuse(
    api: LangfuseAPI,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rate_limit_tries: int = 3,
) -> SetupReport:
    """Create what is missing of observer's score configs and dashboard; report everything.

    Never raises for Langfuse's answers: an unreachable server, rejected keys or a 429
    that outlasts `rate_limit_tries` stop the run and land in `SetupReport.error`.
    """
    run = _Setup(api, sleep, rate_limit_tries)
    try:
        run.configs()
        run.dashboard()
    except RemoteError as error:
        return run.report(error)
    return run.report(None)
