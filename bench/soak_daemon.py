"""`observer run` with a stopwatch on the alert evaluator: bench/soak.py's daemon.

Nothing reports how long an alert evaluation takes (the evaluator logs only a
catch-up in progress, `alert_evaluation_behind`, and /metrics counts group
evaluations, `observer_alert_evaluations_total`, without timing them). So the
soak starts the daemon through this module, which wraps `AlertEvaluator.tick`
(one bounded `AlertService.evaluate_step` over every rule, on the evaluator's
own thread) and logs each tick that evaluated through the daemon's own
structlog pipeline, as one more JSON line:

    {"event": "soak_alert_tick", "wall_s": ..., "cpu_s": ..., "points": ..., "left": ...}

`wall_s` is the tick's elapsed time (with the poll thread competing for the
GIL), `cpu_s` its thread's CPU time. Nothing else changes: the command line
is `observer`'s, e.g. `python -m soak_daemon run --state ...` with the
snapshot of the package on PYTHONPATH.
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from observer.alerts.evaluator import AlertEvaluator
from observer.cli import main

log = structlog.get_logger("soak.stopwatch")
_tick = AlertEvaluator.tick


def _timed_tick(self: AlertEvaluator, *, resume: bool = True) -> bool:
    before = self.last
    wall, cpu = time.perf_counter(), time.thread_time()
    more: Any = False
    try:
        more = _tick(self, resume=resume)
        return bool(more)
    finally:
        step = self.last
        if step is not None and step is not before:  # an evaluation ran (not a bare wait)
            log.info(
                "soak_alert_tick",
                wall_s=round(time.perf_counter() - wall, 4),
                cpu_s=round(time.thread_time() - cpu, 4),
                points=step.points,
                left=step.left,
                events=len(step.events),
            )


AlertEvaluator.tick = _timed_tick  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
