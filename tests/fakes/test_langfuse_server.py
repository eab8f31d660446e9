"""Tests of the fake Langfuse server itself, driven by the real langfuse 5 API client."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from langfuse.api.client import LangfuseAPI
from langfuse.api.commons.errors.access_denied_error import AccessDeniedError
from langfuse.api.commons.errors.error import Error as BadRequestError
from langfuse.api.commons.errors.not_found_error import NotFoundError
from langfuse.api.commons.errors.unauthorized_error import UnauthorizedError
from langfuse.api.commons.types.config_category import ConfigCategory
from langfuse.api.commons.types.score_config_data_type import ScoreConfigDataType
from langfuse.api.core.api_error import ApiError
from langfuse.api.core.request_options import RequestOptions
from langfuse.api.scores.types.create_score_batch_results import CreateScoreBatchResults
from langfuse.api.scores.types.create_score_request import CreateScoreRequest
from langfuse.api.unstable.dashboard_widgets.types.dashboard_widget_dimension import (
    DashboardWidgetDimension,
)
from langfuse.api.unstable.dashboard_widgets.types.dashboard_widget_filter import (
    DashboardWidgetFilter,
)
from langfuse.api.unstable.dashboard_widgets.types.dashboard_widget_metric import (
    DashboardWidgetMetric,
)
from langfuse.api.unstable.dashboards.types.create_dashboard_placement_request import (
    CreateDashboardPlacementRequest_Widget,
)
from langfuse.api.unstable.dashboards.types.dashboard_definition import DashboardDefinition
from langfuse.api.unstable.dashboards.types.dashboard_placement import DashboardPlacement_Widget

from tests.waiting import wait_until

from .clock import SimulatedClock
from .langfuse_server import (
    DASHBOARD_WIDGETS_PATH,
    DASHBOARDS_PATH,
    DEFAULT_BEHAVIOUR,
    FIELD_GROUPS,
    HOBBY,
    INGESTION_DELAY_BOUND_S,
    KIND,
    OBSERVATIONS_PATH,
    SCORE_CONFIGS_PATH,
    SCORES_PATH,
    SERVICE_LIKE,
    FakeLangfuse,
    RateLimits,
    xxhash32,
)

NO_RETRY: RequestOptions = {"max_retries": 0}
BASE = datetime(2026, 11, 20, 8, 0, 0, tzinfo=UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def make_obs(
    obs_id: str,
    start: datetime,
    *,
    trace_id: str = "t1",
    obs_type: str = "SPAN",
    environment: str = "production",
    parent: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "id": obs_id,
        "traceId": trace_id,
        "startTime": iso(start),
        "endTime": iso(start + timedelta(milliseconds=300)),
        "projectId": "proj-test",
        "parentObservationId": parent,
        "type": obs_type,
        "name": f"name-{obs_id}",
        "level": "DEFAULT",
        "environment": environment,
        "isRootObservation": parent is None,
        "updatedAt": iso(start + timedelta(seconds=1)),
        "input": '{"q": "question"}',
        "output": "plain text answer",
        "metadata": {},
        "tags": ["rag"],
        "traceName": "rag-query",
        **extra,
    }


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    """A kind fake: each test below switches on the one unkind behaviour it is about."""
    with FakeLangfuse.kind() as server:
        yield server


@pytest.fixture(scope="module")
def shared_httpx() -> Iterator[httpx.Client]:
    """One transport for every test: building an httpx.Client costs ~20 ms (TLS setup)."""
    with httpx.Client(timeout=5) as transport:
        yield transport


@pytest.fixture
def http(shared_httpx: httpx.Client) -> httpx.Client:
    """A plain HTTP client for what the SDK cannot send or does not show (no auth)."""
    return shared_httpx


@pytest.fixture
def client(fake: FakeLangfuse, shared_httpx: httpx.Client) -> LangfuseAPI:
    return LangfuseAPI(
        base_url=fake.url,
        username=fake.public_key,
        password=fake.secret_key,
        timeout=5,
        httpx_client=shared_httpx,
    )


def score(
    score_id: str, name: str, value: float | str, when: datetime, **kwargs: Any
) -> CreateScoreRequest:
    return CreateScoreRequest(
        id=score_id,
        trace_id=kwargs.pop("trace_id", "t1"),
        name=name,
        value=value,
        timestamp=when,
        **kwargs,
    )


# ---- observations ----------------------------------------------------------------------


def test_pages_2500_observations_newest_first_in_3_requests(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    # Pairs share a startTime so the id tie-break is exercised at page boundaries too.
    fake.add_observations(
        make_obs(f"obs-{i:04d}", BASE + timedelta(seconds=i // 2)) for i in range(2500)
    )
    seen: list[tuple[datetime, str]] = []
    cursor: str | None = None
    while True:
        page = client.observations.get_many(
            fields="core", limit=1000, cursor=cursor, request_options=NO_RETRY
        )
        seen.extend((o.start_time, o.id) for o in page.data)
        cursor = page.meta.cursor
        if cursor is None:
            break
    assert fake.observation_requests() == 3
    assert len(seen) == 2500
    assert len({obs_id for _, obs_id in seen}) == 2500
    assert seen == sorted(seen, reverse=True)
    assert seen[0][1] == "obs-2499"
    assert [r.query.get("limit") for r in fake.requests] == [["1000"]] * 3


def test_cursor_paging_is_stable_when_observations_arrive_between_pages(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    fake.add_observations(make_obs(f"o{i}", BASE + timedelta(seconds=i)) for i in range(10))
    first = client.observations.get_many(limit=4, request_options=NO_RETRY)
    assert [o.id for o in first.data] == ["o9", "o8", "o7", "o6"]
    fake.add_observations(
        [
            make_obs("newer", BASE + timedelta(hours=1)),  # before the cursor: never shown
            make_obs("older", BASE - timedelta(hours=1)),  # after the cursor: shows up
        ]
    )
    rest: list[str] = []
    cursor = first.meta.cursor
    while cursor is not None:
        page = client.observations.get_many(limit=4, cursor=cursor, request_options=NO_RETRY)
        rest.extend(o.id for o in page.data)
        cursor = page.meta.cursor
    assert rest == ["o5", "o4", "o3", "o2", "o1", "o0", "older"]


def test_field_groups_limit_returned_keys(
    fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client
) -> None:
    long_text = "x" * 500
    fake.add_observations(
        [make_obs("o1", BASE, metadata={"short": "s", "long": long_text, "full": long_text})]
    )
    auth = (fake.public_key, fake.secret_key)

    def keys(**params: str) -> set[str]:
        """The exact JSON keys on the wire (the SDK's models hide absent vs null)."""
        response = http.get(fake.url + OBSERVATIONS_PATH, params=params, auth=auth)
        return set(response.json()["data"][0])

    core, basic = set(FIELD_GROUPS["core"]), set(FIELD_GROUPS["basic"])
    assert keys() == core | basic
    assert keys(fields="core") == core
    assert keys(fields="io") == core | {"input", "output"}
    assert keys(fields="core,io,metadata,trace_context") == core | {
        "input",
        "output",
        "metadata",
        "tags",
        "release",
        "traceName",
    }

    page = client.observations.get_many(
        fields="io,metadata", expand_metadata="full", request_options=NO_RETRY
    )
    obs = page.data[0]
    assert obs.input == '{"q": "question"}'  # io stays a raw string
    assert obs.name is None  # basic group not requested
    assert obs.metadata == {"short": "s", "long": "x" * 200, "full": long_text}

    with pytest.raises(BadRequestError):
        client.observations.get_many(fields="core,bogus", request_options=NO_RETRY)


def test_limit_and_cursor_validation(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    fake.add_observations(make_obs(f"o{i}", BASE + timedelta(seconds=i)) for i in range(60))
    assert len(client.observations.get_many(request_options=NO_RETRY).data) == 50
    assert len(client.observations.get_many(limit=1000, request_options=NO_RETRY).data) == 60
    with pytest.raises(BadRequestError) as too_many:
        client.observations.get_many(limit=1001, request_options=NO_RETRY)
    assert too_many.value.status_code == 400
    with pytest.raises(BadRequestError):
        client.observations.get_many(cursor="not-a-cursor!", request_options=NO_RETRY)
    bogus = base64.urlsafe_b64encode(b'{"s": "x"}').decode()
    with pytest.raises(BadRequestError):
        client.observations.get_many(cursor=bogus, request_options=NO_RETRY)
    assert fake.observation_requests() == 2


def test_time_window_and_environment_filters(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    fake.add_observations(
        [
            make_obs("before", BASE - timedelta(microseconds=1000)),
            make_obs("at-from", BASE),
            make_obs("inside", BASE + timedelta(minutes=5), environment="staging"),
            make_obs("judge", BASE + timedelta(minutes=6), environment="langfuse-llm-as-a-judge"),
            make_obs("child", BASE + timedelta(minutes=7), parent="at-from", obs_type="GENERATION"),
            make_obs("at-to", BASE + timedelta(minutes=10)),
        ]
    )
    window = {"from_start_time": BASE, "to_start_time": BASE + timedelta(minutes=10)}

    def ids(**kwargs: Any) -> list[str]:
        page = client.observations.get_many(request_options=NO_RETRY, **window, **kwargs)
        return [o.id for o in page.data]

    assert ids() == ["child", "judge", "inside", "at-from"]  # from inclusive, to exclusive
    assert ids(environment=["production", "staging"]) == ["child", "inside", "at-from"]
    assert ids(environment="staging") == ["inside"]
    assert ids(is_root_observation=True, environment="production") == ["at-from"]
    assert ids(type="GENERATION") == ["child"]
    assert ids(trace_id="nope") == []
    # Other time zones on the wire: 09:05+01:00 is 08:05Z.
    plus_one = BASE.astimezone(timezone(timedelta(hours=1)))
    page = client.observations.get_many(
        from_start_time=plus_one + timedelta(minutes=5), request_options=NO_RETRY
    )
    assert [o.id for o in page.data] == ["at-to", "child", "judge", "inside"]

    sent = fake.requests[1].query
    assert sent["environment"] == ["production", "staging"]  # a repeated parameter
    assert sent["fromStartTime"] == ["2026-11-20T08:00:00Z"]


def test_structured_filter_takes_precedence(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    fake.add_observations(
        [
            make_obs("a", BASE, obs_type="GENERATION"),
            make_obs("b", BASE + timedelta(seconds=1)),
        ]
    )
    conditions = [{"type": "string", "column": "type", "operator": "=", "value": "GENERATION"}]
    page = client.observations.get_many(
        filter=json.dumps(conditions), type="SPAN", request_options=NO_RETRY
    )
    assert [o.id for o in page.data] == ["a"]
    with pytest.raises(BadRequestError):
        client.observations.get_many(filter="{not json", request_options=NO_RETRY)


# ---- auth, errors, outages ---------------------------------------------------------------


def test_wrong_key_raises_unauthorized(fake: FakeLangfuse, http: httpx.Client) -> None:
    wrong = LangfuseAPI(
        base_url=fake.url, username=fake.public_key, password="sk-lf-wrong", httpx_client=http
    )
    with pytest.raises(UnauthorizedError) as exc_info:
        wrong.observations.get_many(request_options=NO_RETRY)
    assert exc_info.value.status_code == 401
    assert "Invalid credentials" in exc_info.value.body["message"]
    with pytest.raises(UnauthorizedError):
        wrong.scores.create(request=[score("s", "n", 1.0, BASE)], request_options=NO_RETRY)

    anonymous = http.get(fake.url + OBSERVATIONS_PATH)
    assert anonymous.status_code == 401
    assert anonymous.json() == {"message": "No authorization header"}
    health = http.get(fake.url + "/api/public/health")  # no auth needed
    assert health.json() == {"status": "OK", "version": "4.60.0"}
    assert fake.scores == []


def test_unknown_route_is_404(fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client) -> None:
    assert http.get(fake.url + "/api/public/traces").status_code == 404
    assert http.get(fake.url + "/").status_code == 404
    with pytest.raises(NotFoundError):
        client.trace.delete("some-trace", request_options=NO_RETRY)


def test_fail_next_500_and_429_reach_the_client(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    fake.fail_next(500)
    with pytest.raises(ApiError) as server_error:
        client.observations.get_many(request_options=NO_RETRY)
    assert server_error.value.status_code == 500

    fake.fail_next(429, retry_after=1)
    with pytest.raises(ApiError) as rate_limited:
        client.observations.get_many(request_options=NO_RETRY)
    assert rate_limited.value.status_code == 429
    assert rate_limited.value.headers is not None
    assert rate_limited.value.headers["retry-after"] == "1"

    client.observations.get_many(request_options=NO_RETRY)  # faults are used up
    assert [r.status for r in fake.requests] == [500, 429, 200]
    assert fake.observation_requests() == 1


def test_fail_next_count_and_path_prefix(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    fake.fail_next(503, count=2, path_prefix=SCORES_PATH)
    client.observations.get_many(request_options=NO_RETRY)  # other paths unaffected
    for _ in range(2):
        with pytest.raises(ApiError) as unavailable:
            client.scores.create(request=[score("s", "n", 1.0, BASE)], request_options=NO_RETRY)
        assert unavailable.value.status_code == 503
    client.scores.create(request=[score("s", "n", 1.0, BASE)], request_options=NO_RETRY)
    assert len(fake.scores) == 1
    fake.reset_requests()
    assert fake.requests == []


def test_fail_next_by_method(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    fake.fail_next(400, path_prefix=SCORE_CONFIGS_PATH, method="POST")
    client.score_configs.get(request_options=NO_RETRY)  # a GET of the same path passes
    with pytest.raises(BadRequestError):
        client.score_configs.create(
            name="x", data_type=ScoreConfigDataType.BOOLEAN, request_options=NO_RETRY
        )
    client.score_configs.create(
        name="x", data_type=ScoreConfigDataType.BOOLEAN, request_options=NO_RETRY
    )
    assert [(r.method, r.status) for r in fake.requests] == [
        ("GET", 200),
        ("POST", 400),
        ("POST", 200),
    ]


def test_latency_makes_client_time_out(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    fake.latency_s = 0.3
    with pytest.raises(httpx.ReadTimeout):
        client.observations.get_many(request_options={"max_retries": 0, "timeout_in_seconds": 0.05})
    fake.latency_s = 0


def test_stop_start_is_a_real_outage_on_the_same_port(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    url = fake.url
    client.observations.get_many(request_options=NO_RETRY)  # leaves a keep-alive connection
    fake.stop()
    with pytest.raises(httpx.ConnectError):
        client.observations.get_many(request_options=NO_RETRY)
    fake.start()
    assert fake.url == url
    client.observations.get_many(request_options=NO_RETRY)
    assert fake.observation_requests() == 2


def test_outage_during_a_slow_request_cuts_the_line(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    fake.latency_s = 5  # stop() wakes the sleeping handler at once
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            client.observations.get_many(request_options=NO_RETRY)
        except BaseException as exc:  # handed to the main thread
            outcome.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    wait_until(lambda: fake.in_flight, "the request reached the fake")
    assert fake.in_flight == 1
    fake.stop()
    worker.join(timeout=5)
    assert len(outcome) == 1
    assert isinstance(outcome[0], httpx.RemoteProtocolError | httpx.ReadError)
    assert [r.status for r in fake.requests] == [0]  # recorded as cut off, never answered


# ---- scores ----------------------------------------------------------------------------------


def test_score_wire_format_and_upsert(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    morning = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
    evening = datetime(2026, 11, 20, 23, 0, tzinfo=UTC)
    next_day = datetime(2026, 11, 21, 8, 0, tzinfo=UTC)

    response = client.scores.create(
        request=[
            score("s1", "faithfulness", 0.5, morning, observation_id="o1", environment="prod"),
            score("s2", "grounded", 1, morning, data_type="BOOLEAN"),
        ],
        request_options=NO_RETRY,
    )
    assert not isinstance(response, CreateScoreBatchResults)
    assert response.message == "Accepted"
    first = fake.score_posts[0][0]
    assert first == {
        "id": "s1",
        "traceId": "t1",
        "observationId": "o1",
        "name": "faithfulness",
        "value": 0.5,
        "environment": "prod",
        "timestamp": "2026-11-20T08:00:00Z",
    }
    assert fake.score_posts[0][1]["value"] == 1.0  # the SDK's float|str union makes 1 -> 1.0

    # Same id, name and UTC day: replaced, not added.
    client.scores.create(
        request=[score("s1", "faithfulness", 0.9, evening, observation_id="o1")],
        request_options=NO_RETRY,
    )
    assert len(fake.scores) == 2
    assert next(s for s in fake.scores if s["id"] == "s1")["value"] == 0.9
    assert fake.duplicates() == []

    # Same id and name on another day: a second stored score.
    client.scores.create(
        request=[score("s1", "faithfulness", 0.9, next_day, observation_id="o1")],
        request_options=NO_RETRY,
    )
    assert len(fake.scores) == 3
    assert fake.duplicates() == [("t1", "faithfulness")]
    assert len(fake.score_posts) == 3


def test_same_name_on_other_observations_is_not_a_duplicate(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    client.scores.create(
        request=[
            score("a", "faithfulness", 0.1, BASE, observation_id="o1"),
            score("b", "faithfulness", 0.2, BASE, observation_id="o2"),
        ],
        request_options=NO_RETRY,
    )
    assert fake.duplicates() == []


@pytest.mark.parametrize(
    ("value", "data_type"),
    [(0.5, "BOOLEAN"), (2, "BOOLEAN"), (1.0, "CATEGORICAL"), ("high", "NUMERIC"), ("", "TEXT")],
)
def test_invalid_score_values_are_400(
    fake: FakeLangfuse, client: LangfuseAPI, value: float | str, data_type: str
) -> None:
    with pytest.raises(BadRequestError):
        client.scores.create(
            request=[score("s", "n", value, BASE, data_type=data_type)], request_options=NO_RETRY
        )
    assert fake.scores == []
    assert fake.score_posts == []


def test_score_body_must_be_a_list_of_named_values(fake: FakeLangfuse, http: httpx.Client) -> None:
    auth = (fake.public_key, fake.secret_key)
    url = fake.url + SCORES_PATH
    single = {"traceId": "t1", "name": "n", "value": 1}
    assert http.post(url, json=single, auth=auth).status_code == 400
    assert http.post(url, json=[{"traceId": "t1", "value": 1}], auth=auth).status_code == 400
    assert http.post(url, json=[{"traceId": "t1", "name": "n"}], auth=auth).status_code == 400
    ok = http.post(url, json=[single], auth=auth)
    assert (ok.status_code, ok.json()) == (202, {"message": "Accepted"})


def test_207_rejects_the_last_scores_of_the_batch(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    fake.reject_next_scores(1)
    response = client.scores.create(
        request=[score(f"s{i}", "n", 0.1 * i, BASE) for i in range(3)],
        request_options=NO_RETRY,
    )
    assert isinstance(response, CreateScoreBatchResults)
    assert (response.accepted, response.rejected) == (2, 1)
    assert len(response.errors) == 1
    assert sorted(s["id"] for s in fake.scores) == ["s0", "s1"]
    assert fake.requests[-1].status == 207

    response = client.scores.create(request=[score("s2", "n", 0.2, BASE)], request_options=NO_RETRY)
    assert not isinstance(response, CreateScoreBatchResults)  # one-shot: back to 202
    assert sorted(s["id"] for s in fake.scores) == ["s0", "s1", "s2"]


# ---- score configs ---------------------------------------------------------------------


def config_body(name: str, data_type: str = "NUMERIC", **extra: Any) -> dict[str, Any]:
    return {"name": name, "dataType": data_type, **extra}


def test_score_configs_are_created_per_data_type(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    numeric = client.score_configs.create(
        name="confidence",
        data_type=ScoreConfigDataType.NUMERIC,
        min_value=0,
        max_value=1,
        description="0..1",
        request_options=NO_RETRY,
    )
    boolean = client.score_configs.create(
        name="ungrounded", data_type=ScoreConfigDataType.BOOLEAN, request_options=NO_RETRY
    )
    categorical = client.score_configs.create(
        name="crag_grade",
        data_type=ScoreConfigDataType.CATEGORICAL,
        categories=[ConfigCategory(label="LOW", value=0), ConfigCategory(label="HIGH", value=1)],
        request_options=NO_RETRY,
    )
    assert (numeric.min_value, numeric.max_value, numeric.categories) == (0, 1, None)
    assert numeric.description == "0..1" and not numeric.is_archived
    # BOOLEAN categories are the server's own; a client may not send any.
    assert [(c.label, c.value) for c in boolean.categories or []] == [("True", 1), ("False", 0)]
    assert [(c.label, c.value) for c in categorical.categories or []] == [("LOW", 0), ("HIGH", 1)]
    assert [c["name"] for c in fake.score_configs] == ["confidence", "ungrounded", "crag_grade"]
    got = client.score_configs.get_by_id(boolean.id, request_options=NO_RETRY)
    assert got.data_type == ScoreConfigDataType.BOOLEAN
    with pytest.raises(NotFoundError):
        client.score_configs.get_by_id("no-such-config", request_options=NO_RETRY)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (config_body("x", minValue=1, maxValue=1), "Maximum value must be greater"),
        (config_body("x", "CATEGORICAL"), "Category must be an array"),
        (
            config_body("x", "CATEGORICAL", categories=[{"label": "A", "value": 0}] * 2),
            "labels and values are unique",
        ),
        (config_body("x", "CATEGORICAL", categories=[], minValue=0), "only for NUMERIC"),
        (config_body("x", "BOOLEAN", categories=None), "cannot be passed for BOOLEAN"),
        (
            config_body("x", "NUMERIC", categories=[{"label": "A", "value": 0}]),
            "only for CATEGORICAL",
        ),
        (config_body("x" * 36), "1 to 35 letters"),
        (config_body("bad/name"), "1 to 35 letters"),
        (config_body("x", "PERCENT"), "Invalid discriminator value"),
    ],
)
def test_invalid_score_configs_are_400_with_a_message(
    fake: FakeLangfuse, http: httpx.Client, body: dict[str, Any], message: str
) -> None:
    response = http.post(
        fake.url + SCORE_CONFIGS_PATH, json=body, auth=(fake.public_key, fake.secret_key)
    )
    assert response.status_code == 400
    assert response.json()["message"] == "Invalid request data"
    assert any(message in issue["message"] for issue in response.json()["error"])
    assert fake.score_configs == []


def test_score_configs_page_newest_first_with_meta(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    for i in range(120):
        fake.add_score_config(config_body(f"score-{i:03d}"))
    default = client.score_configs.get(request_options=NO_RETRY)
    assert len(default.data) == 50
    assert (default.meta.page, default.meta.limit) == (1, 50)
    assert (default.meta.total_items, default.meta.total_pages) == (120, 3)
    names: list[str] = []
    for page in (1, 2):
        got = client.score_configs.get(page=page, limit=100, request_options=NO_RETRY)
        assert (got.meta.page, got.meta.total_pages) == (page, 2)
        names += [c.name for c in got.data]
    assert names == [f"score-{i:03d}" for i in reversed(range(120))]
    beyond = client.score_configs.get(page=3, limit=100, request_options=NO_RETRY)
    assert beyond.data == [] and beyond.meta.total_items == 120
    for bad in ({"limit": 101}, {"limit": 0}, {"page": 0}, {"page": "one"}):
        with pytest.raises(BadRequestError):
            client.score_configs.get(**bad, request_options=NO_RETRY)


def test_score_config_update_never_changes_the_data_type(
    fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client
) -> None:
    config = fake.add_score_config(
        config_body("crag_grade", "CATEGORICAL", categories=[{"label": "LOW", "value": 0}])
    )
    archived = client.score_configs.update(
        config["id"], is_archived=True, description="old", request_options=NO_RETRY
    )
    assert archived.is_archived and archived.description == "old"
    auth = (fake.public_key, fake.secret_key)
    url = f"{fake.url}{SCORE_CONFIGS_PATH}/{config['id']}"
    only_type = http.patch(url, json={"dataType": "NUMERIC"}, auth=auth)
    assert only_type.status_code == 400  # unknown keys are stripped: an empty update
    assert "cannot be empty" in only_type.json()["error"][0]["message"]
    assert http.patch(url, json={"minValue": 0}, auth=auth).status_code == 400
    assert fake.score_configs[0]["dataType"] == "CATEGORICAL"
    missing = http.patch(f"{fake.url}{SCORE_CONFIGS_PATH}/nope", json={"name": "x"}, auth=auth)
    assert missing.status_code == 404


def test_score_configs_want_auth(fake: FakeLangfuse, http: httpx.Client) -> None:
    anonymous = http.get(fake.url + SCORE_CONFIGS_PATH)
    assert (anonymous.status_code, anonymous.json()) == (
        401,
        {"message": "No authorization header"},
    )
    wrong = http.post(
        fake.url + SCORE_CONFIGS_PATH, json=config_body("x"), auth=(fake.public_key, "sk-wrong")
    )
    assert wrong.status_code == 401
    assert http.delete(fake.url + SCORE_CONFIGS_PATH).status_code == 405
    assert fake.score_configs == []


# ---- the unstable dashboards API -------------------------------------------------------


def score_widget(client: LangfuseAPI, name: str = "avg confidence", **overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "name": name,
        "view": "scores-numeric",
        "dimensions": [],
        "metrics": [DashboardWidgetMetric(measure="value", agg="avg")],
        "filters": [
            DashboardWidgetFilter(
                column="name", operator="any of", type="stringOptions", value=["confidence"]
            )
        ],
        "chart_type": "LINE_TIME_SERIES",
        **overrides,
    }
    return client.unstable.dashboard_widgets.create(**fields, request_options=NO_RETRY)


def test_widgets_and_dashboards_round_trip_through_the_sdk(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    line = score_widget(client)
    assert (line.view, line.chart_type, line.description) == (
        "scores-numeric",
        "LINE_TIME_SERIES",
        "",
    )
    assert line.chart_config.type == "LINE_TIME_SERIES"  # defaults to the chart type's config
    grades = score_widget(
        client,
        "grades",
        view="scores-categorical",
        dimensions=[DashboardWidgetDimension(field="stringValue")],
        metrics=[DashboardWidgetMetric(measure="count", agg="count")],
        chart_type="BAR_TIME_SERIES",
    )
    dashboards = client.unstable.dashboards
    board = dashboards.create(
        name="quality",
        definition=DashboardDefinition(
            widgets=[
                DashboardPlacement_Widget(id="p1", widget_id=line.id, x=0, y=0, width=6, height=4)
            ]
        ),
        request_options=NO_RETRY,
    )
    assert (board.description, board.filters) == ("", [])
    placed = dashboards.add_placement(
        board.id,
        request=CreateDashboardPlacementRequest_Widget(widget_id=grades.id),
        request_options=NO_RETRY,
    )
    # Without a position the tile is appended below the others, 6x6, with a new id.
    assert (placed.x, placed.y, placed.width, placed.height) == (0, 4, 6, 6)
    assert placed.id != "p1"
    got = dashboards.get(board.id, request_options=NO_RETRY)
    assert [p.widget_id for p in got.definition.widgets] == [line.id, grades.id]
    assert [
        w.name for w in client.unstable.dashboard_widgets.list(request_options=NO_RETRY).data
    ] == [
        "grades",
        "avg confidence",
    ]
    assert [w["name"] for w in fake.dashboard_widgets] == ["avg confidence", "grades"]
    assert fake.dashboards[0]["definition"]["widgets"][1]["widgetId"] == grades.id


def test_dashboards_list_most_recently_updated_first_in_pages(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    widget = score_widget(client)
    boards = [
        client.unstable.dashboards.create(name=f"d{i}", request_options=NO_RETRY) for i in range(3)
    ]
    client.unstable.dashboards.add_placement(
        boards[0].id,
        request=CreateDashboardPlacementRequest_Widget(widget_id=widget.id),
        request_options=NO_RETRY,
    )
    first = client.unstable.dashboards.list(limit=2, request_options=NO_RETRY)
    second = client.unstable.dashboards.list(page=2, limit=2, request_options=NO_RETRY)
    assert [d.name for d in first.data + second.data] == ["d0", "d2", "d1"]
    assert (first.meta.total_items, first.meta.total_pages) == (3, 2)


def unstable_post(fake: FakeLangfuse, http: httpx.Client, path: str, body: Any) -> httpx.Response:
    return http.post(fake.url + path, json=body, auth=(fake.public_key, fake.secret_key))


def widget_body(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "w",
        "view": "scores-numeric",
        "dimensions": [],
        "metrics": [{"measure": "value", "agg": "avg"}],
        "filters": [],
        "chartType": "NUMBER",
        **overrides,
    }


@pytest.mark.parametrize(
    ("overrides", "code", "message"),
    [
        (
            {"metrics": [{"measure": "latency", "agg": "avg"}]},
            "invalid_request",
            'Measure "latency"',
        ),
        ({"metrics": []}, "invalid_body", "non-empty array"),
        ({"metrics": [{"measure": "value", "agg": "mean"}]}, "invalid_request", "Aggregation"),
        (
            {"view": "scores-categorical", "metrics": [{"measure": "value", "agg": "avg"}]},
            "invalid_request",
            'Measure "value" is not available for view "scores-categorical"',
        ),
        ({"dimensions": [{"field": "stringValue"}]}, "invalid_request", 'Dimension "stringValue"'),
        (
            {"dimensions": [{"field": "name"}, {"field": "source"}]},
            "invalid_request",
            "Only pivot table",
        ),
        (
            {"filters": [{"column": "latency", "operator": "=", "type": "number", "value": 1}]},
            "invalid_request",
            "Unsupported filter column",
        ),
        (
            {
                "filters": [
                    {"column": "name", "operator": "=", "type": "stringOptions", "value": []}
                ]
            },
            "invalid_body",
            "not valid for type",
        ),
        ({"chartConfig": {"type": "PIE"}}, "invalid_request", "must match chartType"),
        ({"view": "traces"}, "invalid_body", "view"),
        ({"name": ""}, "invalid_body", "Widget name is required"),
    ],
)
def test_invalid_widgets_are_400_in_the_unstable_envelope(
    fake: FakeLangfuse,
    http: httpx.Client,
    overrides: dict[str, Any],
    code: str,
    message: str,
) -> None:
    response = unstable_post(fake, http, DASHBOARD_WIDGETS_PATH, widget_body(**overrides))
    assert response.status_code == 400
    assert response.json()["code"] == code
    assert message in response.json()["message"]
    assert fake.dashboard_widgets == []


def test_placement_errors(fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client) -> None:
    widget = score_widget(client)
    board = client.unstable.dashboards.create(name="d", request_options=NO_RETRY)
    path = f"{DASHBOARDS_PATH}/{board.id}/placements"
    unknown = unstable_post(fake, http, path, {"type": "widget", "widgetId": "nope"})
    assert (unknown.status_code, unknown.json()["code"]) == (404, "resource_not_found")
    first = unstable_post(fake, http, path, {"type": "widget", "widgetId": widget.id, "id": "a"})
    assert first.status_code == 200
    again = unstable_post(fake, http, path, {"type": "widget", "widgetId": widget.id, "id": "a"})
    assert (again.status_code, again.json()["code"]) == (409, "conflict")
    too_wide = unstable_post(fake, http, path, {"type": "widget", "widgetId": widget.id, "x": 8})
    assert too_wide.status_code == 400
    no_board = unstable_post(fake, http, f"{DASHBOARDS_PATH}/nope/placements", {})
    assert (no_board.status_code, no_board.json()["code"]) == (404, "resource_not_found")
    unnamed = unstable_post(fake, http, DASHBOARDS_PATH, {"description": "no name"})
    assert (unnamed.status_code, unnamed.json()["code"]) == (400, "invalid_body")
    dangling = unstable_post(
        fake,
        http,
        DASHBOARDS_PATH,
        {
            "name": "d2",
            "definition": {
                "widgets": [
                    {
                        "type": "widget",
                        "id": "p",
                        "widgetId": "gone",
                        "x": 0,
                        "y": 0,
                        "width": 6,
                        "height": 6,
                    }
                ]
            },
        },
    )
    assert dangling.status_code == 404
    assert len(fake.dashboards) == 1
    assert len(fake.dashboards[0]["definition"]["widgets"]) == 1


def test_unstable_errors_use_the_envelope(fake: FakeLangfuse, http: httpx.Client) -> None:
    wrong = http.get(fake.url + DASHBOARDS_PATH, auth=(fake.public_key, "sk-wrong"))
    assert wrong.status_code == 401
    assert wrong.json()["code"] == "authentication_failed"
    assert wrong.json()["message"].startswith("Invalid credentials")
    bad_limit = http.get(
        fake.url + DASHBOARD_WIDGETS_PATH,
        params={"limit": 500},
        auth=(fake.public_key, fake.secret_key),
    )
    assert (bad_limit.status_code, bad_limit.json()["code"]) == (400, "invalid_query")
    delete = http.delete(fake.url + DASHBOARDS_PATH, auth=(fake.public_key, fake.secret_key))
    assert (delete.status_code, delete.json()["code"]) == (405, "method_not_allowed")


def test_dashboards_api_off_is_an_older_server(
    fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client
) -> None:
    fake.dashboards_api = False
    for path in (DASHBOARDS_PATH, DASHBOARD_WIDGETS_PATH, f"{DASHBOARDS_PATH}/x/placements"):
        for auth in ((fake.public_key, fake.secret_key), None):  # 404 before auth, like no route
            response = http.get(fake.url + path, auth=auth)
            assert response.status_code == 404
            assert response.json() == {"message": "Route not found", "error": "NotFoundError"}
    # The rest of the API is still there.
    client.score_configs.create(
        name="x", data_type=ScoreConfigDataType.BOOLEAN, request_options=NO_RETRY
    )
    assert len(fake.score_configs) == 1
    fake.dashboards_api = True
    assert client.unstable.dashboards.list(request_options=NO_RETRY).data == []


# ---- the service as it is (docs/daemon.md): each behaviour, switched on alone -------------


def list_all(client: LangfuseAPI, **kwargs: Any) -> tuple[list[str], list[int]]:
    """Page as the changelog of 2026-11-03 says: until meta.cursor is absent."""
    ids: list[str] = []
    sizes: list[int] = []
    cursor: str | None = None
    while True:
        page = client.observations.get_many(cursor=cursor, request_options=NO_RETRY, **kwargs)
        ids.extend(o.id for o in page.data)
        sizes.append(len(page.data))
        cursor = page.meta.cursor
        if not cursor:
            return ids, sizes


def test_xxhash32_is_clickhouses() -> None:
    # The reference vectors of XXH32 with seed 0.
    assert xxhash32("") == 0x02CC5D05
    assert xxhash32("a") == 0x550D7456
    assert xxhash32("abc") == 0x32D153FF
    assert xxhash32("Nobody inspects the spammish repetition") == 0xE2293B2F


def test_listing_orders_by_start_then_trace_hash_then_id(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    traces = [f"trace-{i}" for i in range(6)]
    fake.add_observations(
        [make_obs(f"{t}-{n}", BASE, trace_id=t) for t in traces for n in ("a", "b")]
        + [make_obs("later", BASE + timedelta(seconds=1), trace_id="trace-0")]
    )
    ids, _ = list_all(client, limit=3)
    by_hash = sorted(traces, key=xxhash32, reverse=True)
    assert ids == ["later"] + [f"{t}-{n}" for t in by_hash for n in ("b", "a")]


def test_cursor_is_the_servers_base64_json_and_absent_at_the_end(
    fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client
) -> None:
    fake.add_observations(make_obs(f"o{i}", BASE + timedelta(seconds=i)) for i in range(3))
    auth = (fake.public_key, fake.secret_key)
    first = http.get(fake.url + OBSERVATIONS_PATH, params={"limit": 2}, auth=auth).json()
    assert json.loads(base64.b64decode(first["meta"]["cursor"])) == {
        "lastStartTimeTo": "2026-11-20T08:00:01.000000Z",
        "lastTraceId": "t1",
        "lastId": "o1",
    }
    last = http.get(
        fake.url + OBSERVATIONS_PATH,
        params={"limit": 2, "cursor": first["meta"]["cursor"]},
        auth=auth,
    ).json()
    assert [o["id"] for o in last["data"]] == ["o0"]
    assert last["meta"] == {}  # absent, not null: hasMore is false
    assert client.observations.get_many(limit=5, request_options=NO_RETRY).meta.cursor is None


def test_continuation_pages_short_and_empty_until_the_cursor_is_absent(
    client: LangfuseAPI, shared_httpx: httpx.Client
) -> None:
    observations = [make_obs(f"o{i:03d}", BASE + timedelta(seconds=i)) for i in range(120)]
    expected = [o["id"] for o in reversed(observations)]
    runs: list[list[int]] = []
    for _ in range(2):
        with FakeLangfuse.kind(seed=7, empty_page_share=0.25, cut_page_share=0.5) as fake:
            fake.add_observations(observations)
            api = LangfuseAPI(
                base_url=fake.url,
                username=fake.public_key,
                password=fake.secret_key,
                httpx_client=shared_httpx,
            )
            ids, sizes = list_all(api, limit=20)
            assert ids == expected  # all of them, each once, in order
            runs.append(sizes)
    sizes = runs[0]
    assert runs[1] == sizes  # the seed decides every page
    assert 0 in sizes[:-1]  # an empty page in the middle, with a cursor: not the end
    assert any(0 < n < 20 for n in sizes[:-1])  # cut pages
    # A client that stops at the first empty page misses the rest.
    stopped_at = sizes.index(0)
    assert sum(sizes[:stopped_at]) < len(expected)


def test_an_empty_listing_may_still_send_one_cursor(client: LangfuseAPI) -> None:
    with FakeLangfuse.kind(seed=1, empty_page_share=0.999) as fake:
        api = LangfuseAPI(base_url=fake.url, username=fake.public_key, password=fake.secret_key)
        ids, sizes = list_all(api)
        assert (ids, sizes) == ([], [0, 0])  # an empty page with a cursor, then the end


def test_a_kind_fake_pages_fully(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    fake.add_observations(make_obs(f"o{i}", BASE + timedelta(seconds=i)) for i in range(45))
    assert list_all(client, limit=20)[1] == [20, 20, 5]


def test_every_answer_carries_the_fake_clocks_date(
    fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client
) -> None:
    clock = SimulatedClock(datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC))
    fake.clock = clock
    expected = "Tue, 06 May 2031 07:08:09 GMT"
    assert http.get(fake.url + "/api/public/health").headers["date"] == expected
    assert http.get(fake.url + OBSERVATIONS_PATH).headers["date"] == expected  # a 401 too
    assert http.get(fake.url + "/nowhere").headers["date"] == expected
    clock.advance(61)
    response = client.observations.with_raw_response.get_many(request_options=NO_RETRY)
    assert response.headers["date"] == "Tue, 06 May 2031 07:09:10 GMT"


def test_ingestion_delay_is_measured_on_the_fake_clock(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    clock = SimulatedClock(BASE)
    fake.clock = clock
    fake.add_observations([make_obs("slow", BASE - timedelta(seconds=5))], delay_s=60)
    fake.add_observations(
        [make_obs("old-sdk", BASE), make_obs("new-sdk", BASE + timedelta(seconds=1))],
        delay_s=lambda o: INGESTION_DELAY_BOUND_S if o["id"] == "old-sdk" else 0.0,
    )

    def listed() -> list[str]:
        return list_all(client)[0]

    assert listed() == ["new-sdk"]
    assert fake.pending_observations() == 2
    clock.advance(59.999)
    assert listed() == ["new-sdk"]
    clock.advance(0.001)
    assert listed() == ["new-sdk", "slow"]
    clock.set(BASE + timedelta(seconds=INGESTION_DELAY_BOUND_S))  # the documented 15 minutes
    assert listed() == ["new-sdk", "old-sdk", "slow"]
    assert fake.pending_observations() == 0

    # A replacement shows only once it has landed; until then the old version is listed.
    fake.add_observations([make_obs("slow", BASE - timedelta(seconds=5), name="v2")], delay_s=30)
    assert client.observations.get_many(request_options=NO_RETRY).data[-1].name == "name-slow"
    clock.advance(30)
    assert client.observations.get_many(request_options=NO_RETRY).data[-1].name == "v2"


def test_ingestion_jitter_is_seeded() -> None:
    def visible_after(seconds: float) -> list[str]:
        clock = SimulatedClock(BASE)
        fake = FakeLangfuse.kind(seed=3, ingestion_delay_s=1.0, ingestion_jitter_s=10.0)
        fake.clock = clock
        fake.add_observations(make_obs(f"o{i}", BASE) for i in range(20))
        clock.advance(seconds)
        return sorted(o["id"] for o in fake.visible_observations())

    assert visible_after(0.999) == []
    assert 0 < len(visible_after(6)) < 20
    assert visible_after(6) == visible_after(6)
    assert len(visible_after(11)) == 20


def test_roots_are_computed_the_servers_way(client: LangfuseAPI) -> None:
    with FakeLangfuse.kind(compute_roots=True) as fake:
        api = LangfuseAPI(base_url=fake.url, username=fake.public_key, password=fake.secret_key)
        fake.add_observations(
            [
                make_obs("turn-1", BASE),
                make_obs("gen-1", BASE + timedelta(seconds=1), parent="turn-1"),
                make_obs("turn-2", BASE + timedelta(minutes=5)),  # a second turn, same trace
                # An app root under a remote parent (a span of another service).
                make_obs("app", BASE + timedelta(minutes=6), parent="remote-span"),
                # Written the old way: a parent and isRootObservation true is an app root too.
                {**make_obs("marked", BASE + timedelta(minutes=7), parent="remote-2")}
                | {"isRootObservation": True},
                # No parent is a root, whatever the caller wrote.
                make_obs("liar", BASE + timedelta(minutes=8)) | {"isRootObservation": False},
            ],
            app_roots={"app"},
        )
        roots, _ = list_all(api, is_root_observation=True)
        assert roots == ["liar", "marked", "app", "turn-2", "turn-1"]
        children, _ = list_all(api, is_root_observation=False)
        assert children == ["gen-1"]


def test_a_kind_fake_keeps_the_roots_it_was_given(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    fake.add_observations(
        [
            make_obs("root", BASE),
            make_obs("flat", BASE + timedelta(seconds=1)) | {"isRootObservation": False},
            make_obs("child", BASE + timedelta(seconds=2), parent="root"),
            make_obs("app", BASE + timedelta(seconds=3), parent="remote"),
        ],
        app_roots={"app"},
    )
    assert list_all(client, is_root_observation=True)[0] == ["app", "root"]


def test_client_times_are_stored_as_given_however_wrong(
    fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client
) -> None:
    fake.clock = SimulatedClock(BASE)
    future = make_obs("future", datetime(2099, 1, 1, tzinfo=UTC))
    past = make_obs("past", datetime(1999, 12, 31, 23, 59, tzinfo=UTC))
    fake.add_observations([future, past])
    page = http.get(fake.url + OBSERVATIONS_PATH, auth=(fake.public_key, fake.secret_key)).json()[
        "data"
    ]
    assert [(o["id"], o["startTime"]) for o in page] == [
        ("future", future["startTime"]),
        ("past", past["startTime"]),
    ]
    # A window that ends at Langfuse's now leaves the future trace out, as the server does.
    assert list_all(client, to_start_time=BASE)[0] == ["past"]
    client.scores.create(
        request=[score("s", "n", 1.0, datetime(2099, 1, 1, 3, tzinfo=UTC))],
        request_options=NO_RETRY,
    )
    assert fake.score_key(fake.live_scores()[0]) == ("s", "n", "2099-01-01")


def test_an_older_server_refuses_array_score_bodies(
    fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client
) -> None:
    assert client.health.health(request_options=NO_RETRY).version == "4.60.0"
    fake.server_version = "4.16.0"
    assert client.health.health(request_options=NO_RETRY).version == "4.16.0"
    with pytest.raises(BadRequestError) as refused:
        client.scores.create(request=[score("s1", "n", 0.5, BASE)], request_options=NO_RETRY)
    assert refused.value.body["message"] == "Invalid request data"
    assert refused.value.body["error"][0]["code"] == "invalid_type"
    assert refused.value.body["error"][0]["received"] == "array"
    # What it did parse: one object, answered with its id.
    one = http.post(
        fake.url + SCORES_PATH,
        json={"id": "s1", "traceId": "t1", "name": "n", "value": 0.5, "timestamp": iso(BASE)},
        auth=(fake.public_key, fake.secret_key),
    )
    assert (one.status_code, one.json()) == (200, {"id": "s1"})
    assert [s["id"] for s in fake.live_scores()] == ["s1"]
    fake.server_version = "4.59.0"
    client.scores.create(request=[score("s2", "n", 0.5, BASE)], request_options=NO_RETRY)
    assert len(fake.live_scores()) == 2


def test_reads_and_score_posts_share_one_rate_limit_bucket(
    fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client
) -> None:
    clock = SimulatedClock(BASE)
    fake.clock = clock
    fake.rate_limits = RateLimits(general_per_minute=4, score_deletes_per_day=2)
    ok = client.observations.with_raw_response.get_many(request_options=NO_RETRY)
    assert not any(h.startswith("x-ratelimit") for h in ok.headers)  # only 429s carry them
    client.scores.create(request=[score("s", "n", 1.0, BASE)], request_options=NO_RETRY)
    http.get(fake.url + "/api/public/health")  # never limited
    clock.advance(20)
    client.observations.get_many(request_options=NO_RETRY)
    # The 4th request leaves no point: refused (remainingPoints < 1), like the 5th.
    with pytest.raises(ApiError) as limited:
        client.scores.create(request=[score("s", "n", 1.0, BASE)], request_options=NO_RETRY)
    assert limited.value.status_code == 429
    assert limited.value.headers is not None
    headers = limited.value.headers
    assert headers["retry-after"] == "40"
    assert (headers["x-ratelimit-limit"], headers["x-ratelimit-remaining"]) == ("4", "0")
    assert (
        headers["x-ratelimit-reset"]
        == "Fri Nov 20 2026 08:01:00 GMT+0000 (Coordinated Universal Time)"
    )
    assert limited.value.body == {
        "message": "Rate limit exceeded",
        "code": "rate_limited",
        "details": {
            "retryAfterSeconds": 40,
            "limit": 4,
            "remaining": 0,
            "resetAt": "2026-11-20T08:01:00.000Z",
        },
    }
    # Deletes have their own bucket, per day.
    client.scores.delete("s", request_options=NO_RETRY)
    with pytest.raises(ApiError) as deletes:
        client.scores.delete("s", request_options=NO_RETRY)
    assert deletes.value.status_code == 429
    assert deletes.value.headers is not None
    assert deletes.value.headers["retry-after"] == "86400"  # from its own first request
    clock.advance(39.5)
    with pytest.raises(ApiError):
        client.observations.get_many(request_options=NO_RETRY)
    clock.advance(0.5)  # the window ends a minute after its first request
    client.observations.get_many(request_options=NO_RETRY)
    assert [r.status for r in fake.requests if r.path == OBSERVATIONS_PATH] == [
        200,
        200,
        429,
        200,
    ]
    assert len(fake.live_scores()) == 0  # the delete went through before the limit


def test_a_body_over_one_mib_is_nextjs_413(fake: FakeLangfuse, http: httpx.Client) -> None:
    fake.max_body_bytes = 1024 * 1024
    auth = (fake.public_key, fake.secret_key)
    headers = {"Content-Type": "application/json"}

    def body_of(size: int) -> bytes:
        empty = json.dumps([{"traceId": "t1", "name": "n", "value": 1, "comment": ""}]).encode()
        padded = json.dumps(
            [{"traceId": "t1", "name": "n", "value": 1, "comment": "x" * (size - len(empty))}]
        ).encode()
        assert len(padded) == size
        return padded

    exact = http.post(
        fake.url + SCORES_PATH, content=body_of(1024 * 1024), headers=headers, auth=auth
    )
    assert exact.status_code == 202
    over = http.post(
        fake.url + SCORES_PATH, content=body_of(1024 * 1024 + 1), headers=headers, auth=auth
    )
    assert over.status_code == 413
    assert over.text == "Body exceeded 1mb limit"
    assert "content-type" not in over.headers
    assert over.reason_phrase == "Body exceeded 1mb limit"
    wrong_key = http.post(fake.url + SCORES_PATH, content=body_of(1024 * 1024 + 1), headers=headers)
    assert wrong_key.status_code == 413  # the body is parsed before auth
    assert len(fake.live_scores()) == 1


def test_usage_suspended_refuses_score_posts_with_403(
    fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client
) -> None:
    fake.usage_suspended = True
    with pytest.raises(AccessDeniedError) as suspended:
        client.scores.create(request=[score("s", "n", 1.0, BASE)], request_options=NO_RETRY)
    assert suspended.value.status_code == 403
    assert suspended.value.body == {
        "message": "Ingestion suspended: Usage threshold exceeded. Please upgrade your plan.",
        "error": "ForbiddenError",
    }
    # An invalid body is still a 400 first; reads, configs and deletes go on.
    bad = http.post(
        fake.url + SCORES_PATH, json=[{"name": "n"}], auth=(fake.public_key, fake.secret_key)
    )
    assert bad.status_code == 400
    client.observations.get_many(request_options=NO_RETRY)
    client.score_configs.get(request_options=NO_RETRY)
    client.scores.delete("s", request_options=NO_RETRY)
    assert fake.live_scores() == [] and fake.score_posts == []
    fake.usage_suspended = False
    client.scores.create(request=[score("s", "n", 1.0, BASE)], request_options=NO_RETRY)
    assert len(fake.live_scores()) == 1


def test_delete_removes_every_stored_score_with_that_id(
    fake: FakeLangfuse, client: LangfuseAPI, http: httpx.Client
) -> None:
    next_day = BASE + timedelta(days=1)
    client.scores.create(
        request=[
            score("s1", "faithfulness", 0.5, BASE),
            score("s1", "faithfulness", 0.6, next_day),  # another day: a second stored score
            score("s2", "faithfulness", 0.7, BASE, trace_id="t2"),
        ],
        request_options=NO_RETRY,
    )
    assert {n: len(v) for n, v in fake.scores_by_trace()["t1"].items()} == {"faithfulness": 2}
    client.scores.delete("s1", request_options=NO_RETRY)
    assert [s["id"] for s in fake.live_scores()] == ["s2"]
    assert fake.live_scores("t1") == []
    assert fake.score_deletes == ["s1"]
    auth = (fake.public_key, fake.secret_key)
    unknown = http.delete(f"{fake.url}{SCORES_PATH}/never-stored", auth=auth)
    assert (unknown.status_code, unknown.json()) == (
        202,
        {"message": "Score deletion queued successfully"},
    )
    assert http.delete(f"{fake.url}{SCORES_PATH}/s2").status_code == 401
    assert http.get(f"{fake.url}{SCORES_PATH}/s2", auth=auth).status_code == 405


def test_scores_are_keyed_by_id_name_and_day(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    evening = BASE.replace(hour=23)
    client.scores.create(
        request=[
            score("s1", "confidence", 0.1, BASE),
            score("s1", "confidence", 0.2, evening),  # same key: replaces
            score("s1", "ungrounded", 0.0, BASE, data_type="BOOLEAN"),  # same id, other name
            score("s1", "confidence", 0.3, BASE + timedelta(days=1)),  # other day: another
        ],
        request_options=NO_RETRY,
    )
    keys = sorted(fake.score_key(s) for s in fake.live_scores())
    assert keys == [
        ("s1", "confidence", "2026-11-20"),
        ("s1", "confidence", "2026-11-21"),
        ("s1", "ungrounded", "2026-11-20"),
    ]
    by_name = fake.scores_by_trace()["t1"]
    assert sorted(s["value"] for s in by_name["confidence"]) == [0.2, 0.3]
    assert fake.duplicates() == [("t1", "confidence")]


def test_presets_switch_every_behaviour_together() -> None:
    assert FakeLangfuse().behaviour == DEFAULT_BEHAVIOUR
    kind = FakeLangfuse.kind()
    assert (kind.empty_page_share, kind.cut_page_share, kind.ingestion_jitter_s) == (0, 0, 0)
    assert not kind.compute_roots and kind.max_body_bytes is None and kind.rate_limits is None
    like = FakeLangfuse.service_like(seed=5)
    assert like.behaviour == SERVICE_LIKE
    assert like.empty_page_share > 0 and like.cut_page_share > 0
    assert 0 < like.ingestion_jitter_s < INGESTION_DELAY_BOUND_S
    assert like.compute_roots and like.max_body_bytes == 1024 * 1024
    assert like.server_version == kind.server_version == "4.60.0"
    cloud = FakeLangfuse.service_like(rate_limits=HOBBY)
    assert cloud.rate_limits == RateLimits(general_per_minute=30, score_deletes_per_day=50)
    assert FakeLangfuse(KIND).behaviour == KIND


def test_a_service_like_fake_still_lists_everything_once(shared_httpx: httpx.Client) -> None:
    clock = SimulatedClock(BASE)
    with FakeLangfuse.service_like(seed=11) as fake:
        fake.clock = clock
        observations = [
            make_obs(f"o{i:03d}", BASE - timedelta(seconds=i), trace_id=f"t{i % 7}")
            for i in range(300)
        ]
        fake.add_observations(observations)
        api = LangfuseAPI(
            base_url=fake.url,
            username=fake.public_key,
            password=fake.secret_key,
            httpx_client=shared_httpx,
        )
        clock.advance(fake.ingestion_jitter_s)
        ids, sizes = list_all(api, limit=50)
        assert sorted(ids) == sorted(o["id"] for o in observations)
        assert len(sizes) > 300 // 50 + 1


def test_listed_is_a_listing_without_page_cuts() -> None:
    fake = FakeLangfuse.service_like(seed=2)
    fake.clock = SimulatedClock(BASE)
    fake.add_observations(
        [
            make_obs("a", BASE, trace_id="t1", metadata={"long": "y" * 300, "kept": "z" * 300}),
            make_obs("b", BASE + timedelta(seconds=1), trace_id="t1", parent="a"),
            make_obs("c", BASE, trace_id="t2"),
        ],
        delay_s=0,
    )
    listed = fake.listed(trace_id="t1", fields="core,metadata", expand_metadata=["kept"])
    assert [o["id"] for o in listed] == ["b", "a"]
    assert set(listed[0]) == set(FIELD_GROUPS["core"]) | {"metadata"}
    assert listed[1]["metadata"] == {"long": "y" * 200, "kept": "z" * 300}


def test_the_default_delay_counts_from_when_the_data_was_sent() -> None:
    clock = SimulatedClock(BASE)
    fake = FakeLangfuse.service_like(seed=4, ingestion_delay_s=60.0, ingestion_jitter_s=0.0)
    fake.clock = clock
    fake.add_observations(
        [
            make_obs("yesterday", BASE - timedelta(days=1)),  # sent long ago: landed
            make_obs("now", BASE - timedelta(milliseconds=300)),  # ends now: 60 s from now
        ]
    )
    # An explicit delay counts from now, whatever the client's clock wrote.
    fake.add_observations([make_obs("behind", BASE - timedelta(hours=3))], delay_s=60)
    assert [o["id"] for o in fake.visible_observations()] == ["yesterday"]
    clock.advance(60)
    assert [o["id"] for o in fake.visible_observations()] == ["now", "behind", "yesterday"]
