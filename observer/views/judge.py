"""`observer judge agreement` and `observer judge canary` as plain lines: the figures,
then per judge, then the disagreements with their links or their why (one a line, never
wrapped)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from observer.judge.agreement import Agreement, Pair
from observer.times import iso
from observer.views.words import counted

if TYPE_CHECKING:
    from observer.app.judge_agreement import Empty
from observer.judge.canary import Case, Figures


def _figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def figures(found: Agreement) -> str:
    return (
        f"pairs {found.pairs}  kappa {_figure(found.kappa)}  "
        f"precision {_figure(found.precision)}  recall {_figure(found.recall)}"
    )


def empty_line(empty: Empty) -> str:
    """Why there is nothing to compare: what a person does next differs with each."""
    name = empty.name
    if empty.labels:
        return (
            f"{counted(empty.labels, 'label')} named {name!r} in the window, none on an answer the "
            "judge scored: nothing to compare (pairs 0); the judge samples judge.rate of "
            "the answers, so label judged ones (a faithfulness score on the trace)"
        )
    if empty.newest is not None:
        return (
            f"no label named {name!r} in the window (pairs 0); the newest is from "
            f"{iso(empty.newest)}: look further back with --since"
        )
    if empty.exists:
        return (
            f"no one has labelled with {name!r} yet (its score config exists): nothing to "
            "compare (pairs 0)"
        )
    hint = f" did you mean {empty.meant!r}?" if empty.meant else ""
    found = (
        f"people's scores and score configs here are named {', '.join(map(repr, empty.names))}"
        if empty.names
        else "people have written no scores here yet"
    )
    return f"no score named {name!r} exists in Langfuse (judge.human_score):{hint} {found}"


def agreement_lines(
    found: Agreement, link: Callable[[Pair], str | None], empty: Empty | None = None
) -> list[str]:
    if found.pairs == 0:
        if empty is not None:
            return [empty_line(empty)]
        return [
            "no answer both judged and labelled in the window: nothing to compare (pairs 0, "
            "kappa n/a)"
        ]
    lines = [f"judge against people: {figures(found)}  (unfaithful is the positive class)"]
    for key, each in sorted(found.by_judge.items()):
        lines.append(f"  {key}: {figures(each)}")
    if found.disagreements:
        lines.append(f"disagreements ({len(found.disagreements)}):")
        for pair in found.disagreements:
            judge = "unfaithful" if pair.judge_unfaithful else "faithful"
            person = "unfaithful" if pair.human_unfaithful else "faithful"
            where = link(pair) or pair.trace_id
            lines.append(f"  judge {judge}, people {person}: {where}")
    return lines


def canary_lines(found: Figures, cases: tuple[Case, ...]) -> list[str]:
    known = {c.key: c for c in cases}
    lines = [
        f"canary: {found.cases} cases, {found.judged} judged  agreement "
        f"{_figure(found.agreement)}  kappa {_figure(found.kappa)}"
    ]
    if found.no_verdict:
        lines.append(f"  {found.no_verdict} without a verdict (a judge error or no claims)")
    if found.disagreements:
        lines.append(f"disagreements ({len(found.disagreements)}):")
        for key in found.disagreements:
            case = known[key]
            label = "unfaithful" if case.unfaithful else "faithful"
            judged = "faithful" if case.unfaithful else "unfaithful"
            why = f": {case.why}" if case.why else ""
            lines.append(f"  {key}: judged {judged}, labelled {label}{why}")
    return lines
