"""Executing batches on a worker: take them through the one acquire path, keep each lease alive
while Spark works, then commit or fail each through the lifecycle.

The Celery task (workers/tasks.py), a nudge for one job, only calls `job_work`; the executors
(workers/executors.py) run the Spark side on the plain-dict spec that `workers/specs.py` builds.
`batch_execute` runs one named batch, if it may start, the same way.
"""

import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)

from inventory.models import Batch, BatchStatus, Job, WatermarkType
from inventory.services import dispatch, lifecycle
from inventory.services.errors import Conflict, InvalidInput, NotFound, StaleAttempt
from inventory.sources.items import ItemSource
from inventory.sources.registry import source_for_connector
from workers.chains import downstream_nudge
from workers.specs import batch_spec

log = logging.getLogger(__name__)


def worker_name() -> str:
    """host:pid of this process: what a batch's `worker` field shows, and what an operator kills."""
    return f"{socket.gethostname()}:{os.getpid()}"


# ---- executing one batch -----------------------------------------------------------------------


class Heartbeat(threading.Thread):
    """Extends a running attempt's lease every lease/3 seconds until stopped or the lease is lost.

    `on_lost` runs once, in this thread, when the core says the attempt no longer holds the lease
    (e.g. the reaper gave the batch to another worker): the executor uses it to cancel Spark work.
    """

    def __init__(self, *, batch_id: int, attempt: int, lease_seconds: int, on_lost=None):
        super().__init__(name=f"heartbeat-{batch_id}", daemon=True)
        self.batch_id = batch_id
        self.attempt = attempt
        self.lease_seconds = lease_seconds
        self.interval = max(lease_seconds / 3, 0.2)
        self.on_lost = on_lost
        self.lost: str = ""
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.wait(self.interval):
                try:
                    lifecycle.batch_heartbeat(
                        batch_id=self.batch_id,
                        attempt=self.attempt,
                        lease_seconds=self.lease_seconds,
                    )
                except (StaleAttempt, NotFound) as exc:
                    self.lost = str(exc)
                    log.warning("batch %s: %s; stopping its work", self.batch_id, exc)
                    if self.on_lost is not None:
                        self.on_lost()
                    return
                except Exception:  # a database hiccup: the next beat may succeed
                    log.exception("batch %s: heartbeat failed", self.batch_id)
                    close_old_connections()
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=self.interval + 5)


class BatchFailure(Exception):
    """An executor's failure, carrying the error dict stored on the batch ({type, message, detail})."""

    def __init__(self, error: dict):
        super().__init__(error.get("message", ""))
        self.error = error


@dataclass
class ExecuteOutcome:
    batch_id: int
    status: str
    attempt: int = 0
    detail: str = ""
    retry_in: float | None = None


# executor(spec, cancel_event) -> result dict; raises BatchFailure
Executor = Callable[[dict, threading.Event], dict]


def batch_execute(
    *, batch_id: int, executor_for: Callable[[str], Executor], worker: str | None = None
) -> ExecuteOutcome:
    """Run one named batch end to end, if it may start now.

    Idempotent: a batch that is not queued (already running elsewhere, finished, cancelled) is left
    alone; a failed batch whose backoff has passed is taken back first. A backfill batch waits
    when its backfill already has `max_concurrency` batches running, or is not running.
    """
    worker = worker or worker_name()
    try:
        started = _with_db_retries(
            lambda: _start_if_ours(batch_id=batch_id, worker=worker),
            what="start",
            batch_id=batch_id,
            budget=START_RETRY_SECONDS,
        )
    except (OperationalError, InterfaceError) as exc:
        # nothing started: the task comes back later (and the database still holds the batch)
        return ExecuteOutcome(
            batch_id, "deferred", detail=_first_line(exc), retry_in=DEFERRED_RETRY_SECONDS
        )
    if isinstance(started, ExecuteOutcome):
        return started
    return _run_started(started, executor_for=executor_for)


# A nudge's worker stops taking the job's batches after this long, and nudges the job again so
# that other jobs' nudges, queued behind this one, get the worker's thread in turn.
WORK_SECONDS = 60.0


def job_work(
    *,
    job_id: int,
    executor_for: Callable[[str], Executor],
    worker: str | None = None,
    has_room: Callable[[], bool] = lambda: True,
) -> list[ExecuteOutcome]:
    """Take the job's batches through acquire, with the job's `max_concurrency` as the limit,
    and run them one after another while acquire hands one out and `has_room()` (a free batch
    slot in this process): after each commit or failure the next acquire plans or claims the
    next piece of work, so a backlog keeps moving without a message per batch.

    The first batch taken also nudges the job once more when it may run several at once, so one
    nudge fills the job's `max_concurrency`. A retry after a backoff is nudged with that delay;
    a lost nudge is made good by beat's sweep (dispatch.batches_dispatch_due).
    """
    worker = worker or worker_name()
    job = Job.objects.select_related("connector").filter(pk=job_id).first()
    if job is None:
        return []
    deadline = time.monotonic() + WORK_SECONDS
    outcomes = []
    source = source_for_connector(job.connector)  # once: acquire plans and the spec reads with it
    while has_room():
        try:
            batch = _with_db_retries(
                lambda: lifecycle.batch_acquire(
                    job=job, worker=worker, limit=job.max_concurrency, source=source
                ),
                what="acquire",
                job_id=job_id,
                budget=START_RETRY_SECONDS,
            )
        except (Conflict, NotFound, InvalidInput) as exc:  # paused, inactive, gone, misconfigured
            log.info("job %s: nothing acquired (%s)", job_id, exc)
            break
        except (OperationalError, InterfaceError) as exc:
            log.warning("job %s: acquire failed (%s); nudged again", job_id, _first_line(exc))
            dispatch.nudge(job_id, countdown=DEFERRED_RETRY_SECONDS)
            break
        if batch is None:
            break
        if not outcomes and job.max_concurrency > 1:
            dispatch.nudge(job_id)
        outcome = _run_started(batch, executor_for=executor_for, source=source)
        log.info(
            "batch %s attempt %s: %s %s",
            outcome.batch_id,
            outcome.attempt,
            outcome.status,
            outcome.detail[:200],
        )
        outcomes.append(outcome)
        if outcome.status == BatchStatus.SUCCEEDED:
            # jobs reading this one's commits (job_output connectors) see the new commit at once
            downstream_nudge(job=job)
        if outcome.retry_in is not None:
            dispatch.nudge(job_id, countdown=outcome.retry_in + RETRY_SLACK_SECONDS)
        if time.monotonic() > deadline:
            dispatch.nudge(job_id)
            break
    return outcomes


def _run_started(
    batch: Batch, *, executor_for: Callable[[str], Executor], source: ItemSource | None = None
) -> ExecuteOutcome:
    """A batch this worker started (its attempt and lease are ours): run it, then commit or fail
    it. Database errors never escape (see _with_db_retries)."""
    job = batch.job
    lease = job.lease_seconds
    cancel = threading.Event()
    heartbeat = Heartbeat(
        batch_id=batch.pk, attempt=batch.attempt, lease_seconds=lease, on_lost=cancel.set
    )
    heartbeat.start()
    try:
        spec = batch_spec(batch=batch, source=source)
        result = executor_for(job.executor)(spec, cancel)
    except BaseException as exc:  # includes Celery's SoftTimeLimitExceeded
        heartbeat.stop()
        error = exc.error if isinstance(exc, BatchFailure) else _error_from(exc)
        if heartbeat.lost:
            return ExecuteOutcome(batch.pk, "stale", batch.attempt, heartbeat.lost)
        failed = _fail(batch, error)
        if not isinstance(exc, Exception):
            raise
        return failed
    # the heartbeat keeps the lease alive while the commit retries a transient database error
    try:
        if heartbeat.lost:
            return ExecuteOutcome(batch.pk, "stale", batch.attempt, heartbeat.lost)
        watermark_value = None
        if job.watermark_type != WatermarkType.INT:
            watermark_value = result.get("watermark")
        return _commit(
            batch,
            result=result,
            watermark_value=watermark_value,
            budget=min(max(lease, 10), COMMIT_RETRY_MAX_SECONDS),
        )
    finally:
        heartbeat.stop()


# Database errors in the worker's own calls (start, commit, fail) are retried when a retry can cure
# them (a deadlock or serialization victim, a broken or restarted connection) and never escape
# batch_execute: a commit that cannot get a verdict leaves the batch to its lease, so the reaper
# gives it to another attempt, whose sink write replaces this one's output.
START_RETRY_SECONDS = 10.0
COMMIT_RETRY_MAX_SECONDS = 120.0
DEFERRED_RETRY_SECONDS = 5.0
# a retry's nudge comes a little past its backoff, so that acquire finds the batch due
RETRY_SLACK_SECONDS = 0.5


def _with_db_retries(call, *, what: str, budget: float, batch_id: int = 0, job_id: int = 0):
    """`call()`, tried again with backoff after a transient database error until `budget` seconds
    have passed; then the last error is raised. Inside a caller's transaction nothing is retried
    (that transaction is broken and belongs to the caller)."""
    deadline = time.monotonic() + budget
    delay = 0.1
    while True:
        try:
            return call()
        except (OperationalError, InterfaceError) as exc:
            if connection.in_atomic_block or time.monotonic() + delay > deadline:
                raise
            log.warning(
                "%s %s: %s failed (%s); retrying in %.1f s",
                "batch" if batch_id else "job",
                batch_id or job_id,
                what,
                _first_line(exc),
                delay,
            )
            # a broken connection is replaced on the next query
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - closing a dead connection may fail; it is gone
                pass
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def _commit(batch: Batch, *, result: dict, watermark_value, budget: float) -> ExecuteOutcome:
    def succeed() -> ExecuteOutcome:
        try:
            lifecycle.batch_succeed(
                batch_id=batch.pk,
                attempt=batch.attempt,
                result=result,
                watermark_value=watermark_value,
            )
        except InvalidInput as exc:
            # a reported value the job cannot store: failed with the reason, never left running
            return _fail(
                batch,
                {
                    "type": "InvalidWatermark",
                    "message": f"{exc.field}: {exc.message}",
                    "detail": "the batch's output was written; its next attempt replaces it",
                },
            )
        except StaleAttempt as exc:
            # an earlier try may have committed just before its connection broke
            if Batch.objects.filter(
                pk=batch.pk, status=BatchStatus.SUCCEEDED, attempt=batch.attempt
            ).exists():
                return ExecuteOutcome(batch.pk, BatchStatus.SUCCEEDED, batch.attempt)
            return ExecuteOutcome(batch.pk, "stale", batch.attempt, str(exc))
        return ExecuteOutcome(batch.pk, BatchStatus.SUCCEEDED, batch.attempt)

    try:
        return _with_db_retries(succeed, what="commit", batch_id=batch.pk, budget=budget)
    except (OperationalError, InterfaceError) as exc:
        log.error(
            "batch %s attempt %s: no commit verdict (%s); its lease decides",
            batch.pk,
            batch.attempt,
            _first_line(exc),
        )
        return ExecuteOutcome(batch.pk, "unconfirmed", batch.attempt, _first_line(exc))
    except DatabaseError as exc:
        # a refusal no retry cures (e.g. a value the watermark rejects): recorded on the batch
        return _fail(batch, _error_from(exc))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]


def _start_if_ours(*, batch_id: int, worker: str) -> Batch | ExecuteOutcome:
    with transaction.atomic():
        batch = lifecycle.batch_lock_for_start(batch_id)
        if batch is None:
            return ExecuteOutcome(batch_id, "missing", detail="no such batch")
        # a failed batch whose backoff is over is taken back first (due: the database's clock)
        status = batch.status
        if status == BatchStatus.FAILED and batch.is_due:
            lifecycle.batches_requeue_due(batch_id=batch_id)
            status = BatchStatus.QUEUED
        if status != BatchStatus.QUEUED:
            return ExecuteOutcome(batch_id, "ignored", batch.attempt, f"batch is {status}")
        if not batch.is_due:
            return ExecuteOutcome(batch_id, "ignored", batch.attempt, "backoff not over")
        blocked = lifecycle.job_blocked_reason(batch.job) or lifecycle.backfill_start_blocked(batch)
        if blocked:
            return ExecuteOutcome(batch_id, "ignored", batch.attempt, blocked)
        try:
            return lifecycle.batch_start(batch_id=batch_id, worker=worker)
        except Conflict as exc:
            return ExecuteOutcome(batch_id, "ignored", batch.attempt, str(exc))


def _fail(batch: Batch, error: dict) -> ExecuteOutcome:
    try:
        failed = _with_db_retries(
            lambda: lifecycle.batch_fail(batch_id=batch.pk, attempt=batch.attempt, error=error),
            what="recording the failure",
            batch_id=batch.pk,
            budget=min(max(batch.job.lease_seconds, 10), COMMIT_RETRY_MAX_SECONDS),
        )
    except StaleAttempt as exc:
        return ExecuteOutcome(batch.pk, "stale", batch.attempt, str(exc))
    except DatabaseError as exc:
        log.error("batch %s attempt %s: failure not recorded (%s)", batch.pk, batch.attempt, exc)
        return ExecuteOutcome(batch.pk, "unrecorded", batch.attempt, _first_line(exc))
    retry_in = None
    if failed.status == BatchStatus.FAILED and failed.next_attempt_at is not None:
        # both times from the database's clock
        retry_in = max((failed.next_attempt_at - failed.db_now).total_seconds(), 0.0)
    # the stored (redacted) message: the outcome is logged and returned by the Celery task
    return ExecuteOutcome(
        batch.pk, failed.status, batch.attempt, failed.error.get("message", ""), retry_in
    )


def _error_from(exc: BaseException) -> dict:
    message = str(exc).strip() or type(exc).__name__
    return {
        "type": type(exc).__name__,
        "message": message.splitlines()[0][:2000],
        "detail": "".join(traceback.format_exception(exc))[-4000:],
    }
