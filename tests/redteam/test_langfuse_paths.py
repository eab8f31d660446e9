"""What stands between observer and Langfuse cannot fake a delivery or exhaust memory
(issue 43, findings 2, 4 and 11).

Against the service-like fake with the real SDK client: an ingress redirecting
an `http://` base URL, a redirect to another host, a proxy's login page, and
answers that never end, claim 10 GB, inflate a thousandfold or trickle.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from observer.state import State
from tests.daemon_helpers import after, configure, demo_counts, demo_observations, once
from tests.fakes.langfuse_server import SCORES_PATH, SERVICE_LIKE, FakeLangfuse

DEMO = demo_counts()


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse(behaviour=SERVICE_LIKE) as server:
        yield server


@pytest.fixture
def elsewhere() -> Iterator[FakeLangfuse]:
    """Another origin: the https side of an ingress, or a host that is not Langfuse."""
    with FakeLangfuse(behaviour=SERVICE_LIKE) as server:
        yield server


def outbox(state: Path) -> int:
    opened = State(state)
    try:
        return opened.outbox_size()
    finally:
        opened.close()


def test_a_score_post_redirected_is_a_configuration_error_and_no_score_is_lost(
    fake: FakeLangfuse, elsewhere: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An ingress answers the POST with 301 to its https side, which serves a web page to
    the GET a followed redirect makes of it: `run --once` said "delivered", Langfuse had
    none. Now the scores stay in the outbox and the run exits 2 naming the Location."""
    fake.add_observations(demo_observations())
    fake.redirect(301, elsewhere.url, method="POST")
    elsewhere.fault_next("html", count=1000, path_prefix=SCORES_PATH)
    settings = configure(monkeypatch, fake)
    result = once(settings, tmp_path / "s.sqlite", after(demo_observations()))
    assert fake.scores == [] and elsewhere.scores == []
    assert result.exit_code == 2, result
    assert result.undelivered == DEMO.scores == outbox(tmp_path / "s.sqlite")
    assert f"{elsewhere.url}{SCORES_PATH}" in (result.error or ""), result.error


def test_a_cross_origin_307_never_carries_the_scores_to_the_other_host(
    fake: FakeLangfuse, elsewhere: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.add_observations(demo_observations())
    fake.redirect(307, elsewhere.url, method="POST")
    settings = configure(monkeypatch, fake)
    result = once(settings, tmp_path / "s.sqlite", after(demo_observations()))
    assert [r for r in elsewhere.requests if r.method == "POST"] == []
    assert elsewhere.scores == []
    assert result.exit_code == 2 and result.undelivered == DEMO.scores


def test_a_read_is_not_followed_to_another_origin_and_is_followed_within_its_own(
    fake: FakeLangfuse, elsewhere: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.add_observations(demo_observations())
    settings = configure(monkeypatch, fake)
    now = after(demo_observations())
    # The same origin (a path moved): followed, and everything scored.
    fake.redirect(307, fake.url, count=1, path_prefix="/api/public/v2/observations")
    first = once(settings, tmp_path / "a.sqlite", now)
    assert first.exit_code == 0, first.error
    assert first.passed is not None and first.passed.scored == DEMO.scored
    # Another origin: refused before anything (the keys included) is sent there.
    fake.redirect(302, elsewhere.url, path_prefix="/api/public/v2/observations")
    second = once(settings, tmp_path / "b.sqlite", now)
    assert second.exit_code == 2, second
    assert "another origin" in (second.error or "") and elsewhere.url in (second.error or "")
    assert elsewhere.requests == []


def test_a_200_that_is_not_the_routes_answer_is_not_a_delivery(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A proxy's login page answered 200 to the score POST: nothing was stored."""
    fake.add_observations(demo_observations())
    fake.fault_next("html", count=1000, path_prefix=SCORES_PATH)
    settings = configure(monkeypatch, fake, OBSERVER_RUN__SHUTDOWN_GRACE_S="1")
    result = once(settings, tmp_path / "s.sqlite", after(demo_observations()))
    assert fake.scores == []
    assert result.exit_code == 3 and result.undelivered == DEMO.scores, result
    assert "not counted as delivered" in (result.error or "")


HOSTILE = {
    "huge_length": "Content-Length",
    "endless": "body is larger than source.max_response_mb",
    "gzip_bomb": "decompressed body is larger than source.max_response_mb",
    "trickle": "source.request_deadline_s",
}


@pytest.mark.parametrize("kind", HOSTILE, ids=HOSTILE.keys())
def test_an_answer_that_would_exhaust_memory_or_time_is_cut_at_its_bound(
    kind: str, fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A 10 GB Content-Length or an endless body grew memory to 21 GB before the OOM
    killer, a 2 MB gzip bomb to 8 GB, a trickle held `run --once` for ever. Each is cut
    at its bound, memory stays within a few times the limit, the error names the bound."""
    fake.add_observations(demo_observations())
    fake.bomb_bytes = 64 * 1024 * 1024  # inflated without a bound: 64 MB in this process
    fake.fault_next(kind, count=100)
    settings = configure(
        monkeypatch,
        fake,
        OBSERVER_SOURCE__MAX_RESPONSE_MB="1",
        OBSERVER_SOURCE__REQUEST_DEADLINE_S="1",
        OBSERVER_SOURCE__MAX_ATTEMPTS="1",
    )
    tracemalloc.start()
    try:
        result = once(settings, tmp_path / "s.sqlite", after(demo_observations()))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code != 0 and HOSTILE[kind] in (result.error or ""), result.error
    assert peak < 24 * 1024 * 1024, f"{peak:,} bytes at the peak"
    assert all("the cap was reached" not in line for line in fake.fault_log), fake.fault_log


def test_a_page_too_large_is_read_again_in_halves_and_nothing_is_lost(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bulky: list[dict[str, Any]] = []
    for observation in demo_observations():
        bulky.append({**observation, "metadata": {**(observation.get("metadata") or {}),
                                                  "padding": "p" * 150}})  # fmt: skip
    fake.add_observations(bulky)
    page = len(fake.listed()) // 4  # observations of about a quarter of the listing
    settings = configure(
        monkeypatch,
        fake,
        OBSERVER_SOURCE__MAX_RESPONSE_MB=str(round(page * 1000 / 1024 / 1024, 4)),
    )
    result = once(settings, tmp_path / "s.sqlite", after(bulky))
    assert result.exit_code == 0, result.error
    assert result.passed is not None and result.passed.scored == DEMO.scored
    limits = {int(r.query["limit"][0]) for r in fake.requests if "limit" in r.query}
    assert min(limits) < 1000
