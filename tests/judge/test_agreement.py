"""The judge's agreement with people (observer.judge.agreement): hand-worked confusion
matrices, and the properties kappa must have."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observer.judge.agreement import (
    Confusion,
    Judge,
    Pair,
    agreement,
    human_unfaithful,
    kappa,
    precision,
    recall,
)

JUDGE = Judge("gpt-4o-mini", "a1b2c3", "0.5.0")
OTHER = Judge("gpt-5-mini", "a1b2c3", "0.5.0")


def pairs_of(tp: int, fp: int, fn: int, tn: int, judge: Judge = JUDGE) -> list[Pair]:
    cells = [(True, True)] * tp + [(True, False)] * fp + [(False, True)] * fn
    cells += [(False, False)] * tn
    return [Pair(f"t{i}", j, h, judge) for i, (j, h) in enumerate(cells)]


@pytest.mark.parametrize(
    ("tp", "fp", "fn", "tn", "k", "p", "r"),
    [
        # p_o = 35/50 = 0.7; p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5; kappa = 0.2 / 0.5
        (20, 5, 10, 15, 0.4, 20 / 25, 20 / 30),
        # issue 32: 30 labelled, the judge and people disagree on 5.
        # p_o = 25/30; p_e = 10/30 * 11/30 + 20/30 * 19/30 = 490/900; kappa = 260/410
        (8, 2, 3, 17, 260 / 410, 8 / 10, 8 / 11),
        (5, 0, 0, 5, 1.0, 1.0, 1.0),
        # chance agreement only: p_o = 0.5 = p_e
        (5, 5, 5, 5, 0.0, 0.5, 0.5),
        # the judge never says unfaithful: no precision; kappa 0 (a constant rater)
        (0, 0, 6, 14, 0.0, None, 0.0),
        # nobody ever says unfaithful: no recall, no kappa
        (0, 0, 0, 20, None, None, None),
    ],
)
def test_hand_worked_tables(
    tp: int, fp: int, fn: int, tn: int, k: float | None, p: float | None, r: float | None
) -> None:
    found = agreement(pairs_of(tp, fp, fn, tn))
    assert found.pairs == tp + fp + fn + tn
    assert found.kappa == (pytest.approx(k) if k is not None else None)
    assert found.precision == (pytest.approx(p) if p is not None else None)
    assert found.recall == (pytest.approx(r) if r is not None else None)
    assert len(found.disagreements) == fp + fn


def test_no_pairs_is_null_never_zero_or_one() -> None:
    found = agreement([])
    assert (found.pairs, found.kappa, found.precision, found.recall) == (0, None, None, None)
    assert found.as_dict()["kappa"] is None


def test_each_judge_is_compared_on_its_own() -> None:
    pairs = pairs_of(5, 0, 0, 5) + pairs_of(0, 5, 5, 0, judge=OTHER)
    found = agreement(pairs)
    assert found.by_judge[JUDGE.key].kappa == pytest.approx(1.0)
    assert found.by_judge[OTHER.key].kappa == pytest.approx(-1.0)
    assert found.kappa == pytest.approx(0.0)
    document = found.as_dict(lambda p: f"https://lf.example/traces/{p.trace_id}")
    assert set(document) == {
        "pairs",
        "kappa",
        "precision",
        "recall",
        "confusion",
        "disagreements",
        "by_judge",
    }
    assert document["disagreements"][0]["url"].startswith("https://lf.example/traces/")


@pytest.mark.parametrize(
    ("data_type", "value", "unfaithful"),
    [
        ("BOOLEAN", 1.0, False),
        ("BOOLEAN", 0.0, True),
        ("NUMERIC", 0.9, False),
        ("NUMERIC", 0.6, True),
        ("CATEGORICAL", 0.0, None),
    ],
)
def test_a_persons_label(data_type: str, value: float, unfaithful: bool | None) -> None:
    assert human_unfaithful(data_type, value, threshold=0.8) is unfaithful


verdicts = st.lists(st.booleans(), min_size=1, max_size=200)


@given(verdicts)
def test_a_judge_against_itself_has_kappa_one(labels: list[bool]) -> None:
    confusion = Confusion.of(Pair(f"t{i}", v, v, JUDGE) for i, v in enumerate(labels))
    if all(labels) or not any(labels):
        assert kappa(confusion) is None  # one class only: nothing beyond chance
    else:
        assert kappa(confusion) == pytest.approx(1.0)


@given(verdicts, st.booleans())
def test_a_constant_judge_has_kappa_zero(labels: list[bool], constant: bool) -> None:
    confusion = Confusion.of(Pair(f"t{i}", constant, h, JUDGE) for i, h in enumerate(labels))
    if all(labels) or not any(labels):
        return  # people constant too: no kappa (tested above)
    assert kappa(confusion) == pytest.approx(0.0, abs=1e-12)


@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=200))
def test_kappa_is_symmetric_and_at_most_one(cells: list[tuple[bool, bool]]) -> None:
    one = Confusion.of(Pair(f"t{i}", j, h, JUDGE) for i, (j, h) in enumerate(cells))
    other = Confusion.of(Pair(f"t{i}", h, j, JUDGE) for i, (j, h) in enumerate(cells))
    k = kappa(one)
    assert k == (pytest.approx(kappa(other)) if k is not None else kappa(other))
    if k is not None:
        assert -1.0 - 1e-12 <= k <= 1.0 + 1e-12
    assert precision(one) == recall(other)
