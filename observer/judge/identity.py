"""Which judge wrote a score (docs/judge.md#which-judge-wrote-it). Pure.

A judge is its model, its prompt templates and observer's version: a change of
any of them is a new judge, compared with people on its own
(observer.judge.agreement). Every judge score carries the three in its
metadata:

    judge_model        the judge.model that judged the trace
    judge_prompt_hash  the first 12 hex digits of the sha256 of the prompt templates
    observer_version   observer.__version__

The templates hashed are the two calls' system messages and JSON schemas
(observer.judge.protocol), what decides a verdict whatever the trace; the
trace's own text is not part of them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Final

from observer import __version__
from observer.judge.agreement import Judge
from observer.judge.protocol import CLAIMS_SCHEMA, CLAIMS_SYSTEM, VERDICTS_SCHEMA, VERDICTS_SYSTEM

PROMPT_HASH_CHARS: Final = 12
PROMPT_TEMPLATES: Final[tuple[str, ...]] = (
    CLAIMS_SYSTEM,
    json.dumps(CLAIMS_SCHEMA, sort_keys=True),
    VERDICTS_SYSTEM,
    json.dumps(VERDICTS_SCHEMA, sort_keys=True),
)

MODEL_KEY: Final = "judge_model"
PROMPT_HASH_KEY: Final = "judge_prompt_hash"
VERSION_KEY: Final = "observer_version"


def prompt_hash(templates: Sequence[str] = PROMPT_TEMPLATES) -> str:
    """A stable short hash of the templates' text: each one's length, then its text, so
    moving words from one template to the next is a change too."""
    digest = hashlib.sha256()
    for text in templates:
        data = text.encode("utf-8")
        digest.update(f"{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()[:PROMPT_HASH_CHARS]


def judge_of(model: str, templates: Sequence[str] = PROMPT_TEMPLATES) -> Judge:
    """The judge of `model` with these templates, in this observer."""
    return Judge(model=model, prompt_hash=prompt_hash(templates), version=__version__)


def judge_metadata(judge: Judge) -> dict[str, str]:
    """The metadata every judge score carries."""
    return {MODEL_KEY: judge.model, PROMPT_HASH_KEY: judge.prompt_hash, VERSION_KEY: judge.version}


def judge_from_metadata(metadata: object) -> Judge | None:
    """The judge a score's metadata names; None when it names none (a score written
    before observer recorded it, or by someone else)."""
    if not isinstance(metadata, dict):
        return None
    parts = (metadata.get(MODEL_KEY), metadata.get(PROMPT_HASH_KEY), metadata.get(VERSION_KEY))
    if not all(isinstance(p, str) and p for p in parts):
        return None
    model, hashed, version = (str(p) for p in parts)
    return Judge(model=model, prompt_hash=hashed, version=version)
