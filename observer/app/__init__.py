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

if TYPE_CHECKING:  # the names, for type checkers; loaded when first asked for
    from observer.app.alerts import AlertStatus as AlertStatus
    from observer.app.alerts import Backtest as Backtest
    from observer.app.alerts import RegressionBacktest as RegressionBacktest
    from observer.app.alerts import alert_status as alert_status
    from observer.app.alerts import backtest as backtest
    from observer.app.alerts import backtest_incidents as backtest_incidents
    from observer.app.alerts import backtest_regressions as backtest_regressions
    from observer.app.alerts import open_alerts as open_alerts
    from observer.app.alerts import test_notification as test_notification
    from observer.app.alerts import test_notifiers as test_notifiers
    from observer.app.builders import build_api as build_api
    from observer.app.builders import build_judge_client as build_judge_client
    from observer.app.builders import build_source as build_source
    from observer.app.builders import now_utc as now_utc
    from observer.app.checks import check as check
    from observer.app.checks import check_resolver as check_resolver
    from observer.app.daemon import run_daemon as run_daemon
    from observer.app.daemon import signals_set as signals_set
    from observer.app.demo_run import demo as demo
    from observer.app.demo_run import demo_observations as demo_observations
    from observer.app.demo_run import demo_traces_path as demo_traces_path
    from observer.app.demo_run import serve_until_stopped as serve_until_stopped
    from observer.app.exits import EXIT_AUTH as EXIT_AUTH
    from observer.app.exits import EXIT_OK as EXIT_OK
    from observer.app.exits import EXIT_UNREACHABLE as EXIT_UNREACHABLE
    from observer.app.exits import exit_code as exit_code
    from observer.app.once import OnceResult as OnceResult
    from observer.app.once import backfill as backfill
    from observer.app.once import run_once as run_once
    from observer.app.parts import Mode as Mode
    from observer.app.parts import Parts as Parts
    from observer.app.parts import build as build
    from observer.pipeline import PassResult as PassResult

# Loaded when first asked for: `observer score` and `--help` import no client library.
_MODULES = {
    "observer.app.alerts": "AlertStatus Backtest RegressionBacktest alert_status backtest "
    "backtest_incidents backtest_regressions open_alerts test_notification test_notifiers",
    "observer.app.builders": "build_api build_judge_client build_source now_utc",
    "observer.app.checks": "check check_resolver",
    "observer.app.daemon": "run_daemon signals_set",
    "observer.app.demo_run": "demo demo_observations demo_traces_path serve_until_stopped",
    "observer.app.exits": "EXIT_AUTH EXIT_OK EXIT_UNREACHABLE exit_code",
    "observer.app.once": "OnceResult backfill run_once",
    "observer.app.parts": "Mode Parts build",
    "observer.pipeline": "PassResult",
}
_HOMES = {name: module for module, names in _MODULES.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
