"""apscheduler, with jobs run in daemon threads.

apscheduler's thread pool is `concurrent.futures`, whose workers the
interpreter joins at exit: a poll stuck in a 30 s request would hold a
stopping daemon past its grace period. Here each run is its own daemon
thread, so shutdown abandons it instead (the state file stays consistent:
every write is one SQLite transaction).
"""

from __future__ import annotations

import threading
from datetime import UTC
from typing import Any

from apscheduler.executors.base import BaseExecutor, run_job  # type: ignore[import-untyped]
from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]


class DaemonThreadExecutor(BaseExecutor):  # type: ignore[misc]
    def _do_submit_job(self, job: Any, run_times: Any) -> None:
        def target() -> None:
            try:
                events = run_job(job, job._jobstore_alias, run_times, self._logger.name)
            except BaseException as error:
                self._run_job_error(job.id, error, error.__traceback__)
            else:
                self._run_job_success(job.id, events)

        threading.Thread(target=target, name=f"observer-job-{job.id}", daemon=True).start()


def background_scheduler() -> Any:
    """A BackgroundScheduler in UTC whose jobs never keep the process alive."""
    return BackgroundScheduler(timezone=UTC, executors={"default": DaemonThreadExecutor()})
