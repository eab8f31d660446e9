"""The one scheduler for time: every job it is given runs on its interval."""

from __future__ import annotations

import threading
import time

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


def test_a_job_whose_time_passed_while_the_process_was_busy_still_runs() -> None:
    # A machine busy for seconds (or a paused VM) makes every job late: apscheduler's default
    # skipped a job more than 1 s late, so a fleet keeper could miss its renewals in a row.
    ran = threading.Event()
    schedule = Schedule()
    schedule.every("late", ran.set, 3600.0, crash_event="late_crashed", at_once=True)
    time.sleep(1.5)  # the run is due now; the scheduler starts 1.5 s after: it is late
    schedule.start()
    try:
        wait_until(ran.is_set, "the late job run")
    finally:
        assert schedule.stop(Deadline.within(5.0))
