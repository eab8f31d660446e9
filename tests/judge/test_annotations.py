"""People's scores read from the fake Langfuse on loopback, through the SDK's v3 call,
within the request budget (a fake clock: no real sleep)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from observer.errors import AuthRejected, Unreachable
from observer.judge.annotations import Annotation, AnnotationReader
from observer.langfuse_api import build_api
from observer.sources.langfuse import Stopped
from observer.sources.ratelimit import RateLimiter
from tests.fakes.clock import StepClock
from tests.fakes.langfuse_server import KIND, FakeLangfuse, RateLimits

V3 = "/api/public/v3/scores"


@pytest.fixture
def clock() -> StepClock:
    return StepClock(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))


@pytest.fixture
def fake(clock: StepClock) -> Iterator[FakeLangfuse]:
    with FakeLangfuse(KIND, clock=clock.wall) as server:
        yield server


def reader(
    fake: FakeLangfuse, clock: StepClock, **kwargs: Any
) -> tuple[AnnotationReader, RateLimiter]:
    limiter = RateLimiter(clock=clock.time, sleep=clock.sleep)
    api = build_api(fake.url, fake.public_key, fake.secret_key, 5)
    return AnnotationReader(api, limiter, **kwargs), limiter


def label(fake: FakeLangfuse, n: int, start: datetime, **kwargs: Any) -> None:
    """`n` people's labels a minute apart from `start` on, alternating faithful or not."""
    for i in range(n):
        fake.add_annotation_score(
            trace_id=f"trace-{i:04d}",
            name="faithful",
            value=i % 3 != 0,
            timestamp=start + timedelta(minutes=i),
            **kwargs,
        )


def v3_requests(fake: FakeLangfuse) -> list[int]:
    return [r.status for r in fake.requests if r.path == V3]


def test_every_page_is_read_until_the_cursor_is_absent(
    fake: FakeLangfuse, clock: StepClock
) -> None:
    start = clock.wall() - timedelta(days=1)
    label(fake, 250, start, queue_id="q-faithfulness", author_user_id="u-ana")
    read, _ = reader(fake, clock)
    got = read.read("faithful", start, clock.wall())
    assert len(got) == 250 and len({a.trace_id for a in got}) == 250
    assert v3_requests(fake) == [200, 200, 200]  # 100 + 100 + 50
    query = fake.requests[0].query
    assert query["source"] == ["ANNOTATION"] and query["name"] == ["faithful"]
    assert query["limit"] == ["100"] and set(query["fields"][0].split(",")) == {
        "subject",
        "annotation",
        "details",
    }
    first = next(a for a in got if a.trace_id == "trace-0000")
    assert first == Annotation(
        score_id=first.score_id,
        trace_id="trace-0000",
        observation_id=None,
        name="faithful",
        data_type="BOOLEAN",
        value=False,
        timestamp=start,
        queue_id="q-faithfulness",
        author_user_id="u-ana",
        environment="default",
        metadata=first.metadata,
        project_id="fake-project",
    )
    assert first.unfaithful(0.5) is True
    assert sum(a.unfaithful(0.5) is True for a in got) == 84  # i % 3 == 0


def test_only_people_s_scores_of_that_name_in_the_window(
    fake: FakeLangfuse, clock: StepClock
) -> None:
    now = clock.wall()
    start, end = now - timedelta(hours=2), now - timedelta(hours=1)
    fake.add_annotation_score(trace_id="at-start", value=True, timestamp=start)  # inclusive
    fake.add_annotation_score(trace_id="at-end", value=True, timestamp=end)  # exclusive
    fake.add_annotation_score(
        trace_id="before", value=True, timestamp=start - timedelta(milliseconds=1)
    )
    fake.add_annotation_score(
        trace_id="graded",
        observation_id="gen-1",
        value=0.3,
        data_type="NUMERIC",
        timestamp=start + timedelta(minutes=5),
    )
    fake.add_annotation_score(
        trace_id="other-name", name="helpful", value=True, timestamp=start + timedelta(minutes=1)
    )
    fake.add_annotation_score(
        trace_id="tone", value=True, timestamp=start + timedelta(minutes=2), queue_id=None
    )
    api = build_api(fake.url, fake.public_key, fake.secret_key, 5)
    api.scores.create(  # observer's own score of that name: source API, not a person's
        request=[
            {
                "traceId": "ours",
                "name": "faithful",
                "value": 1,
                "dataType": "BOOLEAN",
                "timestamp": (start + timedelta(minutes=3)).isoformat(),
            }
        ]
    )
    read, _ = reader(fake, clock)
    got = {a.trace_id: a for a in read.read("faithful", start, end)}
    assert set(got) == {"at-start", "graded", "tone"}
    graded = got["graded"]
    assert (graded.observation_id, graded.data_type, graded.value) == ("gen-1", "NUMERIC", 0.3)
    assert graded.unfaithful(0.5) is True and graded.unfaithful(0.25) is False
    assert got["tone"].queue_id is None  # written in the UI, not in a queue


def test_a_429_is_honoured_and_settles_the_shared_budget(
    fake: FakeLangfuse, clock: StepClock
) -> None:
    start = clock.wall() - timedelta(hours=3)
    label(fake, 120, start)
    fake.rate_limits = RateLimits(general_per_minute=2, score_deletes_per_day=10)
    read, limiter = reader(fake, clock)
    got = read.read("faithful", start, clock.wall())
    assert len(got) == 120
    statuses = v3_requests(fake)
    assert statuses == [200, 429, 200]  # the window's one point, its 429, the next window
    assert limiter.settled_limit == 2
    retry = fake.requests[1]
    assert clock.now >= 60.0  # the Retry-After (to the window's end) was waited out
    assert retry.status == 429 and fake.requests[2].time >= retry.time


def test_an_unreachable_langfuse_is_retried_then_raised(
    fake: FakeLangfuse, clock: StepClock
) -> None:
    label(fake, 3, clock.wall() - timedelta(minutes=10))
    read, _ = reader(fake, clock, max_attempts=2)
    fake.fail_next(503, count=1, path_prefix=V3)
    assert len(read.read("faithful", clock.wall() - timedelta(hours=1), clock.wall())) == 3
    fake.fail_next(503, count=5, path_prefix=V3)
    with pytest.raises(Unreachable):
        read.read("faithful", clock.wall() - timedelta(hours=1), clock.wall())
    fake.clear_failures()
    fake.public_key = "pk-other"
    with pytest.raises(AuthRejected):  # not retried
        read.read("faithful", clock.wall() - timedelta(hours=1), clock.wall())
    assert v3_requests(fake).count(401) == 1


def test_a_shutdown_ends_the_wait_for_a_slot(fake: FakeLangfuse, clock: StepClock) -> None:
    label(fake, 3, clock.wall() - timedelta(minutes=10))
    limiter = RateLimiter(clock=clock.time, sleep=clock.sleep)
    limiter.block_for(600)
    api = build_api(fake.url, fake.public_key, fake.secret_key, 5)
    read = AnnotationReader(api, limiter, should_stop=lambda: True)
    with pytest.raises(Stopped):
        read.read("faithful", clock.wall() - timedelta(hours=1), clock.wall())
    assert v3_requests(fake) == []
