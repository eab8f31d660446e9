"""What vulture (`vulture` with pyproject's [tool.vulture]) cannot see being used.

Pydantic's validators and `model_config`, click's commands and the packages' lazy
`__getattr__` are left out by pyproject's ignore lists. What is here is called by a
framework, or is a small module API the tests drive directly; anything else vulture
finds unused in observer/ is dead and goes (tests/test_repo_habits.py checks it).
"""

# ruff: noqa: B018 - a whitelist is bare names and attributes, read by vulture alone

from observer.alerts.triage import layer_of
from observer.background import DaemonThreads
from observer.otlp.assembly import Assembly
from observer.otlp.spans import convert
from observer.state.rows import DIMS
from observer.state.store import State


class _Anything:
    """Any attribute of any object (vulture reads the names; Python may run the file)."""

    def __getattr__(self, name: str) -> object:
        return self


_ = _Anything()

# Called by the frameworks: concurrent.futures (an Executor's submit), socketserver
# (daemon_threads), logging (a logger's handlers), cheroot (the body bound), rich (a
# console's closed pipe).
DaemonThreads.submit
_.daemon_threads
_.handlers
_.max_request_body_size
_.on_broken_pipe

# Module APIs the tests drive table by table: one layer of a sample, when the next trace
# is due, one trace recorded, the dimensions a row may hold, an export's spans as the
# Langfuse server turns them into observations (tests/instrumentations).
layer_of
Assembly.next_due_in
State.record_trace
DIMS
convert
