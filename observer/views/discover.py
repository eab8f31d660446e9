"""`observer discover`'s output: the discovery as lines for a terminal and as JSON
(`--json`), and the few lines `observer check` prints of it. Reads nothing:
`observer.app.discover` made the discovery."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from observer.app.discover import PARTS
from observer.views.words import counted

if TYPE_CHECKING:
    from observer.app.checks import RecentSample
    from observer.app.discover import Discovery, NameReport, Suggestion

# When the answer-looking traces skipped pass this share, `check` points to `discover`.
HINT_SKIP_SHARE = 0.2


def checks_text(checks: Counter[str]) -> str:
    """`sources: all 12, not_recorded 3; answer: confirmed 15` (docs/trace-convention.md)."""
    parts: dict[str, list[str]] = {}
    for key, count in checks.most_common():
        part, _, verdict = key.partition(" ")
        parts.setdefault(part, []).append(f"{verdict} {count:,}")
    return "; ".join(
        f"{part}: {', '.join(verdicts)}" for part, verdicts in sorted(parts.items(), reverse=True)
    )


def _reasons(skips: Counter[str], top: int | None = None) -> str:
    shown = ", ".join(f"{reason} {count}" for reason, count in skips.most_common(top))
    rest = len(skips) - top if top is not None else 0
    return shown + (f", and {rest} more reason{'s' if rest > 1 else ''}" if rest > 0 else "")


def discovery_lines(discovery: Discovery, window: str) -> list[str]:
    """The discovery for a person reading a terminal."""
    d = discovery
    lines = [
        f"observer discover: {counted(d.traces, 'trace')} ({window}), "
        f"{counted(d.answers, 'answer')}, "
        f"{d.scored} scored"
        + (f", {sum(d.skips.values())} skipped ({_reasons(d.skips)})" if d.skips else "")
    ]
    if d.partial:
        lines.append(
            f"  {counted(d.partial, 'trace')} left out: their root observation was not in the "
            "window read"
        )
    if d.hook:
        lines.append("  mapping.hook builds the records: the default convention is not used")
    for report in d.names:
        lines += _report_lines(report)
    if d.suggestion is None:
        if not d.hook:
            lines += ["", "no [mapping] suggestion: the default convention reads what it can here"]
        return lines
    return lines + _suggestion_lines(d.suggestion, d.traces)


def _report_lines(report: NameReport) -> list[str]:
    """One trace name's block: its counts, where each part was found, what to do."""
    lines = [
        "",
        f"{report.name}: {counted(report.traces, 'trace')}, "
        f"{counted(report.answers, 'answer')}, "
        f"{report.scored} scored"
        + (f", {report.skipped} skipped ({_reasons(report.skips)})" if report.skips else ""),
    ]
    for part in PARTS:
        found = report.found.get(part)
        for rank, (rule, count) in enumerate((found or Counter()).most_common(2)):
            label = part if rank == 0 else ""
            at = report.found_at[(part, rule)]
            source = at.most_common(1)[0][0]
            others = f" and {len(at) - 1} more" if len(at) > 1 else ""
            lines.append(f"  {label:<9} {rule}  [{count}/{report.traces}, from {source}{others}]")
        if found and len(found) > 2:
            lines.append(f"  {'':<9} ... and {counted(len(found) - 2, 'other rule')}")
    if report.checks:
        lines.append(f"  checked   {checks_text(report.checks)}")
    for proposal in report.proposals:
        lines.append(f"  suggest   {proposal.key} + {proposal.value!r}: {proposal.why}")
    if report.scored_after is not None and report.proposals:
        lines.append(f"  tried     scored {report.scored} -> {report.scored_after}")
    for reason, trace_id in report.examples.items():
        lines.append(f"  see       observer explain {trace_id}  (a {reason} skip)")
    for refused, why in report.refused.items():
        lines.append(f"  not proposed {refused}: {why}")
    for note, count in report.notes.most_common(3):
        lines.append(f"  no mapping key reads {count}: {note} (a mapping.hook can)")
    return lines


def _suggestion_lines(suggestion: Suggestion, traces: int) -> list[str]:
    """The suggested [mapping]: what it changed on the sample, and the block to paste."""
    lines = [
        "",
        f"suggested [mapping], tried on this sample: scored {suggestion.scored_before} -> "
        f"{suggestion.scored_after} of {counted(traces, 'trace')}",
    ]
    if suggestion.lost:
        lines.append(
            f"  careful: {counted(len(suggestion.lost), 'trace')} scored before no longer would: "
            + ", ".join(suggestion.lost[:5])
        )
    lines += [
        "paste it into your config file (in place of its [mapping] section, if it has one):",
        "",
        suggestion.toml.rstrip("\n"),
    ]
    return lines


def discovery_json(discovery: Discovery, window: str) -> dict[str, Any]:
    """The discovery as one JSON object (`observer discover --json`)."""
    suggestion = discovery.suggestion
    return {
        "window": window,
        "traces": discovery.traces,
        "answers": discovery.answers,
        "scored": discovery.scored,
        "skips": dict(discovery.skips.most_common()),
        "partial": discovery.partial,
        "hook": discovery.hook,
        "names": [
            {
                "name": r.name,
                "traces": r.traces,
                "answers": r.answers,
                "scored": r.scored,
                "skipped": r.skipped,
                "skips": dict(r.skips.most_common()),
                "found": {
                    part: [
                        {
                            "rule": rule,
                            "traces": count,
                            "observations": dict(r.found_at[(part, rule)].most_common()),
                        }
                        for rule, count in counted.most_common()
                    ]
                    for part, counted in r.found.items()
                },
                "proposals": [{"key": p.key, "value": p.value, "why": p.why} for p in r.proposals],
                "checks": dict(r.checks.most_common()),
                "unreadable": dict(r.notes.most_common()),
                "not_proposed": dict(r.refused),
                "examples": r.examples,
                "scored_after": r.scored_after,
            }
            for r in discovery.names
        ],
        "suggestion": None
        if suggestion is None
        else {
            "mapping": suggestion.mapping,
            "scored_before": suggestion.scored_before,
            "scored_after": suggestion.scored_after,
            "lost": list(suggestion.lost),
            "toml": suggestion.toml,
        },
    }


def check_rows(discovery: Discovery, window: str) -> list[tuple[str, str]]:
    """`observer check`'s few lines of it: traces, answers, scored, skips, the hint."""
    d = discovery
    rows = [
        (
            "traces read",
            f"{counted(d.traces, 'trace')} in {window}, {counted(d.answers, 'answer')}, "
            f"{d.scored:,} scored",
        )
    ]
    if d.skips:
        rows.append(("skipped", f"{sum(d.skips.values()):,} ({_reasons(d.skips, 4)})"))
    if d.checks:
        rows.append(("checked", checks_text(d.checks)))
    share = d.answers_skipped / d.answers if d.answers else 0.0
    if d.suggestion is not None or share > HINT_SKIP_SHARE:
        rows.append(
            (
                "hint",
                f"{d.answers_skipped:,} of {counted(d.answers, 'answer')} skipped: "
                "run `observer discover` "
                "to see why, and the [mapping] that reads them",
            )
        )
    return rows


def newest_note(traces: int, limit: int) -> str:
    """`, the newest N` when a sample of `traces` traces was cut at its limit."""
    return f", the newest {limit}" if traces >= limit else ""


def recent_rows(recent: RecentSample) -> list[tuple[str, str]]:
    """`check`'s lines of `discover` over the last hour (a failed read is a line too)."""
    if recent.discovery is None:
        return [("traces read", f"not read: {recent.error}")]
    window = "the last hour" + newest_note(recent.traces, recent.limit)
    return check_rows(recent.discovery, window)
