"""Composition root: builds and wires everything, owns start and shutdown.

    exits     the exit codes, and which one a remote error means
    builders  every client and part built from the settings, in one place
    parts     `Parts` (a context manager) and `build`: the wiring, and the one stop
    passes    the one pass driver and its outcome
    checks    `observer check`: state file, chunk store, Langfuse, row by row
    alerts    rules over a state file (status, backtest), test alerts
    once      `run --once` and `backfill`
    daemon    the loop until SIGTERM/SIGINT, and its shutdown in the grace
    demo_run  the pipeline over the bundled traces and an hour of copies, and serving its port

Exit codes of the commands built here: 0 done; 2 bad configuration or state
file; 3 Langfuse unreachable (or scores still undelivered at exit, kept in
the outbox for the next run); 4 Langfuse rejected the keys.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from observer.app.alerts import (
        AlertStatus,
        Backtest,
        RegressionBacktest,
        alert_status,
        backtest,
        backtest_incidents,
        backtest_regressions,
        open_alerts,
        test_notification,
        test_notifiers,
    )
    from observer.app.builders import (
        build_alerts,
        build_api,
        build_health,
        build_judge_client,
        build_notifiers,
        build_resolver,
        build_source,
        now_utc,
        start_http,
    )
    from observer.app.checks import (
        CHECK_SAMPLE_IDS,
        CHECK_SAMPLE_PAGES,
        CheckResult,
        check,
        check_resolver,
        check_state,
        ingestion_row,
        recent_answers,
    )
    from observer.app.daemon import run_daemon, signals_set
    from observer.app.demo_run import (
        demo,
        demo_observations,
        demo_traces_path,
        serve_until_stopped,
    )
    from observer.app.exits import EXIT_AUTH, EXIT_CONFIG, EXIT_OK, EXIT_UNREACHABLE, exit_code
    from observer.app.once import (
        MAX_BACKFILL_CHUNK,
        OnceResult,
        backfill,
        run_once,
        undelivered_message,
    )
    from observer.app.parts import Mode, Parts, build
    from observer.pipeline import PassResult

# Loaded when first asked for: `observer score` and `--help` import no client library.
_HOMES = {
    "AlertStatus": "observer.app.alerts",
    "alert_status": "observer.app.alerts",
    "backtest_incidents": "observer.app.alerts",
    "Backtest": "observer.app.alerts",
    "backtest": "observer.app.alerts",
    "RegressionBacktest": "observer.app.alerts",
    "backtest_regressions": "observer.app.alerts",
    "open_alerts": "observer.app.alerts",
    "test_notification": "observer.app.alerts",
    "test_notifiers": "observer.app.alerts",
    "CHECK_SAMPLE_IDS": "observer.app.checks",
    "CHECK_SAMPLE_PAGES": "observer.app.checks",
    "CheckResult": "observer.app.checks",
    "check": "observer.app.checks",
    "check_resolver": "observer.app.checks",
    "check_state": "observer.app.checks",
    "ingestion_row": "observer.app.checks",
    "recent_answers": "observer.app.checks",
    "run_daemon": "observer.app.daemon",
    "signals_set": "observer.app.daemon",
    "demo": "observer.app.demo_run",
    "demo_observations": "observer.app.demo_run",
    "demo_traces_path": "observer.app.demo_run",
    "serve_until_stopped": "observer.app.demo_run",
    "EXIT_AUTH": "observer.app.exits",
    "EXIT_CONFIG": "observer.app.exits",
    "EXIT_OK": "observer.app.exits",
    "EXIT_UNREACHABLE": "observer.app.exits",
    "exit_code": "observer.app.exits",
    "MAX_BACKFILL_CHUNK": "observer.app.once",
    "OnceResult": "observer.app.once",
    "backfill": "observer.app.once",
    "run_once": "observer.app.once",
    "undelivered_message": "observer.app.once",
    "Mode": "observer.app.parts",
    "Parts": "observer.app.parts",
    "build": "observer.app.parts",
    "build_alerts": "observer.app.builders",
    "build_api": "observer.app.builders",
    "build_health": "observer.app.builders",
    "build_judge_client": "observer.app.builders",
    "build_notifiers": "observer.app.builders",
    "build_resolver": "observer.app.builders",
    "build_source": "observer.app.builders",
    "now_utc": "observer.app.builders",
    "start_http": "observer.app.builders",
    "PassResult": "observer.pipeline",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'observer.app' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = [
    "CHECK_SAMPLE_IDS",
    "CHECK_SAMPLE_PAGES",
    "EXIT_AUTH",
    "EXIT_CONFIG",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "MAX_BACKFILL_CHUNK",
    "AlertStatus",
    "Backtest",
    "CheckResult",
    "Mode",
    "OnceResult",
    "Parts",
    "PassResult",
    "RegressionBacktest",
    "alert_status",
    "backfill",
    "backtest",
    "backtest_incidents",
    "backtest_regressions",
    "build",
    "build_alerts",
    "build_api",
    "build_health",
    "build_judge_client",
    "build_notifiers",
    "build_resolver",
    "build_source",
    "check",
    "check_resolver",
    "check_state",
    "demo",
    "demo_observations",
    "demo_traces_path",
    "exit_code",
    "ingestion_row",
    "now_utc",
    "open_alerts",
    "recent_answers",
    "run_daemon",
    "run_once",
    "serve_until_stopped",
    "signals_set",
    "start_http",
    "test_notification",
    "test_notifiers",
    "undelivered_message",
]
