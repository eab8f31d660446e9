"""The one dispatcher between the pipeline and a score sink.

Fire-and-forget for the poll loop: it writes scores to the outbox (bounded,
in the state file) and calls `notify()`, which never blocks. A worker thread
sends due scores in batches and removes them only when the sink acknowledged
them. Failures never kill the worker: a 429 waits for `Retry-After`, network
errors and 5xx back off exponentially (with jitter), a batch Langfuse refuses
as a whole (400) is split to find the bad score, which alone is dropped and
counted. The outbox also holds deletions (scores that no longer apply to their
trace, docs/scores.md): sent as DELETEs, whose own rate limit holds only them.
When Langfuse acknowledges the last of a trace's scores, the time from the
trace's last activity (kept with them in the outbox) to that moment is
observed once (`observer_trace_to_score_seconds`); scores dropped on the way
are not an acknowledgement. A batch is as many due scores as fit in one
POST body (`BATCH_BYTES` of outbox payload; `sink.batch_size` caps the count when
set), so the request budget (observer.sources.ratelimit) carries thousands of
scores a request, not a hundred. The sending runs on an `observer.background.Worker`
(woken by `notify()`, else every `interval_s`). `flush(timeout_s)` sends what is
due now; `shutdown(deadline)` flushes by the deadline and stops the worker, and
says whether every thread that used the state file ended (only then may it be
closed). It is idempotent.

A failed push is logged (`score_push_failed`) and counted
(`observer_score_push_errors_total{kind}`) by what happened, `status` logged
when Langfuse answered:

    rate_limited   429                          waits for Retry-After
    auth           401/403                      waits at least 60 s
    misdirected    a redirect (3xx) not followed waits at least 60 s: the base URL is wrong
    server_error   5xx (or 408/409: try again)  backs off exponentially
    unreachable    no answer (refused, timeout) backs off exponentially

`server_error` and `unreachable` are retried alike; only the name differs.

Scores sent but not marked as sent (the state file cannot be written: a full
disk) are not sent again every second: sending pauses, doubling from 2 s up to
`max_backoff_s`, until a mark succeeds (`outbox_unwritable` says for how long).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import structlog
from opentelemetry import trace

from observer.background import Deadline, Worker
from observer.errors import AuthRejected, Misdirected, RateLimited, Rejected, RemoteError
from observer.model import ScoreEvent
from observer.retry import backoff_s
from observer.sinks import ScoreSink
from observer.state import State, StateError
from observer.state.store import Op
from observer.telemetry.metrics import Metrics

log = structlog.get_logger("observer.dispatcher")


def push_error_kind(error: RemoteError) -> str:
    """`server_error` when Langfuse answered (a status: 5xx, 408, 409), else `unreachable`.

    For the errors left once 429, 401/403 and the other 4xx were told apart."""
    return "server_error" if error.status is not None else "unreachable"


NO_SPANS = trace.NoOpTracer()  # without telemetry

# A batch read from the outbox: payload bytes (the stored JSON is a little larger than
# what is posted: it keeps null fields; a configId adds ~40 bytes), and a count bound
# that only keeps a read of tiny scores from walking the whole outbox.
BATCH_BYTES = 900_000
MAX_BATCH_SCORES = 10_000


def _pushed(result: str, *, failed: bool = False) -> None:
    """The outcome of the batch being pushed, on its `observer.score_batch_pushed` span."""
    span = trace.get_current_span()
    span.set_attribute("observer.result", result)
    if failed:
        span.set_status(trace.StatusCode.ERROR, result)


class Dispatcher:
    def __init__(
        self,
        state: State,
        sink: ScoreSink,
        metrics: Metrics,
        *,
        batch_size: int | None = None,
        batch_bytes: int = BATCH_BYTES,
        interval_s: float = 1.0,
        max_backoff_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        tracer: trace.Tracer = NO_SPANS,
    ) -> None:
        self.tracer = tracer  # Telemetry.tracer, from the composition root
        self._state = state
        self.sink = sink
        self._metrics = metrics
        # A batch is as many scores as fit in `batch_bytes` of outbox payload (one POST of
        # under 1,000,000 bytes, the sink splits any larger), at most `batch_size` of them.
        self._batch_size = batch_size if batch_size is not None else MAX_BATCH_SCORES
        self._batch_bytes = batch_bytes
        self._max_backoff_s = max_backoff_s
        self._clock = clock
        self._send_lock = threading.Lock()
        self._worker = Worker(
            "observer-dispatcher",
            self._step,
            interval_s=interval_s,
            crash_event="dispatcher_failed",
        )
        self._stop = self._worker.stopping
        self._flushing: threading.Thread | None = None
        self.auth_failed = False
        self.last_error: str | None = None
        self.last_error_kind: str | None = None  # push_errors' kind: rate_limited, auth, ...
        self._resume_at = 0.0  # clock time before which nothing is sent
        self.delivered = 0  # scores Langfuse acknowledged, by this process (a run's report)
        self.refused = 0  # scores Langfuse refused for good
        self._unmarked = 0  # marks of the outbox failed in a row (disk full)
        self._metrics.outbox.set(state.outbox_size())

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        self._worker.start()

    def notify(self) -> None:
        """New scores are in the outbox. Never blocks."""
        self._metrics.outbox.set(self._state.outbox_size())
        self._worker.wake()

    def _step(self) -> bool:
        try:
            self.send_due()
        except StateError as error:  # disk full: sent scores stay queued, sent again later
            self._unwritable(error)
        return False

    def _unwritable(self, error: StateError) -> None:
        """The outbox could not be marked: pause sending, doubling (not a post a second)."""
        self._unmarked += 1
        wait = self._backoff(self._unmarked - 1)
        self._resume_at = max(self._resume_at, self._clock() + wait)
        log.error("outbox_unwritable", error=str(error), retry_in_s=round(wait, 1))

    def flush(self, timeout_s: float) -> bool:
        """Send until the outbox is empty or `timeout_s` passes; True when empty.

        Waits for backoffs and `Retry-After` that end before the deadline. Returns
        by the deadline even when a push hangs: the sending runs in a daemon thread
        that is abandoned then (the scores stay in the outbox for the next run).
        """
        return self._flush(Deadline.within(timeout_s))

    def _flush(self, deadline: Deadline) -> bool:
        done = threading.Event()
        result: list[bool] = []

        def send() -> None:
            try:
                result.append(self._flush_until(deadline))
            except StateError as error:
                self._unwritable(error)
            except Exception:  # the outbox keeps the scores
                log.exception("dispatcher_failed")
            finally:
                done.set()

        thread = threading.Thread(target=send, name="observer-flush", daemon=True)
        self._flushing = thread
        thread.start()
        if not done.wait(deadline.left()):
            log.warning("score_push_abandoned", reason="a push was still running at the deadline")
            return False
        return bool(result and result[0])

    def _flush_until(self, deadline: Deadline) -> bool:
        while True:
            self.send_due(deadline)
            if self._state.outbox_size() == 0:
                return True
            next_due = self._state.next_due()
            remaining = deadline.left()
            if next_due is None or remaining <= 0:
                return self._state.outbox_size() == 0
            wait = max(0.0, max(next_due, self._resume_at) - self._clock())
            if wait >= remaining:
                return False
            if self._stop.wait(min(wait, remaining)) and wait > 0:
                return False

    def shutdown(self, deadline: Deadline, *, flush: bool = True) -> tuple[bool, bool]:
        """A last flush by `deadline` (unless `flush` is false), then the worker stopped by
        it: (whether the outbox is empty, whether every thread that sends has ended, so the
        state may be closed).

        Idempotent: a second call returns at once with the same answers, as they are now.
        """
        if flush and not self._stop.is_set():
            self._flush(deadline)
        ended = self._worker.stop(deadline)
        flushing = self._flushing
        if flushing is not None:
            flushing.join(deadline.left())
            ended = ended and not flushing.is_alive()
        return self._state.outbox_size() == 0, ended

    # -- sending --------------------------------------------------------------

    def send_due(self, until: Deadline | None = None) -> int:
        """Send every due batch now (none begun after `until`: a flush abandoned at its
        deadline sends no more); returns how many scores were acknowledged."""
        acknowledged = 0
        with self._send_lock:
            while not self._stop.is_set() and self._clock() >= self._resume_at:
                if until is not None and until.left() <= 0:
                    break
                pending = self._state.due(self._clock(), self._batch_size, self._batch_bytes)
                if not pending:
                    break
                attempts = max(p.attempts for p in pending)
                sent: int | None = 0
                for op in ("delete", "upsert"):
                    batch = [p.score for p in pending if p.op == op]
                    if batch and sent is not None:
                        done = self._send(batch, attempts, op)
                        sent = None if done is None else sent + done
                if sent is None:
                    break
                acknowledged += sent
        self._metrics.outbox.set(self._state.outbox_size())
        return acknowledged

    def _backoff(self, attempts: int) -> float:
        # Scheduled in the outbox rather than slept: observer.retry's policy, step by step.
        return backoff_s(attempts + 1, base_s=2.0, max_s=self._max_backoff_s)

    def _send(self, batch: Sequence[ScoreEvent], attempts: int, op: Op = "upsert") -> int | None:
        """One batch; the number acknowledged, or None when sending must pause."""
        with self.tracer.start_as_current_span(
            "observer.score_batch_pushed",
            attributes={"observer.batch.size": len(batch), "observer.batch.op": op},
        ):
            return self._send_batch(batch, attempts, op)

    def _send_batch(self, batch: Sequence[ScoreEvent], attempts: int, op: Op) -> int | None:
        try:
            result = self.sink.send(batch) if op == "upsert" else self.sink.delete(batch)
        except RateLimited as error:
            wait = (
                error.retry_after_s if error.retry_after_s is not None else self._backoff(attempts)
            )
            if op == "delete":
                # Deletes have a bucket of their own (50 a day on Hobby): its Retry-After
                # holds only the deletes, scheduled in the outbox; posts go on.
                self._defer(batch, wait, "rate_limited", error, pause_all=False)
                return 0
            self._defer(batch, wait, "rate_limited", error)
            return None
        except AuthRejected as error:
            self.auth_failed = True
            self._defer(batch, max(60.0, self._backoff(attempts)), "auth", error)
            return None
        except Misdirected as error:  # not a bad score: every post goes the same way
            self._defer(batch, max(60.0, self._backoff(attempts)), "misdirected", error)
            return None
        except Rejected as error:
            if len(batch) > 1:
                # One bad score must not sink its neighbours: send them one by one.
                _pushed("split")
                return sum(self._send([score], attempts, op) or 0 for score in batch)
            self._state.acknowledge(batch, op)
            self._metrics.scores_dropped.labels(reason="rejected").inc()
            self.refused += 1
            _pushed("rejected", failed=True)
            log.error(
                "score_dropped",
                reason="rejected",
                score=batch[0].name,
                trace_id=batch[0].trace_id,
                error=str(error),
            )
            return 0
        except RemoteError as error:
            self._defer(batch, self._backoff(attempts), push_error_kind(error), error)
            return None
        self.auth_failed = False
        self.last_error = None
        self.last_error_kind = None
        delivered = self._state.acknowledge(batch, op)
        self._unmarked = 0
        now = self._clock()
        for _trace_id, activity in delivered:
            # A clock behind the trace's (Langfuse's, or the app's) is no negative latency.
            self._metrics.trace_to_score.observe(max(0.0, now - activity))
        if op == "delete":
            self._metrics.scores_deleted.inc(result.accepted)
            log.info("scores_deleted", count=result.accepted, reason="no longer apply")
            return result.accepted
        self._metrics.scores_pushed.inc(result.accepted)
        self.delivered += result.accepted
        _pushed("ok" if not result.rejected else "partly_rejected")
        trace.get_current_span().set_attribute("observer.batch.accepted", result.accepted)
        if result.rejected:
            self._metrics.scores_dropped.labels(reason="rejected").inc(result.rejected)
            self.refused += result.rejected
            log.error(
                "score_dropped",
                reason="rejected",
                count=result.rejected,
                errors=list(result.errors)[:5],
            )
        return result.accepted

    def _defer(
        self,
        batch: Sequence[ScoreEvent],
        wait_s: float,
        kind: str,
        error: RemoteError,
        *,
        pause_all: bool = True,
    ) -> None:
        self._state.retry_later(batch, self._clock() + wait_s, str(error))
        # The whole sink waits, not only this batch: a 429's Retry-After, or a backoff after
        # an outage, holds every batch (no burst of failing posts, on shutdown neither).
        if pause_all:
            self._resume_at = max(self._resume_at, self._clock() + wait_s)
        _pushed(kind, failed=True)
        self._metrics.push_errors.labels(kind=kind).inc()
        self._metrics.scores_retried.inc(len(batch))
        self.last_error = str(error)
        self.last_error_kind = kind
        answered = {} if error.status is None else {"status": error.status}
        log.warning(
            "score_push_failed",
            kind=kind,
            **answered,
            scores=len(batch),
            retry_in_s=round(wait_s, 1),
            error=str(error),
        )
