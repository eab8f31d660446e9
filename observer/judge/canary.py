"""The judge's canary: answers whose support is known, judged again and again (pure).

A canary file (`judge.canary_file`, docs/judge.md#a-canary) is JSON lines, each a
RagRecord with a `label`: "faithful" (every claim is supported by its sources) or
"unfaithful" (at least one is not), and an optional `why` for the person who reads a
disagreement. Its `trace_id` names the case: unique in the file.

A run gives each case the judge's verdict (unfaithful when its faithfulness is below
`judge.faithful_at`), or none (an error, an answer without claims). Over the cases with
a verdict: the agreement (the share judged as labelled), Cohen's kappa against the
labels, and the disagreements; against the run before, the flip rate (of the cases
with a verdict in both runs, the share whose verdict changed) and the flips. A figure
with nothing to compute it from is None, never 0 or 1. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

import orjson

from observer.judge.agreement import Confusion, kappa
from observer.model import RagRecord
from observer.records import RecordError, record_from_obj

LABELS: Final = {"faithful": False, "unfaithful": True}  # the label -> unfaithful


class CanaryError(ValueError):
    """A canary file that cannot be used; the message names the line and the problem."""


@dataclass(frozen=True, slots=True)
class Case:
    record: RagRecord
    unfaithful: bool  # what the case's label says the judge should find
    why: str | None = None

    @property
    def key(self) -> str:
        return self.record.trace_id


def read_cases(lines: Iterable[bytes], name: str) -> tuple[Case, ...]:
    """The cases of a canary file's lines; CanaryError names the first bad line (`name`
    is the file's, for the message). Blank lines are skipped; no case at all is an error."""
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{name}: line {number}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            raise CanaryError(f"{where}: invalid JSON: {error}") from None
        if not isinstance(obj, dict):
            raise CanaryError(f"{where}: expected a JSON object (a record with a label)")
        label = obj.pop("label", None)
        why = obj.pop("why", None)
        if label not in LABELS:
            raise CanaryError(f'{where}: "label" must be "faithful" or "unfaithful", got {label!r}')
        if why is not None and not isinstance(why, str):
            raise CanaryError(f'{where}: "why" must be a string')
        try:
            record = record_from_obj(obj)
        except RecordError as error:
            raise CanaryError(f"{where}: {error}") from None
        if record.trace_id in seen:
            raise CanaryError(
                f"{where}: trace_id {record.trace_id!r} again (first on line "
                f"{seen[record.trace_id]}); each case needs its own"
            )
        seen[record.trace_id] = number
        cases.append(Case(record, LABELS[label], why))
    if not cases:
        raise CanaryError(f"{name}: no case in the file (JSON lines of records with a label)")
    return tuple(cases)


@dataclass(frozen=True, slots=True)
class Figures:
    """One run of the canary, against its labels and against the run before."""

    cases: int
    judged: int  # cases with a verdict
    agreement: float | None  # the share of the judged cases the judge saw as labelled
    kappa: float | None
    flip_rate: float | None  # of the cases with a verdict in both runs, the share changed
    disagreements: tuple[str, ...] = ()  # case keys, in file order
    flips: tuple[str, ...] = ()

    @property
    def no_verdict(self) -> int:
        return self.cases - self.judged

    def as_dict(self, cases: Iterable[Case] = ()) -> dict[str, Any]:
        """The JSON of `observer judge canary --json`; `cases` add each disagreement's
        label and why."""
        known = {c.key: c for c in cases}

        def disagreement(key: str) -> dict[str, Any]:
            case = known.get(key)
            label = None if case is None else ("unfaithful" if case.unfaithful else "faithful")
            return {"trace_id": key, "label": label, "why": None if case is None else case.why}

        return {
            **asdict(self),  # its fields, in their order
            "disagreements": [disagreement(k) for k in self.disagreements],
            "flips": list(self.flips),
        }


def figures(
    cases: Iterable[Case],
    verdicts: Mapping[str, bool | None],
    previous: Mapping[str, bool] | None = None,
) -> Figures:
    """A run's figures: `verdicts` by case key (True: the judge found it unfaithful; None
    or absent: no verdict); `previous` the verdicts of the run before (None: no run)."""
    all_cases = tuple(cases)
    judged = [(c, verdicts[c.key]) for c in all_cases if verdicts.get(c.key) is not None]
    tp = sum(1 for c, v in judged if v and c.unfaithful)
    fp = sum(1 for c, v in judged if v and not c.unfaithful)
    fn = sum(1 for c, v in judged if not v and c.unfaithful)
    tn = len(judged) - tp - fp - fn
    agreed = tp + tn
    both = [(c.key, v) for c, v in judged if previous is not None and c.key in previous]
    flips = tuple(key for key, v in both if previous is not None and previous[key] != v)
    return Figures(
        cases=len(all_cases),
        judged=len(judged),
        agreement=agreed / len(judged) if judged else None,
        kappa=kappa(Confusion(tp, fp, fn, tn)),
        flip_rate=len(flips) / len(both) if both else None,
        disagreements=tuple(c.key for c, v in judged if v != c.unfaithful),
        flips=flips,
    )
