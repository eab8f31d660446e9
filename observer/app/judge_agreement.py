"""`observer judge agreement`: the judge's verdicts against people's labels in Langfuse.

Reads people's scores named `judge.human_score` (source ANNOTATION) in the window,
then observer's own `faithfulness` scores on the same traces (source API, by
trace id, 50 a request), both through `GET /api/public/v3/scores` within one
request budget, and pairs them (observer.judge.agreement). Which judge wrote a
verdict is read from its score's metadata (docs/judge.md#agreement-with-people).

A window with no pair says why (`Empty`): labels that are on no judged answer, no
label in the window though older ones exist, or no score of that name at all
(with the names people's scores and score configs have, and the one it probably
meant): a misspelled `judge.human_score` is not "no labels yet".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from observer.app.builders import build_api, build_budget
from observer.app.contact import langfuse_ready
from observer.config import ConfigError, Settings
from observer.judge.agreement import Agreement, Pair
from observer.judge.annotations import AnnotationReader, read_agreement
from observer.telemetry.metrics import Metrics
from observer.urls import without_credentials

NAMES_READ = 100  # people's newest scores read for their names, when none has the name asked


@dataclass(frozen=True, slots=True)
class Empty:
    """Why the window held no pair."""

    name: str  # judge.human_score
    labels: int  # people's scores of that name in the window (on no judged answer)
    newest: datetime | None  # the newest score of that name before the window's end
    exists: bool  # a score or a score config of that name exists
    names: tuple[str, ...]  # people's scores' and score configs' names, when none has it
    meant: str | None  # the one of them `name` probably misspells

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "exists": self.exists,
            "labels_in_window": self.labels,
            "newest_label": self.newest.isoformat() if self.newest else None,
            "names_found": list(self.names),
            "did_you_mean": self.meant,
        }


def judge_agreement(
    settings: Settings, start: datetime, end: datetime
) -> tuple[Agreement, Callable[[Pair], str | None], Empty | None]:
    """The agreement over the labels made in [start, end), how to link a pair, and why
    there is no pair (None when there is one)."""
    name = human_score(settings)
    api = build_api(settings)
    langfuse_ready(settings, api, None, posting=False)  # within source.first_contact_s, or why
    reader = AnnotationReader(api, build_budget(settings, Metrics()))
    base = without_credentials(settings.langfuse.base_url).rstrip("/")

    def link(pair: Pair) -> str | None:
        if not pair.project_id:
            return None
        return f"{base}/project/{pair.project_id}/traces/{pair.trace_id}"

    found = read_agreement(reader, settings.judge, name, start, end)
    empty = why_empty(reader, name, start, end) if found.pairs == 0 else None
    return found, link, empty


def why_empty(reader: AnnotationReader, name: str, start: datetime, end: datetime) -> Empty:
    """Why no label in [start, end) paired with a verdict: two or three requests."""
    import difflib

    newest = reader.newest(name, end, limit=1)
    if newest:
        at = newest[0].timestamp
        labels = len(reader.read(name, start, end)) if at >= start else 0
        return Empty(name, labels, at, True, (), None)
    configs = reader.config_names()
    if name in configs:  # configured, never used yet
        return Empty(name, 0, None, True, (), None)
    names = {score.name for score in reader.newest(None, end, limit=NAMES_READ)} | set(configs)
    close = difflib.get_close_matches(name, sorted(names), 1, 0.6)
    return Empty(name, 0, None, False, tuple(sorted(names)), close[0] if close else None)


def human_score(settings: Settings) -> str:
    """The score people write, or a ConfigError saying what to set."""
    if not settings.judge.human_score:
        raise ConfigError(
            "judge.human_score is not set: name the score people write in Langfuse "
            "(an annotation queue's BOOLEAN or NUMERIC score), e.g. "
            "OBSERVER_JUDGE__HUMAN_SCORE=faithful"
        )
    return settings.judge.human_score
