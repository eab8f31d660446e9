"""`observer init-langfuse`: score configs for every score observer writes, and a dashboard.

    specs.py    what should exist (pure): a score config per score of
                observer.scores.catalogue, the dashboard and its widgets
    diff.py     what exists against what should (pure): fits, differs, or create it
    report.py   what was done per object, its lines and exit code (pure)
    remote.py   the calls to Langfuse (I/O, on observer.retry's policy) and the run

`init_langfuse(api)` makes it so, idempotently, and returns a `SetupReport` that
says per object what it found and did: created, existed (unchanged), differs
(an existing object of that name with another type, range or definition: left as
it is, never duplicated), refused (the server's 4xx and its message) or failed
(Langfuse unreachable, rate limited for too long, or the keys rejected: the run
stops there and says what it did not attempt). An existing dashboard gets the
widgets missing from it appended; nothing else is edited.
"""

from __future__ import annotations

from observer.langfuse_setup.diff import (
    ExistingConfig,
    config_difference,
    decide_config,
    decide_widget,
    widget_difference,
)
from observer.langfuse_setup.remote import init_langfuse, list_score_configs
from observer.langfuse_setup.report import (
    EXIT_ATTENTION,
    Kind,
    SetupItem,
    SetupOutcome,
    SetupReport,
    run_report,
)
from observer.langfuse_setup.specs import (
    DASHBOARD_NAME,
    SCORE_CONFIGS,
    SCORE_NAMES,
    WIDGETS,
    Category,
    placements,
)

__all__ = [
    "DASHBOARD_NAME",
    "EXIT_ATTENTION",
    "SCORE_CONFIGS",
    "SCORE_NAMES",
    "WIDGETS",
    "Category",
    "ExistingConfig",
    "Kind",
    "SetupItem",
    "SetupOutcome",
    "SetupReport",
    "config_difference",
    "decide_config",
    "decide_widget",
    "init_langfuse",
    "list_score_configs",
    "placements",
    "run_report",
    "widget_difference",
]
