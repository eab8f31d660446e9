"""How far the judge agrees with the people who annotate in Langfuse (pure).

Each pair is one trace with a verdict of observer's judge (unfaithful when its
faithfulness is below `judge.faithful_at`) and a person's label read from an
annotation score in Langfuse. Over the pairs, on the two classes
faithful / unfaithful:

- Cohen's kappa: the agreement beyond what the two raters' own rates of each
  class would give by chance, `(p_o - p_e) / (1 - p_e)`;
- the judge's precision on unfaithful answers (of those it called unfaithful,
  how many people did too) and its recall (of those people called unfaithful,
  how many it found);
- the disagreements, to open in Langfuse.

A figure that cannot be computed is None, never 0 or 1: no pairs at all; no
answer the judge called unfaithful (precision); none people did (recall);
both raters giving one class only (kappa: no variation to agree on). The same
figures per judge (model, prompt-template hash, observer version): a new judge
is compared on its own. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Judge:
    """Which judge wrote a verdict: a change of any part is a new judge."""

    model: str
    prompt_hash: str
    version: str

    @property
    def key(self) -> str:
        return f"{self.model} prompt {self.prompt_hash} observer {self.version}"


@dataclass(frozen=True, slots=True)
class Pair:
    trace_id: str
    judge_unfaithful: bool
    human_unfaithful: bool
    judge: Judge
    project_id: str | None = None

    @property
    def agrees(self) -> bool:
        return self.judge_unfaithful == self.human_unfaithful


@dataclass(frozen=True, slots=True)
class Confusion:
    """Counts with unfaithful as the positive class: the judge's verdict against people's."""

    both_unfaithful: int = 0  # true positives
    judge_only: int = 0  # the judge said unfaithful, people faithful (false positives)
    human_only: int = 0  # people said unfaithful, the judge faithful (false negatives)
    both_faithful: int = 0  # true negatives

    @classmethod
    def of(cls, pairs: Iterable[Pair]) -> Confusion:
        tp = fp = fn = tn = 0
        for pair in pairs:
            if pair.judge_unfaithful and pair.human_unfaithful:
                tp += 1
            elif pair.judge_unfaithful:
                fp += 1
            elif pair.human_unfaithful:
                fn += 1
            else:
                tn += 1
        return cls(tp, fp, fn, tn)

    @property
    def total(self) -> int:
        return self.both_unfaithful + self.judge_only + self.human_only + self.both_faithful


def kappa(c: Confusion) -> float | None:
    """Cohen's kappa of a 2x2 table; None with no pairs or when chance explains it all."""
    n = c.total
    if n == 0:
        return None
    observed = (c.both_unfaithful + c.both_faithful) / n
    judge_unfaithful = (c.both_unfaithful + c.judge_only) / n
    human_unfaithful = (c.both_unfaithful + c.human_only) / n
    chance = judge_unfaithful * human_unfaithful + (1 - judge_unfaithful) * (1 - human_unfaithful)
    if chance >= 1.0:
        return None  # both raters gave one class only: nothing to agree on beyond chance
    return (observed - chance) / (1 - chance)


def precision(c: Confusion) -> float | None:
    called = c.both_unfaithful + c.judge_only
    return c.both_unfaithful / called if called else None


def recall(c: Confusion) -> float | None:
    labelled = c.both_unfaithful + c.human_only
    return c.both_unfaithful / labelled if labelled else None


@dataclass(frozen=True, slots=True)
class Agreement:
    pairs: int
    kappa: float | None
    precision: float | None
    recall: float | None
    confusion: Confusion
    disagreements: tuple[Pair, ...] = ()
    by_judge: dict[str, Agreement] = field(default_factory=dict)

    def as_dict(self, trace_url: Any = None) -> dict[str, Any]:
        """The JSON of `observer judge agreement --json`; `trace_url(pair)` links a pair."""
        out: dict[str, Any] = {
            "pairs": self.pairs,
            "kappa": self.kappa,
            "precision": self.precision,
            "recall": self.recall,
            "confusion": {
                "both_unfaithful": self.confusion.both_unfaithful,
                "judge_only_unfaithful": self.confusion.judge_only,
                "human_only_unfaithful": self.confusion.human_only,
                "both_faithful": self.confusion.both_faithful,
            },
            "disagreements": [
                {
                    "trace_id": p.trace_id,
                    "judge": "unfaithful" if p.judge_unfaithful else "faithful",
                    "human": "unfaithful" if p.human_unfaithful else "faithful",
                    "url": trace_url(p) if trace_url is not None else None,
                }
                for p in self.disagreements
            ],
        }
        if self.by_judge:
            out["by_judge"] = {k: v.as_dict(trace_url) for k, v in sorted(self.by_judge.items())}
        return out


def agreement(pairs: Sequence[Pair], *, per_judge: bool = True) -> Agreement:
    """The figures over `pairs`, and (with `per_judge`) the same per judge."""
    confusion = Confusion.of(pairs)
    by_judge: dict[str, Agreement] = {}
    if per_judge:
        judges = sorted({p.judge for p in pairs}, key=lambda j: j.key)
        by_judge = {
            j.key: agreement([p for p in pairs if p.judge == j], per_judge=False) for j in judges
        }
    return Agreement(
        pairs=confusion.total,
        kappa=kappa(confusion),
        precision=precision(confusion),
        recall=recall(confusion),
        confusion=confusion,
        disagreements=tuple(p for p in pairs if not p.agrees),
        by_judge=by_judge,
    )


def human_unfaithful(data_type: str, value: float, threshold: float) -> bool | None:
    """A person's label as unfaithful or not: a BOOLEAN score's 0 (1 is faithful); a
    NUMERIC score below `threshold` (`judge.human_threshold`); None for anything else."""
    if data_type == "BOOLEAN":
        return value < 0.5
    if data_type == "NUMERIC":
        return value < threshold
    return None


# A judge score written before scores named their judge (observer < 0.4): one judge of its own.
UNKNOWN_JUDGE = Judge("unknown", "unknown", "unknown")


@dataclass(frozen=True, slots=True)
class ScoreRead:
    """One score on a trace: the judge's faithfulness, or a person's label, as read."""

    trace_id: str
    at: float  # the score's timestamp, unix seconds: the latest of a trace counts
    unfaithful: bool | None  # None: a label that reads neither way (another type)
    judge: Judge | None = None
    project_id: str | None = None


def pairs_of(judged: Iterable[ScoreRead], labelled: Iterable[ScoreRead]) -> list[Pair]:
    """The traces with both a verdict of the judge and a person's label (the latest of
    each), in trace order; labels that read neither way are left out."""
    latest_judged = _latest(judged)
    latest_labels = _latest(v for v in labelled if v.unfaithful is not None)
    out: list[Pair] = []
    for trace_id in sorted(latest_judged.keys() & latest_labels.keys()):
        verdict, label = latest_judged[trace_id], latest_labels[trace_id]
        if verdict.unfaithful is None or label.unfaithful is None:
            continue
        out.append(
            Pair(
                trace_id,
                verdict.unfaithful,
                label.unfaithful,
                verdict.judge or UNKNOWN_JUDGE,
                verdict.project_id or label.project_id,
            )
        )
    return out


def _latest(verdicts: Iterable[ScoreRead]) -> dict[str, ScoreRead]:
    found: dict[str, ScoreRead] = {}
    for verdict in verdicts:
        kept = found.get(verdict.trace_id)
        if kept is None or verdict.at > kept.at:
            found[verdict.trace_id] = verdict
    return found
