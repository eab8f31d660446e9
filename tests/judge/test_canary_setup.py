"""Setting the canary up: the configuration it needs, the share of the judge's tokens it
keeps ahead, the daemon refusing a file that is no canary, and `observer judge canary`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from observer import app
from observer.cli import main
from observer.config import ConfigError, load_settings
from tests.daemon_helpers import configure
from tests.fakes.langfuse_server import FakeLangfuse
from tests.fakes.openai_stub import OpenAIStub

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "canary.jsonl"


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


def test_a_canary_needs_the_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSERVER_JUDGE__CANARY_FILE", str(EXAMPLE))
    with pytest.raises(ConfigError, match=r"judge.canary_file needs judge.enabled"):
        load_settings()


def test_the_canary_share_is_taken_off_the_traces_cap(
    monkeypatch: pytest.MonkeyPatch, judge_stub: OpenAIStub
) -> None:
    monkeypatch.setenv("OBSERVER_JUDGE__ENABLED", "true")
    assert load_settings().sampler_params().max_tokens_per_day == 2_000_000
    monkeypatch.setenv("OBSERVER_JUDGE__CANARY_FILE", str(EXAMPLE))
    settings = load_settings()
    assert settings.judge.canary_tokens == 200_000
    assert settings.sampler_params().max_tokens_per_day == 1_800_000


def test_the_daemon_runs_the_canary_it_is_given(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, judge_stub: OpenAIStub, tmp_path: Path
) -> None:
    settings = configure(
        monkeypatch, fake, OBSERVER_JUDGE__ENABLED="true", OBSERVER_JUDGE__CANARY_FILE=str(EXAMPLE)
    )
    with app.build(settings, mode="solo", state_path=tmp_path / "s.sqlite") as parts:
        (check,) = parts.judge_checks
        assert check.name == "judge-canary"
        check.run()  # the first run, as the daemon's schedule makes it at its start
        assert len(judge_stub.requests) == 24  # 12 cases, two calls each
        assert parts.metrics.value("observer_judge_canary", measure="agreement") == pytest.approx(
            10 / 12
        )
    with app.build(settings, mode="once", state_path=tmp_path / "o.sqlite") as parts:
        assert parts.judge_checks == ()  # a one-shot run judges no canary


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "judge.canary_file: cannot read"),
        (b'{"trace_id": "a"}\n', 'judge.canary_file: {path}: line 1: "label" must be'),
        (b"", "judge.canary_file: {path}: no case in the file"),
    ],
)
def test_the_daemon_refuses_a_canary_it_cannot_use(
    fake: FakeLangfuse,
    monkeypatch: pytest.MonkeyPatch,
    judge_stub: OpenAIStub,
    tmp_path: Path,
    content: bytes | None,
    message: str,
) -> None:
    path = tmp_path / "canary.jsonl"
    if content is not None:
        path.write_bytes(content)
    settings = configure(
        monkeypatch, fake, OBSERVER_JUDGE__ENABLED="true", OBSERVER_JUDGE__CANARY_FILE=str(path)
    )
    with pytest.raises(ConfigError) as raised:
        app.build(settings, mode="solo", state_path=tmp_path / "s.sqlite")
    assert message.format(path=path) in str(raised.value)


def test_a_canary_too_big_for_its_share_is_refused_at_start(
    fake: FakeLangfuse, monkeypatch: pytest.MonkeyPatch, judge_stub: OpenAIStub, tmp_path: Path
) -> None:
    settings = configure(
        monkeypatch,
        fake,
        OBSERVER_JUDGE__ENABLED="true",
        OBSERVER_JUDGE__CANARY_FILE=str(EXAMPLE),
        OBSERVER_JUDGE__CANARY_EVERY_H="6",
        OBSERVER_JUDGE__MAX_TOKENS_PER_DAY="1000000",
    )
    with pytest.raises(ConfigError) as raised:
        app.build(settings, mode="solo", state_path=tmp_path / "s.sqlite")
    # 4 runs a day of 12 cases at the first estimate of 3,000 tokens a case.
    assert "12 cases x ~3,000 tokens x 4 run(s) a day need ~144,000 tokens a day" in str(
        raised.value
    )
    assert "(judge.canary_share 0.1 of judge.max_tokens_per_day: 100,000)" in str(raised.value)


def test_judge_canary_prints_the_figures_and_each_disagreement_with_its_why(
    judge_stub: OpenAIStub,
) -> None:
    shown = CliRunner().invoke(main, ["judge", "canary", str(EXAMPLE)])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0] == "canary: 12 cases, 12 judged  agreement 0.833  kappa 0.667"
    assert lines[1] == "disagreements (2):"
    assert lines[2].startswith("  canary-en-04: judged faithful, labelled unfaithful: a negation")
    assert lines[-1].startswith("tokens used: ")
    as_json = CliRunner().invoke(main, ["judge", "canary", str(EXAMPLE), "--json"])
    found = json.loads(as_json.output)
    assert (found["cases"], found["judged"], found["flip_rate"]) == (12, 12, None)
    assert [d["trace_id"] for d in found["disagreements"]] == ["canary-en-04", "canary-zh-06"]


def test_judge_canary_without_a_file_says_what_to_name(judge_stub: OpenAIStub) -> None:
    shown = CliRunner().invoke(main, ["judge", "canary"])
    assert shown.exit_code == 2
    assert "no canary: name a file (observer judge canary FILE) or set judge.canary_file" in (
        shown.output
    )
