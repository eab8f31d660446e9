"""The scores of docs/scores.md for one record (`observer.scores.events`: values, ids,
comments) and their catalogue (`observer.scores.catalogue`)."""

from observer.scores.catalogue import ScoreEntry
from observer.scores.events import (
    SCORE_ID_NAMESPACE,
    SIGNAL_SCORE_NAMES,
    concentration_comment,
    score_events,
    score_events_of,
    score_id,
)

__all__ = [
    "SCORE_ID_NAMESPACE",
    "SIGNAL_SCORE_NAMES",
    "ScoreEntry",
    "concentration_comment",
    "score_events",
    "score_events_of",
    "score_id",
]
