"""First contact: the servers a command needs, reached before it relies on them.

    reach(call, bound_s)            a call tried until it answers or `bound_s` has passed
    langfuse_ready(settings, api, state)  Langfuse answers (`GET /api/public/health`,
                                    its version), then the project its keys belong to,
                                    checked against the one the state file was written for
    judge_ready(settings, client)   the judge's endpoint answers (`GET {base_url}/models`)

The clients are the caller's, built where every client is (observer.app.parts).

`check`, `run --once`, `backfill` and the daemon's first pass go through the same
functions (the daemon through `Passes.check`, tried again on every pass until they
pass), so `check` refuses exactly what `run` refuses, with the same message. The
judge is not waited for by `run` (a dead judge costs no deterministic score): `check`
shows what `judge_ready` found without failing on it.

A server that does not answer is tried until `source.first_contact_s` has passed, each
try's timeout cut to what is left, then given up: an `Unreachable` naming the URL it
tried (without credentials), how often and for how long. A Langfuse whose keys are
refused is an `AuthRejected` at once; a server too old to take observer's scores, or a
state file written for another Langfuse project, a ConfigError (exit 2).

The project comes from `GET /api/public/projects` (the project of a project-scoped key;
Langfuse puts no rate limit on it): its id and name are recorded in the state file with
the host at the first contact, and a state file recorded for another project is refused.
A server that does not answer that route (a proxy's 404) leaves the project unchecked.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
from langfuse.api.client import LangfuseAPI
from langfuse.api.core.api_error import ApiError

from observer import langfuse_api
from observer.config import ConfigError, Settings
from observer.errors import AuthRejected, Rejected, Unreachable, UnsupportedServer
from observer.retry import call_with_retries
from observer.state import State
from observer.times import format_duration
from observer.urls import without_credentials

if TYPE_CHECKING:
    import openai

log = structlog.get_logger("observer.app")
T = TypeVar("T")

PROJECT_NOTE = "langfuse_project"  # the state file's note: host, id and name, as JSON
MIN_TRY_S = 0.1  # the shortest try: what is left of a bound, or this


def reach(call: Callable[[float], T], bound_s: float, stop: threading.Event | None = None) -> T:
    """`call(timeout_s)` until it returns or `bound_s` has passed (or `stop` is set).

    An Unreachable is tried again after observer.retry's backoff, each try's timeout cut
    to what is left of the bound; any other error is raised at once. Given up, the last
    Unreachable is raised, saying how often and for how long."""
    began = time.monotonic()
    tries = 0

    def left() -> float:
        return bound_s - (time.monotonic() - began)

    def once() -> T:
        nonlocal tries
        tries += 1
        return call(max(MIN_TRY_S, left()))

    def pause(seconds: float) -> None:
        wait = min(seconds, max(0.0, left()))
        if stop is not None:
            stop.wait(wait)
        else:
            time.sleep(wait)

    try:
        return call_with_retries(
            once,
            attempts=1_000,  # the bound ends it, not a count
            base_s=0.5,
            max_s=4.0,
            retryable=lambda error: isinstance(error, Unreachable),
            should_stop=lambda: left() <= 0 or (stop is not None and stop.is_set()),
            sleep=pause,
        )
    except Unreachable as error:
        raise error.tried(time.monotonic() - began, tries) from None


# -- Langfuse ---------------------------------------------------------------------------


class ProjectMismatch(ConfigError):
    """The state file was written for another Langfuse project (exit 2)."""


@dataclass(frozen=True, slots=True)
class Project:
    """The Langfuse project a pair of keys belongs to, and where it was reached."""

    id: str
    name: str
    host: str  # the base URL, without credentials

    def describe(self) -> str:
        return f"project {self.name!r} ({self.id}) at {self.host}"


def read_project(api: LangfuseAPI, host: str, timeout_s: float) -> Project | None:
    """`GET /api/public/projects`: the keys' project, or None when the server does not
    answer that route with one (a proxy's 404, a body without an id). Read off the JSON
    itself: older servers send no `organization`, which the SDK's model requires."""
    what = "reading the keys' project (GET /api/public/projects)"
    http = api._client_wrapper.httpx_client
    try:
        response = http.request(
            "api/public/projects",
            method="GET",
            request_options={
                **langfuse_api.NO_RETRIES,
                "timeout_in_seconds": langfuse_api.seconds(timeout_s),
            },
        )
    except Exception as error:
        raise langfuse_api.translate(error, what) from None
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text[:200]
    if not 200 <= response.status_code < 300:
        status, headers = response.status_code, dict(response.headers)
        refused = langfuse_api.translate(
            ApiError(status_code=status, headers=headers, body=body), what
        )
        if isinstance(refused, Rejected):  # 404: no such route here
            log.warning("langfuse_project_unread", error=str(refused), action="not checked")
            return None
        raise refused
    data = body.get("data") if isinstance(body, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    if not isinstance(first.get("id"), str):
        log.warning("langfuse_project_unread", error="no project in the answer")
        return None
    return Project(first["id"], str(first.get("name") or first["id"]), host)


def recorded_project(state: State) -> Project | None:
    """The project the state file was written for (None: not recorded yet)."""
    noted = state.noted(PROJECT_NOTE)
    if not noted:
        return None
    try:
        return Project(**json.loads(noted))
    except (TypeError, ValueError):
        return None  # unreadable: recorded afresh


def project_conflict(
    recorded: Project | None, current: Project, path: Path, lookback_s: float
) -> str | None:
    """Why the state file at `path` cannot serve `current`, or None when it can."""
    if recorded is None or recorded.id == current.id:
        return None
    return (
        f"state file {path} was written for Langfuse {recorded.describe()}, but the keys "
        f"are for {current.describe()}. A state file serves one project: give this one "
        f"its own (--state, state.path), or, to start afresh, move {path} away (the next "
        f"run then reads the last {format_duration(lookback_s)}, source.lookback_s)"
    )


def check_project(state: State, current: Project, lookback_s: float, *, record: bool) -> None:
    """A ConfigError for another project's state file; else, with `record`, `current`
    recorded in it (new, or the same project reached at another host)."""
    recorded = recorded_project(state)
    conflict = project_conflict(recorded, current, state.path, lookback_s)
    if conflict is not None:
        raise ProjectMismatch(conflict)
    if record and recorded != current:
        state.note(PROJECT_NOTE, json.dumps(asdict(current)))


@dataclass(frozen=True, slots=True)
class Reached:
    """What the first contact with Langfuse found, for `check`'s rows."""

    server: str  # its version, described
    project: Project | None  # None: the server did not say


def langfuse_ready(
    settings: Settings,
    api: LangfuseAPI,
    state: State | None,
    *,
    posting: bool = True,
    stop: threading.Event | None = None,
    record: bool = True,
) -> Reached:
    """Langfuse answers within `source.first_contact_s` (Unreachable naming the URL), is
    new enough to take score batches when `posting` (ConfigError), accepts the keys
    (AuthRejected) and is the project `state` was written for (ConfigError); recorded
    there with `record`."""
    host = without_credentials(settings.langfuse.base_url)
    bound = settings.source.first_contact_s

    def version(timeout_s: float) -> str:
        try:
            return langfuse_api.check_server_version(api, host, timeout_s).describe
        except UnsupportedServer as error:
            if posting:
                raise ConfigError(str(error)) from None
            return f"Langfuse {error.version} (self-hosted)"
        except Rejected as error:  # answered, not with its version (a proxy's 404)
            log.warning("server_version_unread", error=str(error))
            return f"version not read: {error}"

    try:
        found = reach(version, bound, stop)
        project = reach(lambda timeout_s: read_project(api, host, timeout_s), bound, stop)
    except (Unreachable, AuthRejected) as error:  # every such message names where it went
        if host in str(error):
            raise
        raise type(error)(f"Langfuse at {host}: {error}", error.status) from None
    if project is not None and state is not None:
        check_project(state, project, settings.source.lookback_s, record=record)
    return Reached(found, project)


# -- the judge --------------------------------------------------------------------------


def judge_ready(
    settings: Settings, client: openai.OpenAI, stop: threading.Event | None = None
) -> str:
    """The judge's endpoint answers within `source.first_contact_s`: `GET {base_url}/models`
    (any answer but a 5xx will do: an endpoint without the route answers 404). An
    Unreachable names the URL; a refused key is an AuthRejected. What was found, as one
    phrase for `check` (whether the endpoint lists the model, when it lists models)."""
    import openai

    url = without_credentials(str(client.base_url)).rstrip("/")
    model = settings.judge.model

    def models(timeout_s: float) -> str:
        try:
            listed = [m.id for m in client.with_options(timeout=timeout_s).models.list().data]
        except openai.APIConnectionError as error:  # APITimeoutError among them
            cause = error.__cause__
            why = f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
            raise Unreachable(f"the judge endpoint {url} could not be reached: {why}") from None
        except openai.APIStatusError as error:
            status = error.status_code
            if status in (401, 403):
                raise AuthRejected(
                    f"the judge endpoint {url} refused the key ({status}): "
                    "OPENAI_API_KEY (judge.api_key)",
                    status,
                ) from None
            if status >= 500:
                raise Unreachable(f"the judge endpoint {url} answered {status}", status) from None
            return f"{url}: reachable (model {model}; it lists no models: {status})"
        if not listed or model in listed:
            return f"{url}: reachable, model {model}"
        shown = ", ".join(sorted(listed)[:5]) + (" ..." if len(listed) > 5 else "")
        return f"{url}: reachable, but it does not list the model {model} (it lists {shown})"

    return reach(models, settings.source.first_contact_s, stop)


def ready(
    settings: Settings,
    api: LangfuseAPI,
    state: State | None,
    *,
    posting: bool,
    stop: threading.Event,
) -> None:
    """What a pass needs before it reads: Langfuse. The judge is not waited for: a dead
    judge costs no deterministic score, and its errors page (judge_error_rate_high)."""
    langfuse_ready(settings, api, state, posting=posting, stop=stop)
