"""The judge's budget in Redis: one claim per answer, counts shared, reservations replaced."""

from __future__ import annotations

import redis

from observer.fleet.budget import FleetBudget
from observer.fleet.keys import Keys

KEYS = Keys("t")
HOUR, DAY = "2026-12-01T12", "2026-12-01"


def test_an_answer_is_taken_for_the_judge_by_one_member_only(rclient: redis.Redis) -> None:
    one, two = FleetBudget(rclient, KEYS), FleetBudget(rclient, KEYS)
    assert one.claim("trace", "basis", HOUR, DAY, 1500)
    assert not two.claim("trace", "basis", HOUR, DAY, 1500)
    assert two.claim("trace", "another answer", HOUR, DAY, 1500)  # a changed answer: again
    assert one.counts(HOUR, DAY) == two.counts(HOUR, DAY) == (2, 3000)


def test_what_was_spent_replaces_what_was_reserved(rclient: redis.Redis) -> None:
    budget = FleetBudget(rclient, KEYS)
    assert budget.claim("a", "b", HOUR, DAY, 1500)
    budget.spent("a", "b", DAY, 900)
    assert budget.counts(HOUR, DAY) == (1, 900)
    budget.spent("x", None, DAY, 100)  # judged without a claim (restored after a restart)
    assert budget.counts(HOUR, DAY) == (1, 1000)
    assert rclient.ttl(KEYS.judged_hour(HOUR)) > 0 and rclient.ttl(KEYS.judged_tokens(DAY)) > 0


def test_nothing_counted_yet_is_zero(rclient: redis.Redis) -> None:
    assert FleetBudget(rclient, KEYS).counts(HOUR, DAY) == (0, 0)
