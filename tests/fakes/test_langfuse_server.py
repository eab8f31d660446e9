"""Tests of the fake Langfuse server itself, driven by the real langfuse 5 API client."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from langfuse.api.client import LangfuseAPI
from langfuse.api.commons.errors.error import Error as BadRequestError
from langfuse.api.commons.errors.not_found_error import NotFoundError
from langfuse.api.commons.errors.unauthorized_error import UnauthorizedError
from langfuse.api.core.api_error import ApiError
from langfuse.api.core.request_options import RequestOptions
from langfuse.api.scores.types.create_score_batch_results import CreateScoreBatchResults
from langfuse.api.scores.types.create_score_request import CreateScoreRequest

from .langfuse_server import FIELD_GROUPS, OBSERVATIONS_PATH, SCORES_PATH, FakeLangfuse

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
    with FakeLangfuse() as server:
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
    assert health.json() == {"status": "OK", "version": "4.16.0"}
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
    deadline = time.monotonic() + 5
    while fake.in_flight == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
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
