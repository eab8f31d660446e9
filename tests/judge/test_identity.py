"""Which judge wrote a score: the model, a hash of the prompt templates, observer's version."""

from __future__ import annotations

import pytest

import observer
from observer.config import JudgeSettings
from observer.judge import protocol
from observer.judge.agreement import Judge
from observer.judge.identity import (
    PROMPT_TEMPLATES,
    judge_from_metadata,
    judge_metadata,
    judge_of,
    prompt_hash,
)


def test_the_prompt_hash_is_a_stable_sha256_prefix_of_the_templates() -> None:
    hashed = prompt_hash()
    assert len(hashed) == 12 and int(hashed, 16) >= 0
    assert prompt_hash() == hashed == prompt_hash(list(PROMPT_TEMPLATES))
    assert prompt_hash(("a", "b")) == "facdde7abf1e"  # fixed: no salt, no process state
    assert (
        protocol.CLAIMS_SYSTEM in PROMPT_TEMPLATES and protocol.VERDICTS_SYSTEM in PROMPT_TEMPLATES
    )


@pytest.mark.parametrize(
    "changed",
    [
        (PROMPT_TEMPLATES[0] + " Be brief.", *PROMPT_TEMPLATES[1:]),  # a word added
        (
            *PROMPT_TEMPLATES[:2],
            PROMPT_TEMPLATES[2].replace("yes or no", "yes/no"),
            PROMPT_TEMPLATES[3],
        ),
        PROMPT_TEMPLATES[:3],  # a template dropped
    ],
)
def test_a_changed_template_changes_the_hash(changed: tuple[str, ...]) -> None:
    assert prompt_hash(changed) != prompt_hash()


def test_words_moved_between_templates_change_the_hash() -> None:
    assert prompt_hash(("a", "bc")) != prompt_hash(("ab", "c"))


def test_the_current_judge_is_the_configured_model_with_these_templates() -> None:
    judge = judge_of(JudgeSettings(model="gpt-judge").model)
    assert judge == Judge("gpt-judge", prompt_hash(), observer.__version__)
    assert judge_of("other") != judge  # another model: another judge
    assert judge_of("gpt-judge", ("new prompt",)) != judge  # another prompt: another judge


def test_metadata_round_trips_and_a_score_without_it_names_no_judge() -> None:
    judge = judge_of("m")
    metadata = judge_metadata(judge)
    assert metadata == {
        "judge_model": "m",
        "judge_prompt_hash": prompt_hash(),
        "observer_version": observer.__version__,
    }
    assert judge_from_metadata(metadata) == judge
    assert judge_from_metadata(None) is None
    assert judge_from_metadata({"judge_model": "m"}) is None
    assert judge_from_metadata({**metadata, "observer_version": 3}) is None
