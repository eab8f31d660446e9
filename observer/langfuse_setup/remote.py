"""init-langfuse's I/O: the calls to Langfuse, and the run that makes what is missing.

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
- Every call is on `observer.retry`'s policy, retrying 429 only: it waits
  `Retry-After` (5 s without the header), three tries in all; a `Retry-After`
  over 60 s stops the run at once (rate limited too long). Nothing else is
  retried: running init-langfuse again is safe.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

import pydantic
from langfuse.api.client import LangfuseAPI
from langfuse.api.commons.types.config_category import ConfigCategory
from langfuse.api.commons.types.score_config_data_type import ScoreConfigDataType
from langfuse.api.core.api_error import ApiError
from langfuse.api.score_configs.types.score_configs import ScoreConfigs

from observer.errors import RateLimited, Rejected, RemoteError, UsageSuspended
from observer.langfuse_api import NO_RETRIES, translate
from observer.langfuse_setup.diff import (
    ExistingConfig,
    decide_config,
    decide_widget,
    placed_widget_ids,
)
from observer.langfuse_setup.report import Kind, SetupItem, SetupOutcome, SetupReport, run_report
from observer.langfuse_setup.specs import (
    DASHBOARD_DESCRIPTION,
    DASHBOARD_NAME,
    SCORE_CONFIGS,
    WIDGETS,
    ScoreConfigSpec,
    WidgetSpec,
    placements,
)
from observer.retry import call_with_retries

_SCORE_CONFIGS_LIST: Final = "listing score configs"
_DASHBOARDS: Final = "api/public/unstable/dashboards"
_WIDGETS: Final = "api/public/unstable/dashboard-widgets"
_PAGE_LIMIT: Final = 100  # the API's maximum
_MAX_PAGES: Final = 1000
_RATE_LIMIT_WAIT_S: Final = 5.0  # without a Retry-After
_RATE_LIMIT_MAX_WAIT_S: Final = 60.0  # a longer Retry-After ends the run
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


def _rate_limited(error: Exception) -> bool:
    return isinstance(error, RateLimited)


def _retry_after(error: Exception) -> float | None:
    if not isinstance(error, RateLimited):
        return None
    return _RATE_LIMIT_WAIT_S if error.retry_after_s is None else error.retry_after_s


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
        self,
        kind: Kind,
        name: str,
        outcome: SetupOutcome,
        detail: str,
        object_id: str | None = None,
    ) -> None:
        self._items[(kind, name)] = SetupItem(kind, name, outcome, detail, object_id)
        self._current = None

    def _retrying(self, call: Callable[[], T]) -> T:
        """`call` (which raises RemoteError) on observer.retry's policy: 429s only."""
        return call_with_retries(
            call,
            attempts=self._tries,
            base_s=_RATE_LIMIT_WAIT_S,
            max_s=_RATE_LIMIT_MAX_WAIT_S,
            retryable=_rate_limited,
            retry_after=_retry_after,
            max_retry_after_s=_RATE_LIMIT_MAX_WAIT_S,
            sleep=self._sleep,
        )

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
                self._set("score config", spec.name, SetupOutcome.REFUSED, str(error))
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
            self._set("score config", spec.name, SetupOutcome.REFUSED, str(error))
            return
        note = " (beside an archived config of another shape)" if existing else ""
        self._set("score config", spec.name, SetupOutcome.CREATED, spec.shape + note, created.id)

    # the dashboard and its widgets

    def dashboard(self) -> None:
        try:
            boards = self._unstable_list(_DASHBOARDS, "listing dashboards")
            widgets = self._unstable_list(_WIDGETS, "listing dashboard widgets")
        except Rejected as error:
            detail = str(error) + (f"; {_NO_DASHBOARDS_API}" if error.status == 404 else "")
            self._set("dashboard", DASHBOARD_NAME, SetupOutcome.REFUSED, detail)
            for spec in WIDGETS:
                self._set("widget", spec.name, SetupOutcome.REFUSED, "the dashboards API refused")
            return
        board = next((b for b in boards if b.get("name") == DASHBOARD_NAME), None)
        placed = placed_widget_ids(board) if board is not None else set()
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
        decided = decide_widget(spec, widgets, placed)
        if decided is not None:
            outcome, detail, known = decided
            self._set("widget", spec.name, outcome, detail, known)
            return known
        self._current = ("widget", spec.name)
        try:
            created = self._unstable(
                "POST", _WIDGETS, f"creating widget {spec.name}", body=spec.body()
            )
        except Rejected as error:
            self._set("widget", spec.name, SetupOutcome.REFUSED, str(error))
            return None
        widget_id = created.get("id") if isinstance(created, dict) else None
        if not isinstance(widget_id, str):
            self._set("widget", spec.name, SetupOutcome.REFUSED, "Langfuse answered without an id")
            return None
        self._set("widget", spec.name, SetupOutcome.CREATED, spec.summary, widget_id)
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
            self._set("dashboard", DASHBOARD_NAME, SetupOutcome.REFUSED, str(error))
            return
        board_id = created.get("id") if isinstance(created, dict) else None
        detail = f"with {len(usable)} of {len(WIDGETS)} widgets"
        self._set("dashboard", DASHBOARD_NAME, SetupOutcome.CREATED, detail, board_id)

    def _complete_dashboard(
        self, board: dict[str, Any], usable: list[tuple[WidgetSpec, str]], placed: set[str]
    ) -> None:
        """An existing dashboard keeps its layout; widgets missing from it are appended."""
        board_id = str(board.get("id"))
        self._set("dashboard", DASHBOARD_NAME, SetupOutcome.EXISTED, "unchanged", board_id)
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
                self._set("widget", spec.name, SetupOutcome.REFUSED, str(error), widget_id)
                continue
            outcome = (
                SetupOutcome.CREATED if before.outcome is SetupOutcome.EXISTED else before.outcome
            )
            detail = f"{before.detail}; placed on the existing dashboard"
            self._set("widget", spec.name, outcome, detail, widget_id)
            added += 1
        detail = f"{added} widgets added to it" if added else "unchanged"
        self._set("dashboard", DASHBOARD_NAME, SetupOutcome.EXISTED, detail, board_id)

    # the report

    def report(self, error: RemoteError | None) -> SetupReport:
        planned: list[tuple[Kind, str]] = [("score config", s.name) for s in SCORE_CONFIGS]
        planned += [*(("widget", w.name) for w in WIDGETS), ("dashboard", DASHBOARD_NAME)]
        return run_report(
            planned, self._items, error, failed_at=self._current, unplaced=self._unplaced
        )


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
