"""The rule families: each kind of rule a small class of one shape.

    family.step(now, rows) -> list[Outgoing]      what it queued, in the outbox already

    JudgeHealth     window rules on the judge's own health: stepped first, the rules
                    after it hold or tell their judge alerts by it
    WindowRules     window rules: windows slid over the history, a bounded number of
                    evaluation points per step (families/window.py)
    Regressions     release regressions: a new release against the one before it, from
                    SQLite's statistics (families/release.py)
    Digests         the trace rules' hourly digests (families/trace.py)
    TraceRules      trace rules: `rows` are the rows just written, the scorer's or the
                    judge's (families/trace.py)

Every family decides from the history and its stored state, and hands its state and
messages to the one `Sender` (observer.alerts.sender), which places them in incidents
and writes them in one transaction. `rows` is the history as a family reads it:
`History` (under the state file's lock) or the evaluator's own `HistoryReader`.
"""

from observer.alerts.families.family import Family, Options, Rows

__all__ = ["Family", "Options", "Rows"]
