"""`observer judge agreement` end to end against the service-like fake Langfuse: people's
BOOLEAN labels on 30 judged traces, observer's faithfulness scores (with the judge in their
metadata), read through the v3 scores endpoint and paired (issue 32's table: 5 of 30
disagree)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from langfuse.api.client import LangfuseAPI
from langfuse.api.scores.types.create_score_request import CreateScoreRequest

from observer.app.judge_agreement import judge_agreement
from observer.cli import main
from observer.judge.agreement import Judge
from observer.judge.identity import judge_metadata
from tests.daemon_helpers import configure
from tests.fakes.langfuse_server import FakeLangfuse

JUDGE = Judge("gpt-4o-mini", "0123456789ab", "0.5.0")
# (the judge says unfaithful, people say unfaithful): 8 both, 2 the judge only, 3 people
# only, 17 neither. By hand: kappa 260/410, precision 8/10, recall 8/11.
TABLE = [(True, True)] * 8 + [(True, False)] * 2 + [(False, True)] * 3 + [(False, False)] * 17


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


def labelled(fake: FakeLangfuse, now: datetime) -> None:
    api = LangfuseAPI(base_url=fake.url, username=fake.public_key, password=fake.secret_key)
    judged = now - timedelta(hours=3)
    api.scores.create(
        request=[
            CreateScoreRequest(
                id=f"judge-{i}",
                trace_id=f"trace-{i:02d}",
                observation_id=f"gen-{i:02d}",
                name="faithfulness",
                value=0.5 if judge_says else 1.0,
                data_type="NUMERIC",
                timestamp=judged,
                metadata=judge_metadata(JUDGE),
            )
            for i, (judge_says, _) in enumerate(TABLE)
        ]
    )
    for i, (_, people_say) in enumerate(TABLE):
        fake.add_annotation_score(
            trace_id=f"trace-{i:02d}",
            value=not people_say,  # BOOLEAN: true is faithful
            timestamp=now - timedelta(hours=1),
        )


def test_thirty_labelled_traces_give_what_a_person_computes_by_hand(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    labelled(fake, now)
    settings = configure(monkeypatch, fake, OBSERVER_JUDGE__HUMAN_SCORE="faithful")
    found, link, empty = judge_agreement(settings, now - timedelta(days=1), now)
    assert empty is None
    assert found.pairs == 30
    assert found.kappa == pytest.approx(260 / 410)
    assert found.precision == pytest.approx(0.8)
    assert found.recall == pytest.approx(8 / 11)
    assert len(found.disagreements) == 5
    assert list(found.by_judge) == [JUDGE.key]
    url = link(found.disagreements[0])
    assert url is not None and url.startswith(fake.url) and "/traces/trace-" in url


def test_the_command_prints_it_as_json_and_without_labels_says_what_to_set(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    labelled(fake, now)
    configure(monkeypatch, fake, OBSERVER_JUDGE__HUMAN_SCORE="faithful")
    shown = CliRunner().invoke(main, ["judge", "agreement", "--since", "1d", "--json"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert {"pairs", "kappa", "precision", "recall", "disagreements", "by_judge"} <= set(document)
    assert document["pairs"] == 30 and len(document["disagreements"]) == 5
    table = CliRunner().invoke(main, ["judge", "agreement", "--since", "1d"])
    assert table.exit_code == 0 and "kappa" in table.stdout and "0.634" in table.stdout
    monkeypatch.delenv("OBSERVER_JUDGE__HUMAN_SCORE")
    unset = CliRunner().invoke(main, ["judge", "agreement"])
    assert unset.exit_code == 2 and "judge.human_score is not set" in unset.output


def test_no_labels_is_null_never_zero(fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch) -> None:
    configure(monkeypatch, fake, OBSERVER_JUDGE__HUMAN_SCORE="faithful")
    shown = CliRunner().invoke(main, ["judge", "agreement", "--json"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document["pairs"] == 0 and document["kappa"] is None and document["recall"] is None


def agreement_said(monkeypatch: pytest.MonkeyPatch, fake: FakeLangfuse, name: str) -> str:
    configure(monkeypatch, fake, OBSERVER_JUDGE__HUMAN_SCORE=name)
    shown = CliRunner().invoke(main, ["judge", "agreement", "--since", "1d"])
    assert shown.exit_code == 0, shown.output
    return shown.stdout.strip()


def test_a_misspelled_score_name_is_not_no_labels_yet(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pairs 0 has four reasons, and each says what to do."""
    now = datetime.now(UTC)
    labelled(fake, now)
    fake.add_annotation_score(
        trace_id="t-old", value=True, name="helpful", timestamp=now - timedelta(days=3)
    )
    fake.add_score_config({"name": "correct", "dataType": "BOOLEAN"})
    # No score of that name at all: the names there are, and the one it probably meant.
    assert agreement_said(monkeypatch, fake, "faithfull") == (
        "no score named 'faithfull' exists in Langfuse (judge.human_score): did you mean "
        "'faithful'? people's scores and score configs here are named 'correct', 'faithful', "
        "'helpful'"
    )
    # Older labels only: look further back.
    assert agreement_said(monkeypatch, fake, "helpful").startswith(
        "no label named 'helpful' in the window (pairs 0); the newest is from "
    )
    # A score config nobody has labelled with yet.
    assert agreement_said(monkeypatch, fake, "correct") == (
        "no one has labelled with 'correct' yet (its score config exists): nothing to "
        "compare (pairs 0)"
    )
    # Labels in the window, on answers the judge did not score.
    fake.add_annotation_score(trace_id="never-judged", value=False, name="grounded")
    assert agreement_said(monkeypatch, fake, "grounded").startswith(
        "1 label named 'grounded' in the window, none on an answer the judge scored"
    )
    configure(monkeypatch, fake, OBSERVER_JUDGE__HUMAN_SCORE="faithfull")
    document = json.loads(CliRunner().invoke(main, ["judge", "agreement", "--json"]).stdout)
    assert document["pairs"] == 0 and document["empty"]["exists"] is False
    assert document["empty"]["did_you_mean"] == "faithful"
