"""The one scheduler for time: every job it is given runs on its interval."""

from __future__ import annotations

import threading

from observer.background import Deadline, Schedule
from tests.waiting import wait_until


def test_a_job_not_run_at_once_runs_after_its_interval_and_then_again() -> None:
    # A job added without at_once (housekeeping, a fleet member's keeper and follower) must
    # run on its interval, not sit paused: apscheduler pauses a job whose next run is None.
    runs: list[int] = []
    twice = threading.Event()

    def job() -> None:
        runs.append(1)
        if len(runs) >= 2:
            twice.set()

    schedule = Schedule()
    schedule.every("later", job, 0.05, crash_event="later_crashed")
    schedule.start()
    try:
        wait_until(twice.is_set, "the job run twice on its interval")
    finally:
        assert schedule.stop(Deadline.within(5.0))
