"""The Langfuse edge: the server's version, read from the fake's health endpoint with the
SDK's own client, and the translation of its refusals."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langfuse.api.core.api_error import ApiError
from structlog.testing import capture_logs

from observer.errors import (
    AuthRejected,
    RateLimited,
    Rejected,
    Unreachable,
    UnsupportedServer,
    UsageSuspended,
)
from observer.langfuse_api import (
    MIN_SERVER_VERSION,
    ServerVersion,
    assess_server_version,
    build_api,
    check_server_version,
    is_cloud,
    translate,
)
from tests.fakes.langfuse_server import FakeLangfuse

SELF_HOSTED = "https://langfuse.internal.example"


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


def check(fake: FakeLangfuse) -> ServerVersion:
    api = build_api(fake.url, fake.public_key, fake.secret_key, 5)
    return check_server_version(api, fake.url)


@pytest.mark.parametrize("version", ["4.59.0", "4.60.0", "5.0.0", "v4.59.0", "4.59.0-rc.1"])
def test_a_server_that_takes_score_batches_passes(fake: FakeLangfuse, version: str) -> None:
    fake.server_version = version
    assert check(fake) == ServerVersion(version, cloud=False, known=True)


@pytest.mark.parametrize("version", ["4.58.9", "4.16.0", "3.120.0", "v2.0.0"])
def test_an_older_server_is_refused_naming_both_versions(fake: FakeLangfuse, version: str) -> None:
    fake.server_version = version
    with pytest.raises(UnsupportedServer) as raised:
        check(fake)
    message = str(raised.value)
    assert version in message and "v4.59.0" in message and "upgrade" in message
    assert (raised.value.version, raised.value.needed) == (version, MIN_SERVER_VERSION)


@pytest.mark.parametrize("version", ["", "dev", "main-1a2b3c", "latest"])
def test_a_version_that_does_not_parse_is_let_through_with_a_warning(
    fake: FakeLangfuse, version: str
) -> None:
    fake.server_version = version
    with capture_logs() as logs:
        judged = check(fake)
    assert not judged.known and not judged.cloud
    assert [e["event"] for e in logs] == ["server_version_unknown"]


def test_an_unreachable_health_endpoint_is_the_callers_to_judge(fake: FakeLangfuse) -> None:
    fake.fail_next(503, path_prefix="/api/public/health")
    with pytest.raises(Unreachable):
        check(fake)
    fake.stop()
    with pytest.raises(Unreachable):
        check(fake)


def test_health_needs_no_keys(fake: FakeLangfuse) -> None:
    api = build_api(fake.url, "pk-lf-other", "sk-lf-other", 5)
    assert check_server_version(api, fake.url).known


@pytest.mark.parametrize(
    ("url", "cloud"),
    [
        ("https://cloud.langfuse.com", True),
        ("https://us.cloud.langfuse.com/", True),
        ("https://JP.Cloud.Langfuse.com", True),
        ("https://hipaa.cloud.langfuse.com", True),
        ("https://langfuse.example.com", False),
        ("https://cloud.langfuse.com.evil.example", False),
        ("http://127.0.0.1:3000", False),
    ],
)
def test_cloud_hosts(url: str, cloud: bool) -> None:
    assert is_cloud(url) is cloud


def test_cloud_is_never_refused() -> None:
    """Cloud runs the newest code; its health reports the last release tag, whatever it is."""
    judged = assess_server_version("4.16.0", "https://cloud.langfuse.com")
    assert judged == ServerVersion("4.16.0", cloud=True, known=True)
    assert "Cloud" in judged.describe
    with pytest.raises(UnsupportedServer):
        assess_server_version("4.16.0", SELF_HOSTED)


# -- translation ------------------------------------------------------------------------

SUSPENDED = "Ingestion suspended: Usage threshold exceeded. Please upgrade your plan."


@pytest.mark.parametrize(
    "body",
    [
        {"message": SUSPENDED, "error": "ForbiddenError"},
        {"message": "Access suspended: Usage threshold exceeded. Please upgrade your plan."},
        SUSPENDED,
    ],
)
def test_a_usage_suspension_is_not_a_key_problem(body: object) -> None:
    error = translate(ApiError(status_code=403, headers={}, body=body), "pushing scores")
    assert isinstance(error, UsageSuspended) and isinstance(error, AuthRejected)
    assert "usage limit" in str(error) and "keys are fine" in str(error)


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (
            403,
            {"message": "Access denied - insufficient permissions for this endpoint"},
            AuthRejected,
        ),
        (401, {"message": "Invalid credentials"}, AuthRejected),
        (400, {"message": "Usage threshold exceeded"}, Rejected),  # only a 403 is a suspension
    ],
)
def test_other_refusals_keep_their_meaning(status: int, body: object, kind: type) -> None:
    error = translate(ApiError(status_code=status, headers={}, body=body), "x")
    assert type(error) is kind


@pytest.mark.parametrize(
    ("headers", "retry_after", "limit"),
    [
        ({"Retry-After": "31", "X-RateLimit-Limit": "30", "X-RateLimit-Remaining": "0"}, 31, 30),
        ({"retry-after": "5", "x-ratelimit-limit": "1000"}, 5, 1000),
        ({"Retry-After": "5"}, 5, None),  # a proxy's 429: no limit said
        ({"X-RateLimit-Limit": "many"}, None, None),
        ({"X-RateLimit-Limit": "0"}, None, None),
        ({}, None, None),
    ],
)
def test_a_429_carries_its_retry_after_and_the_servers_limit(
    headers: dict[str, str], retry_after: float | None, limit: float | None
) -> None:
    error = translate(ApiError(status_code=429, headers=headers, body={}), "reading")
    assert isinstance(error, RateLimited)
    assert error.retry_after_s == retry_after and error.limit == limit
