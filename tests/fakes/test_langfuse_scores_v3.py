"""The fake's `GET /api/public/v3/scores`, driven by the real langfuse 5 API client
(`scores.get_many`), against what the v4.16 OpenAPI spec documents."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from langfuse.api.client import LangfuseAPI
from langfuse.api.core.api_error import ApiError
from langfuse.api.core.request_options import RequestOptions
from langfuse.api.scores.types.create_score_request import CreateScoreRequest
from langfuse.api.scores.types.score_subject_v3 import (
    ScoreSubjectV3_Observation,
    ScoreSubjectV3_Trace,
)
from langfuse.api.scores.types.score_v3 import (
    ScoreV3_Boolean,
    ScoreV3_Categorical,
    ScoreV3_Numeric,
)

from .clock import SimulatedClock
from .langfuse_server import KIND, SCORES_V3_MAX_LIMIT, FakeLangfuse, RateLimits

NO_RETRY: RequestOptions = {"max_retries": 0}
BASE = datetime(2026, 11, 20, 8, 0, 0, tzinfo=UTC)
V3 = "/api/public/v3/scores"


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse(KIND, clock=SimulatedClock(BASE)) as server:
        yield server


@pytest.fixture
def client(fake: FakeLangfuse) -> Iterator[LangfuseAPI]:
    with httpx.Client(timeout=5) as transport:
        yield LangfuseAPI(
            base_url=fake.url,
            username=fake.public_key,
            password=fake.secret_key,
            timeout=5,
            httpx_client=transport,
        )


def annotate(fake: FakeLangfuse, n: int, **kwargs: Any) -> list[dict[str, Any]]:
    """`n` BOOLEAN annotations a minute apart, the newest at BASE."""
    return [
        fake.add_annotation_score(
            trace_id=kwargs.pop("trace_id", f"t{i}"),
            value=i % 2 == 0,
            timestamp=BASE - timedelta(minutes=i),
            score_id=f"a{i:03d}",
            **kwargs,
        )
        for i in range(n)
    ]


def every_page(client: LangfuseAPI, **kwargs: Any) -> tuple[list[Any], list[int]]:
    scores: list[Any] = []
    sizes: list[int] = []
    cursor: str | None = None
    while True:
        page = client.scores.get_many(cursor=cursor, request_options=NO_RETRY, **kwargs)
        scores += page.data
        sizes.append(len(page.data))
        cursor = page.meta.cursor
        if cursor is None:
            return scores, sizes


def test_core_fields_always_groups_on_request_and_values_typed(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    fake.add_annotation_score(
        trace_id="t1",
        observation_id="o1",
        name="faithful",
        value=False,
        timestamp=BASE,
        queue_id="q1",
        author_user_id="u1",
        comment="the date is wrong",
        score_id="a1",
    )
    fake.add_annotation_score(
        trace_id="t2", name="quality", value=0.25, data_type="NUMERIC", timestamp=BASE
    )
    client.scores.create(
        request=[
            CreateScoreRequest(
                id="s1",
                trace_id="t3",
                name="band",
                value="LOW",
                data_type="CATEGORICAL",
                timestamp=BASE,
                metadata={"judge_model": "m"},
            )
        ],
        request_options=NO_RETRY,
    )
    raw = httpx.get(fake.url + V3, auth=(fake.public_key, fake.secret_key)).json()
    core = {
        "id",
        "projectId",
        "name",
        "value",
        "dataType",
        "source",
        "timestamp",
        "environment",
        "createdAt",
        "updatedAt",
    }
    assert all(set(s) == core for s in raw["data"])
    assert raw["meta"] == {"limit": 50}  # one page: no cursor at all

    by_id = {s.id: s for s in client.scores.get_many(request_options=NO_RETRY).data}
    person = by_id["a1"]
    assert isinstance(person, ScoreV3_Boolean) and person.value is False
    assert person.source == "ANNOTATION" and person.subject is None and person.queue_id is None
    assert isinstance(by_id["s1"], ScoreV3_Categorical) and by_id["s1"].value == "LOW"
    assert by_id["s1"].source == "API"
    numeric = next(s for s in by_id.values() if s.name == "quality")
    assert isinstance(numeric, ScoreV3_Numeric) and numeric.value == 0.25

    full = {
        s.id: s
        for s in client.scores.get_many(
            fields="details,subject,annotation", request_options=NO_RETRY
        ).data
    }
    person = full["a1"]
    assert (person.queue_id, person.author_user_id, person.comment) == (
        "q1",
        "u1",
        "the date is wrong",
    )
    assert person.subject == ScoreSubjectV3_Observation(id="o1", trace_id="t1")
    assert full["s1"].subject == ScoreSubjectV3_Trace(id="t3")
    assert full["s1"].metadata == {"judge_model": "m"}


def test_an_unknown_field_group_and_a_limit_over_100_are_400(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    for kwargs in ({"fields": "subject,people"}, {"limit": SCORES_V3_MAX_LIMIT + 1}):
        with pytest.raises(ApiError) as refused:
            client.scores.get_many(request_options=NO_RETRY, **kwargs)
        assert refused.value.status_code == 400
    assert len(client.scores.get_many(limit=100, request_options=NO_RETRY).data) == 0


def test_pages_by_cursor_until_it_is_absent(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    annotate(fake, 230)
    scores, sizes = every_page(client, limit=100)
    assert sizes == [100, 100, 30]
    assert [s.id for s in scores] == [f"a{i:03d}" for i in range(230)]  # newest first
    # A listing that ends on a full page: the last page carries no cursor either.
    exact, sizes = every_page(client, limit=46)
    assert sizes == [46] * 5 and len({s.id for s in exact}) == 230
    # Default limit 50; the cursor is base64url.
    first = client.scores.get_many(request_options=NO_RETRY)
    assert len(first.data) == 50 and first.meta.limit == 50
    cursor = first.meta.cursor
    assert cursor is not None and set(cursor) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    )
    assert json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))["lastId"]
    with pytest.raises(ApiError) as bad:
        client.scores.get_many(cursor="not a cursor", request_options=NO_RETRY)
    assert bad.value.status_code == 400


def test_comma_list_filters_and_the_time_window(fake: FakeLangfuse, client: LangfuseAPI) -> None:
    annotate(fake, 6, queue_id="q1", author_user_id="u1")
    fake.add_annotation_score(
        trace_id="tq", value=True, timestamp=BASE, queue_id="q2", author_user_id="u2"
    )
    fake.add_annotation_score(
        trace_id="tn", name="helpful", value=1.0, data_type="NUMERIC", timestamp=BASE
    )
    client.scores.create(
        request=[CreateScoreRequest(trace_id="t0", name="faithful", value=1, timestamp=BASE)],
        request_options=NO_RETRY,
    )

    def ids(**kwargs: Any) -> set[str]:
        scores, _ = every_page(client, fields="subject", **kwargs)
        return {s.id for s in scores}

    every = ids()
    assert len(every) == 9
    annotations = ids(source="annotation")  # case-insensitive
    assert len(annotations) == 8 and ids(source="API,ANNOTATION") == every
    assert ids(name="faithful", source="ANNOTATION") == annotations - ids(name="helpful")
    assert len(ids(data_type="numeric")) == 2  # the API score and the helpful one
    assert ids(queue_id="q2") == ids(author_user_id="u2") and len(ids(queue_id="q2")) == 1
    assert ids(id="a001,a003") == {"a001", "a003"}
    assert ids(trace_id="t1,t2") == {"a001", "a002"}
    assert ids(environment="production") == set()
    # fromTimestamp inclusive, toTimestamp exclusive.
    window = ids(
        source="ANNOTATION",
        name="faithful",
        from_timestamp=BASE - timedelta(minutes=4),
        to_timestamp=BASE - timedelta(minutes=1),
    )
    assert window == {"a004", "a003", "a002"}
    assert ids(data_type="BOOLEAN", value="false") == {"a001", "a003", "a005"}
    assert ids(data_type="NUMERIC", value_min=0.5, value_max=1) == ids(data_type="NUMERIC")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"observation_id": "o1"},  # needs traceId
        {"trace_id": "t1", "session_id": "s1"},  # mutually exclusive
        {"value": "true"},  # needs one dataType
        {"data_type": "BOOLEAN,NUMERIC", "value": "1"},
        {"data_type": "TEXT", "value": "x"},
        {"data_type": "BOOLEAN", "value": "yes"},
        {"data_type": "BOOLEAN", "value_min": 0.0},  # NUMERIC only
        {"data_type": "NUMERIC", "value": "nan"},
    ],
)
def test_filters_the_spec_refuses_are_400(client: LangfuseAPI, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as refused:
        client.scores.get_many(request_options=NO_RETRY, **kwargs)
    assert refused.value.status_code == 400


def test_the_listing_counts_in_the_general_rate_limit_bucket(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    fake.rate_limits = RateLimits(general_per_minute=3, score_deletes_per_day=10)
    client.observations.get_many(request_options=NO_RETRY)
    client.scores.get_many(request_options=NO_RETRY)
    with pytest.raises(ApiError) as limited:
        client.scores.get_many(request_options=NO_RETRY)
    assert limited.value.status_code == 429
    assert limited.value.headers is not None
    assert limited.value.headers["x-ratelimit-limit"] == "3"
    assert limited.value.headers["retry-after"] == "60"


def test_an_annotation_replaces_on_its_key_and_deletes_like_any_score(
    fake: FakeLangfuse, client: LangfuseAPI
) -> None:
    fake.add_annotation_score(trace_id="t1", value=True, timestamp=BASE, score_id="a")
    assert isinstance(fake.clock, SimulatedClock)
    fake.clock.advance(60)
    fake.add_annotation_score(trace_id="t1", value=False, timestamp=BASE, score_id="a")
    (only,) = client.scores.get_many(request_options=NO_RETRY).data
    assert only.value is False and only.updated_at > only.created_at
    client.scores.delete("a", request_options=NO_RETRY)
    assert client.scores.get_many(request_options=NO_RETRY).data == []
    with pytest.raises(ValueError):
        fake.add_annotation_score(trace_id="t1", value=2.0)  # BOOLEAN is 0 or 1
