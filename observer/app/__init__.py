"""Composition root: builds and wires everything, owns start and shutdown.

    exits     the exit codes, and which one a remote error means
    parts     the builders and `Parts` (a context manager): every client built here
    checks    `observer check`: state file, chunk store, Langfuse, row by row
    alerts    rules over a state file (status, backtest), test alerts
    once      `run --once` and `backfill`
    daemon    the loop until SIGTERM/SIGINT, and its shutdown in the grace
    demo_run  the pipeline over the bundled traces, and serving its port

Exit codes of the commands built here: 0 done; 2 bad configuration or state
file; 3 Langfuse unreachable (or scores still undelivered at exit, kept in
the outbox for the next run); 4 Langfuse rejected the keys.
"""

from __future__ import annotations

from observer.app.alerts import (
    Backtest,
    backtest,
    open_alerts,
    test_notification,
    test_notifiers,
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
    require_supported_server,
)
from observer.app.daemon import run_daemon, signals_set
from observer.app.demo_run import demo, demo_traces_path, serve_until_stopped
from observer.app.exits import EXIT_AUTH, EXIT_CONFIG, EXIT_OK, EXIT_UNREACHABLE, exit_code
from observer.app.once import (
    MAX_BACKFILL_CHUNK,
    OnceResult,
    alert_after_pass,
    backfill,
    run_once,
    undelivered_message,
)
from observer.app.parts import (
    Parts,
    build,
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
from observer.pipeline import PassResult

__all__ = [
    "CHECK_SAMPLE_IDS",
    "CHECK_SAMPLE_PAGES",
    "EXIT_AUTH",
    "EXIT_CONFIG",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "MAX_BACKFILL_CHUNK",
    "Backtest",
    "CheckResult",
    "OnceResult",
    "Parts",
    "PassResult",
    "alert_after_pass",
    "backfill",
    "backtest",
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
    "demo_traces_path",
    "exit_code",
    "ingestion_row",
    "now_utc",
    "open_alerts",
    "recent_answers",
    "require_supported_server",
    "run_daemon",
    "run_once",
    "serve_until_stopped",
    "signals_set",
    "start_http",
    "test_notification",
    "test_notifiers",
    "undelivered_message",
]
