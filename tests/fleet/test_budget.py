"""The judge's budget in Redis, against a real redis-server: one claim per answer, the
caps checked in the claiming script (exact under concurrency), a claim confirmed after
its member's commit or released after a failure, reservations replaced by spend."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from observer.fleet.budget import DAY_S, PROVISIONAL_S, Claimed, FleetBudget, provisional_s
from observer.fleet.keys import Keys
from tests.servers import RedisServer

KEYS = Keys("t")
HOUR, DAY = "2026-12-01T12", "2026-12-01"
ROOMY = {"max_judged": 1000, "max_tokens": 10_000_000}


def test_an_answer_is_taken_for_the_judge_by_one_member_only(rclient: redis.Redis) -> None:
    one, two = FleetBudget(rclient, KEYS), FleetBudget(rclient, KEYS)
    assert one.claim("trace", "basis", HOUR, DAY, 1500, owner="a", **ROOMY) == "taken"
    assert two.claim("trace", "basis", HOUR, DAY, 1500, owner="b", **ROOMY) == "duplicate"
    # A changed answer is another one: taken again.
    assert two.claim("trace", "another", HOUR, DAY, 1500, owner="b", **ROOMY) == "taken"
    assert one.counts(HOUR, DAY) == two.counts(HOUR, DAY) == (2, 3000)


def test_the_caps_are_checked_in_the_claim(rclient: redis.Redis) -> None:
    budget = FleetBudget(rclient, KEYS)
    caps = {"max_judged": 2, "max_tokens": 10_000}

    def claim(trace: str, tokens: int) -> Claimed:
        return budget.claim(trace, "b", HOUR, DAY, tokens, owner=trace, **caps)

    assert claim("a", 4000) == "taken"
    assert claim("b", 7000) == "over_budget"  # the day's tokens would pass their cap
    assert claim("b", 6000) == "taken"  # exactly at the cap
    assert claim("c", 0) == "over_budget"  # the hour's cap is reached
    assert claim("a", 0) == "duplicate"  # taken already: said before any cap
    assert budget.counts(HOUR, DAY) == (2, 10_000)  # nothing counted for a refusal
    assert budget.claim("d", "b", "2026-12-01T13", DAY, 0, owner="d", **caps) == "over_budget"


@pytest.mark.parametrize("round_", range(10))
def test_members_claiming_at_the_same_moment_never_pass_the_hourly_cap(
    redis_proc: RedisServer, rclient: redis.Redis, round_: int
) -> None:
    """Three members, four threads each, each its own connection, all let go at once on
    120 answers under a cap of 25: 25 taken, whatever the interleaving."""
    members, threads_each, answers, cap = 3, 4, 120, 25
    clients = [redis.Redis.from_url(redis_proc.url) for _ in range(members)]
    budgets = [FleetBudget(c, KEYS) for c in clients]
    start = threading.Barrier(members * threads_each)
    results: Counter[Claimed] = Counter()
    lock = threading.Lock()

    def work(budget: FleetBudget, index: int) -> None:
        start.wait()
        mine: Counter[Claimed] = Counter()
        # Every thread offers every answer (entries scored twice), in its own order.
        for n in range(answers):
            answer = (n * (index + 1) + round_) % answers
            mine[
                budget.claim(
                    f"t{answer}",
                    "b",
                    HOUR,
                    DAY,
                    100,
                    owner=f"{index}",
                    max_judged=cap,
                    max_tokens=10_000_000,
                )
            ] += 1
        with lock:
            results.update(mine)

    workers = [
        threading.Thread(target=work, args=(budgets[i % members], i))
        for i in range(members * threads_each)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for client in clients:
        client.close()
    assert results["taken"] == cap
    assert FleetBudget(rclient, KEYS).counts(HOUR, DAY) == (cap, cap * 100)
    assert len(rclient.keys(KEYS.judged("*", "b"))) == cap


def test_members_claiming_at_the_same_moment_never_pass_the_daily_token_cap(
    redis_proc: RedisServer, rclient: redis.Redis
) -> None:
    members, cap = 6, 25 * 1500
    clients = [redis.Redis.from_url(redis_proc.url) for _ in range(members)]
    start = threading.Barrier(members)
    taken: list[int] = []

    def work(index: int) -> None:
        budget = FleetBudget(clients[index], KEYS)
        start.wait()
        got = 0
        for n in range(40):
            answer = budget.claim(
                f"m{index}-{n}", "b", HOUR, DAY, 1500, owner="o", max_judged=10**6, max_tokens=cap
            )
            got += answer == "taken"
        taken.append(got)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(members)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for client in clients:
        client.close()
    assert sum(taken) == 25
    assert FleetBudget(rclient, KEYS).counts(HOUR, DAY) == (25, cap)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    offers=st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 3000), st.booleans()), max_size=40
    ),
    max_judged=st.integers(0, 10),
    max_tokens=st.integers(0, 20_000),
)
def test_the_script_decides_as_one_daemon_would(
    rclient: redis.Redis,
    offers: list[tuple[int, int, bool]],
    max_judged: int,
    max_tokens: int,
) -> None:
    """Claims and releases in any order against one daemon's rules (a pure model): an
    answer taken once, never past a cap, a release giving back exactly what it took."""
    rclient.flushall()
    budget = FleetBudget(rclient, KEYS)
    held: dict[int, int] = {}  # answer -> tokens
    for answer, tokens, release in offers:
        owner = f"o{answer}"
        if release:
            released = budget.release(f"t{answer}", "b", HOUR, DAY, owner)
            assert released == (answer in held)
            held.pop(answer, None)
            continue
        judged, spent = len(held), sum(held.values())
        if answer in held:
            expected: Claimed = "duplicate"
        elif judged >= max_judged or spent + tokens > max_tokens or spent >= max_tokens:
            expected = "over_budget"
        else:
            expected = "taken"
            held[answer] = tokens
        got = budget.claim(
            f"t{answer}",
            "b",
            HOUR,
            DAY,
            tokens,
            owner=owner,
            max_judged=max_judged,
            max_tokens=max_tokens,
        )
        assert got == expected
        assert budget.counts(HOUR, DAY) == (len(held), sum(held.values()))


def test_a_claim_is_provisional_until_its_member_commits(rclient: redis.Redis) -> None:
    budget = FleetBudget(rclient, KEYS, provisional_s=5)
    key = KEYS.judged("t", "b")
    assert budget.claim("t", "b", HOUR, DAY, 1500, owner="mine", **ROOMY) == "taken"
    assert 0 < rclient.pttl(key) <= 5000  # a member killed before its commit frees it soon
    assert budget.confirm("t", "b", 1500, "mine")
    assert rclient.ttl(key) > DAY_S - 60
    assert rclient.get(key) == b"1500 mine"


def test_a_claim_that_expired_before_a_slow_commit_is_taken_again_if_still_free(
    rclient: redis.Redis,
) -> None:
    budget = FleetBudget(rclient, KEYS)
    key = KEYS.judged("t", "b")
    assert budget.claim("t", "b", HOUR, DAY, 1500, owner="mine", **ROOMY) == "taken"
    rclient.delete(key)  # its provisional life ran out
    assert budget.confirm("t", "b", 1500, "mine")
    assert rclient.get(key) == b"1500 mine" and rclient.ttl(key) > DAY_S - 60
    assert budget.counts(HOUR, DAY) == (1, 1500)  # counted once
    rclient.set(key, "1500 theirs")  # expired, and another member took the answer since
    assert not budget.confirm("t", "b", 1500, "mine")
    assert rclient.get(key) == b"1500 theirs"


def test_a_release_gives_back_only_its_own_claim(rclient: redis.Redis) -> None:
    budget = FleetBudget(rclient, KEYS)
    assert budget.claim("t", "b", HOUR, DAY, 1500, owner="mine", **ROOMY) == "taken"
    assert budget.claim("u", "b", HOUR, DAY, 700, owner="theirs", **ROOMY) == "taken"
    assert not budget.release("u", "b", HOUR, DAY, "mine")  # another member's claim
    assert budget.release("t", "b", HOUR, DAY, "mine")
    assert not budget.release("t", "b", HOUR, DAY, "mine")  # once
    assert budget.counts(HOUR, DAY) == (1, 700)
    assert rclient.exists(KEYS.judged("t", "b")) == 0
    assert budget.claim("t", "b", HOUR, DAY, 1500, owner="again", **ROOMY) == "taken"


def test_a_release_after_redis_lost_the_counters_leaves_none_below_zero(
    rclient: redis.Redis,
) -> None:
    budget = FleetBudget(rclient, KEYS)
    assert budget.claim("t", "b", HOUR, DAY, 1500, owner="mine", **ROOMY) == "taken"
    rclient.delete(KEYS.judged_hour(HOUR), KEYS.judged_tokens(DAY))
    assert budget.release("t", "b", HOUR, DAY, "mine")
    assert rclient.exists(KEYS.judged_hour(HOUR), KEYS.judged_tokens(DAY)) == 0


def test_what_was_spent_replaces_what_was_reserved(rclient: redis.Redis) -> None:
    budget = FleetBudget(rclient, KEYS)
    assert budget.claim("a", "b", HOUR, DAY, 1500, owner="mine", **ROOMY) == "taken"
    budget.spent("a", "b", DAY, 900)
    assert budget.counts(HOUR, DAY) == (1, 900)
    assert rclient.get(KEYS.judged("a", "b")) == b"0 mine"  # still this member's claim
    budget.spent("x", None, DAY, 100)  # judged without a claim (restored after a restart)
    assert budget.counts(HOUR, DAY) == (1, 1000)
    assert rclient.ttl(KEYS.judged_hour(HOUR)) > 0 and rclient.ttl(KEYS.judged_tokens(DAY)) > 0


def test_spend_after_redis_lost_the_day_expires_all_the_same(rclient: redis.Redis) -> None:
    FleetBudget(rclient, KEYS).spent("x", "b", DAY, 100)
    assert 0 < rclient.ttl(KEYS.judged_tokens(DAY)) <= DAY_S


def test_a_claim_made_by_an_older_version_is_read(rclient: redis.Redis) -> None:
    """Claims a member of the version before owners wrote hold bare tokens."""
    budget = FleetBudget(rclient, KEYS)
    rclient.set(KEYS.judged("a", "b"), "1500")
    rclient.set(KEYS.judged_tokens(DAY), "1500")
    assert budget.claim("a", "b", HOUR, DAY, 1500, owner="new", **ROOMY) == "duplicate"
    budget.spent("a", "b", DAY, 900)
    assert budget.counts(HOUR, DAY) == (0, 900)
    assert not budget.release("a", "b", HOUR, DAY, "new")


def test_an_unconfirmed_claim_outlives_no_claim_idle() -> None:
    assert provisional_s(60) == PROVISIONAL_S
    assert provisional_s(4) == 2  # gone before another member claims the dead one's entry


def test_nothing_counted_yet_is_zero(rclient: redis.Redis) -> None:
    assert FleetBudget(rclient, KEYS).counts(HOUR, DAY) == (0, 0)
